"""Engine worker lifecycle without vLLM: the real worker and pool driving a stand-in ``vllm``.

A fake ``vllm`` (and ``torch``) package, put first on ``sys.path`` so that the spawned worker
imports it, has the parts of vLLM's interface the worker uses: ``LLM(target, **kwargs)`` that
starts an "engine core" child process titled ``VLLM::EngineCore`` in the worker's process
group, ``generate``, ``get_metrics``, ``llm_engine.engine_core.shutdown()``, the engine core
process manager, and ``EngineDeadError``. The model path names the behaviour.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.engines import local as local_module
from pytest_specdecode.engines import placement as placement_module
from pytest_specdecode.engines import pool as pool_module
from pytest_specdecode.engines import worker
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.hardware import Device
from pytest_specdecode.engines.interrupts import interrupts_held
from pytest_specdecode.engines.local import Engine
from pytest_specdecode.engines.memory import group_pids
from pytest_specdecode.engines.placement import out_of_memory
from pytest_specdecode.engines.pool import EnginePool
from pytest_specdecode.engines.protocol import Placement
from pytest_specdecode.errors import EngineCrashedError, EngineStartError

FAKE_TORCH = """
class TorchVersion(str):
    pass

__version__ = TorchVersion("2.13.0+cpu")
"""

FAKE_VLLM = '''
"""A stand-in for vLLM: behaviour chosen by the model path's last part."""
import os, signal, subprocess, sys, time
from types import SimpleNamespace

__version__ = "0.0.fake"


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class _Core:
    """The engine core: a child process titled like vLLM's, in the worker's process group."""

    def __init__(self):
        self.name = "EngineCore"
        self._popen = subprocess.Popen(
            ["VLLM::EngineCore", "-c", "import time; time.sleep(600)"], executable=sys.executable
        )
        self.pid = self._popen.pid

    @property
    def exitcode(self):
        return self._popen.poll()

    def join(self, timeout=None):
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


#: What vLLM 0.32's processes logged when the model worker failed an assertion (shortened):
#: the worker's traceback, then the engine core's.
_W = "(Worker pid=14344) ERROR 12-04 16:50:37 [multiproc_executor.py:1063] "
_C = "(EngineCore pid={pid}) ERROR 12-04 16:50:37 [core.py:1512] "
CORE_ERROR = [
    _W + "Traceback (most recent call last):",
    _W + '    assert not SYNTHETIC_MODE, "Synthetic acceptance not supported with CPU sampling"',
    _W + "AssertionError: Synthetic acceptance not supported with CPU sampling",
    _C + "EngineCore encountered a fatal error.",
    _C + "Traceback (most recent call last):",
    _C + "    raise RuntimeError(",
    _C + "RuntimeError: Worker failed with error 'Synthetic acceptance not supported with CPU "
    "sampling', please check the stack trace above for the root cause",
]


class LLM:
    def __init__(self, model, **kwargs):
        print("fake vllm: non-default args:", kwargs, flush=True)
        self.behaviour = os.path.basename(model)
        if self.behaviour == "no-config":
            raise ValueError(
                "Invalid repository ID or local directory specified: %r. Please verify the "
                "following requirements: ... ensure the presence of a 'config.json'." % model
            )
        self.core = _Core()
        with open(kwargs["pids_file"], "w") as fh:
            fh.write(f"{os.getpid()} {self.core.pid}")
        if self.behaviour == "hang":
            time.sleep(600)
        self.llm_engine = SimpleNamespace(
            vllm_config=SimpleNamespace(
                cache_config=SimpleNamespace(num_gpu_blocks=4, block_size=16)
            ),
            engine_core=SimpleNamespace(
                shutdown=self._shutdown,
                resources=SimpleNamespace(engine_manager=SimpleNamespace(processes=[self.core])),
            ),
        )

    def _shutdown(self):
        print("fake vllm: shutdown", flush=True)

    def generate(self, prompts, params, use_tqdm=True):
        if self.behaviour == "core-raises":  # logs vLLM's lines for a worker's error, then dies
            for line in CORE_ERROR:
                print(line.format(pid=self.core.pid), flush=True)
        if self.behaviour in ("core-dies", "core-raises"):
            os.kill(self.core.pid, signal.SIGKILL)
            self.core.join()
        if self.core.exitcode is not None:
            from vllm.v1.engine.exceptions import EngineDeadError

            raise EngineDeadError()
        if prompts == ["slow"]:
            time.sleep(3)
        token = SimpleNamespace(token_ids=[1, 2, 3], text="abc")
        return [SimpleNamespace(outputs=[token], metrics=None) for _ in prompts]

    def get_metrics(self):
        return []
'''

FAKE_EXCEPTIONS = """
class EngineDeadError(Exception):
    def __init__(self):
        super().__init__(
            "EngineCore encountered an issue. See stack trace (above) for the root cause."
        )
"""


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``vllm``/``torch`` first on ``sys.path`` (the spawned worker inherits it)."""
    root = tmp_path / "fake_site"
    for name, text in {
        "torch/__init__.py": FAKE_TORCH,
        "vllm/__init__.py": FAKE_VLLM,
        "vllm/sampling_params.py": "class StructuredOutputsParams:\n    pass\n",
        "vllm/v1/__init__.py": "",
        "vllm/v1/engine/__init__.py": "",
        "vllm/v1/engine/exceptions.py": FAKE_EXCEPTIONS,
    }.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(root))
    # not vLLM: not in the session's count of engine starts
    monkeypatch.delenv(pool_module.STARTS_LOG_ENV, raising=False)
    monkeypatch.setattr(placement_module, "find_iomp", lambda: None)
    real_place = placement_module.place

    def place(config: EngineConfig, device: Device, max_engines: int, **kw: Any) -> Placement:
        """The pool's placement, plus where the fake engine writes its pids."""
        placed = real_place(config, device, max_engines, **kw)
        kwargs = {**placed.engine_kwargs, "pids_file": str(tmp_path / "pids")}
        return Placement(kwargs, placed.memory, placed.env)

    monkeypatch.setattr(pool_module, "place", place)
    return tmp_path


@pytest.fixture(autouse=True)
def _ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here even when pytest started with SIGINT ignored (a
    job started in the background by a non-interactive shell inherits SIG_IGN)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _config(behaviour: str) -> EngineConfig:
    return EngineConfig.create(f"/models/{behaviour}", None, {})


def _placement(tmp: Path) -> Placement:
    return Placement({"pids_file": str(tmp / "pids")}, "test", {})


def _pool(tmp: Path, messages: list[str]) -> EnginePool:
    return EnginePool(2, timeout=60, progress=messages.append, device=Device("cpu", "test"))


def _pids(tmp: Path, wait: float = 60.0) -> tuple[int, int]:
    """The worker's pid and its engine core's, once the fake LLM has started the core."""
    deadline = time.monotonic() + wait
    path = tmp / "pids"
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            worker_pid, core_pid = path.read_text().split()
            return int(worker_pid), int(core_pid)
        time.sleep(0.05)
    raise AssertionError("the fake engine never started its core")


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def _gone(pid: int, wait: float = 15.0) -> bool:
    deadline = time.monotonic() + wait
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _interrupt_when_started(tmp: Path) -> threading.Thread:
    """Ctrl-C this process once the fake engine has started its core (the start is waiting)."""

    def interrupt() -> None:
        _pids(tmp)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_during_an_engine_start_kills_the_worker_and_its_children(fake_vllm: Path) -> None:
    messages: list[str] = []
    pool = _pool(fake_vllm, messages)
    thread = _interrupt_when_started(fake_vllm)
    with pytest.raises(KeyboardInterrupt):
        pool.acquire(_config("hang"))
    thread.join()
    worker_pid, core_pid = _pids(fake_vllm)
    assert _gone(worker_pid) and _gone(core_pid)
    # nothing left for multiprocessing's exit-time join to wait on forever
    assert not [p for p in multiprocessing.active_children() if p.name == "specdecode-engine"]
    assert not local_module._RUNNING
    pool.close()
    assert not os.path.exists(pool.log_dir)  # an interrupted engine did not fail: no log kept


def test_leaving_the_interpreter_without_closing_kills_the_engines(fake_vllm: Path) -> None:
    """Without it, multiprocessing's exit-time join waits forever on the worker."""
    script = f"""
import sys
sys.path.insert(0, {str(fake_vllm / "fake_site")!r})
from pytest_specdecode.engines.local import Engine
from pytest_specdecode.engines.protocol import Placement
from pytest_specdecode.engines.config import EngineConfig
config = EngineConfig.create("/models/ok", None, {{}})
placement = Placement({{"pids_file": {str(fake_vllm / "pids")!r}}}, "test", {{}})
engine = Engine(config, placement, timeout=60, log_dir={str(fake_vllm)!r})
"""
    subprocess.run([sys.executable, "-c", script], timeout=120, check=True)
    worker_pid, core_pid = _pids(fake_vllm)
    assert _gone(worker_pid) and _gone(core_pid)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_caller_killed_outright_takes_its_engines_with_it(fake_vllm: Path, method: str) -> None:
    """No exit handler runs, and the worker, busy starting, reads no command: it notices its
    caller's end of the launch pipe closing (a forked worker's parent process is the fork
    server, which outlives its caller while its workers run)."""
    script = f"""
import os, signal, sys, time
sys.path.insert(0, {str(fake_vllm / "fake_site")!r})
from pytest_specdecode.engines.local import Engine
from pytest_specdecode.engines.protocol import Placement
from pytest_specdecode.engines.config import EngineConfig
config = EngineConfig.create("/models/hang", None, {{}})
pids = {str(fake_vllm / "pids")!r}
placement = Placement({{"pids_file": pids}}, "test", {{}})
engine = Engine(config, placement, timeout=60, log_dir={str(fake_vllm)!r}, wait=False)
while not (os.path.exists(pids) and open(pids).read().strip()):
    time.sleep(0.05)
os.kill(os.getpid(), signal.SIGKILL)
"""
    env = {**os.environ, "PYTEST_SPECDECODE_START_METHOD": method}
    subprocess.run([sys.executable, "-c", script], timeout=120, env=env, check=False)
    worker_pid, core_pid = _pids(fake_vllm)
    assert _gone(worker_pid) and _gone(core_pid)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_during_the_worker_start_is_held_until_it_is_registered(
    signum: signal.Signals,
) -> None:
    reached = []
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as Ctrl-C
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held():
                signal.raise_signal(signum)
                time.sleep(0.01)  # the handler has run by now: it must not have raised
                reached.append(True)
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert reached == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_while_a_pool_holds_engines_is_handled_as_ctrl_c(fake_vllm: Path) -> None:
    """SIGTERM raises KeyboardInterrupt while engines run, so the same clean-up as Ctrl-C
    runs: the engines end and the log folder goes. Python's default SIGTERM would end the
    process at once, leaving the folder."""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    pool = _pool(fake_vllm, [])
    pool.acquire(_config("ok"))
    worker_pid, core_pid = _pids(fake_vllm)
    # (checked first: Python's default action would end this test run)
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    with pytest.raises(KeyboardInterrupt, match=r"SIGTERM \(handled as Ctrl-C\)"):
        signal.raise_signal(signal.SIGTERM)
        time.sleep(1)
    pool.close()
    assert _gone(worker_pid) and _gone(core_pid)
    assert not os.path.exists(pool.log_dir)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # given back at close


def test_a_sigterm_handler_of_the_callers_own_is_left_alone(fake_vllm: Path) -> None:
    def own(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, own)
    try:
        pool = _pool(fake_vllm, [])
        pool.acquire(_config("ok"))
        assert signal.getsignal(signal.SIGTERM) is own
        pool.close()
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_end_of_the_connection_shuts_vllm_down_and_kills_the_process_group(
    fake_vllm: Path,
) -> None:
    engine = Engine(_config("ok"), _placement(fake_vllm), timeout=60, log_dir=str(fake_vllm))
    worker_pid, core_pid = _pids(fake_vllm)
    assert engine.alive and _running(core_pid)
    engine._conn.close()  # the parent goes away without a goodbye
    engine._process.join(30)
    assert engine._process.exitcode == 0
    assert "fake vllm: shutdown" in Path(engine.log_path).read_text()
    assert _gone(core_pid)
    assert group_pids(worker_pid) == []
    engine.kill()


def test_ready_info_is_plain_json_types(fake_vllm: Path) -> None:
    engine = Engine(_config("ok"), _placement(fake_vllm), timeout=60, log_dir=str(fake_vllm))
    try:
        assert type(engine.info["torch_version"]) is str  # not torch's TorchVersion
        assert engine.info["torch_version"] == "2.13.0+cpu"
        assert json.loads(json.dumps(engine.info)) == engine.info
        assert engine.info["kv_cache_tokens"] == 64
    finally:
        engine.close()


def test_plain_turns_subclasses_and_tuples_into_json_types() -> None:
    class Version(str):
        pass

    info = worker.plain({"v": Version("1.0"), "t": (1, 2), "nested": {"x": Version("y")}})
    assert info == {"v": "1.0", "t": [1, 2], "nested": {"x": "y"}}
    assert type(info["v"]) is str and type(info["nested"]["x"]) is str


def test_a_dead_engine_core_fails_the_call_with_its_cause_and_is_replaced(
    fake_vllm: Path,
) -> None:
    messages: list[str] = []
    pool = _pool(fake_vllm, messages)
    config = _config("core-dies")
    first = pool.acquire(config)
    worker_pid, core_pid = _pids(fake_vllm)
    with pytest.raises(EngineCrashedError) as excinfo:
        first.generate(["hello"], {"max_tokens": 4})
    message = str(excinfo.value)
    assert "vLLM's engine core died during generate" in message
    assert f"process EngineCore (pid {core_pid}) killed by SIGKILL" in message
    assert "EngineDeadError" in message
    assert f"--- last lines of the engine log {first.log_path} (kept) ---" in message
    assert "fake vllm: non-default args" in message  # the log tail
    assert "specdecode worker: vLLM's engine core died: process EngineCore" in message
    assert not first.alive and _gone(worker_pid)
    (fake_vllm / "pids").unlink()
    second = pool.acquire(config)
    assert f"{config.describe()} is no longer running; starting a fresh one" in messages
    assert second is not first and second.alive
    pool.close()
    assert pool.kept_logs() == [first.log_path]  # the healthy engine's log is removed
    assert os.listdir(pool.log_dir) == [os.path.basename(first.log_path)]


def test_a_dead_engine_core_s_own_error_from_the_log_is_in_the_message(fake_vllm: Path) -> None:
    """vLLM's engine core dies of its model worker's error, which only the engine log holds:
    the error's lines lead the message, once each (the worker's and the core's)."""
    engine = Engine(
        _config("core-raises"), _placement(fake_vllm), timeout=60, log_dir=str(fake_vllm)
    )
    with pytest.raises(EngineCrashedError) as excinfo:
        engine.generate(["hello"], {"max_tokens": 4})
    message = str(excinfo.value)
    head = message.split("--- last lines of the engine log")[0]
    assert "vLLM's engine core died during generate: process EngineCore" in head
    assert head.endswith(
        "The engine log's errors:\n"
        "  AssertionError: Synthetic acceptance not supported with CPU sampling\n"
        "  RuntimeError: Worker failed with error 'Synthetic acceptance not supported with CPU "
        "sampling', please check the stack trace above for the root cause\n"
        "The pool starts a fresh engine on its next use.\n"
    ), head
    log = Path(engine.log_path).read_text()
    assert log.count("specdecode worker: vLLM's engine core died") == 1
    engine.kill()


def test_an_engine_core_dying_while_idle_is_noticed_before_reuse(fake_vllm: Path) -> None:
    messages: list[str] = []
    pool = _pool(fake_vllm, messages)
    config = _config("ok")
    first = pool.acquire(config)
    _, core_pid = _pids(fake_vllm)
    assert pool.acquire(config) is first
    os.kill(core_pid, signal.SIGKILL)
    assert _gone(core_pid)
    (fake_vllm / "pids").unlink()
    second = pool.acquire(config)
    assert second is not first
    assert f"{config.describe()} is no longer running; starting a fresh one" in messages
    pool.close()


def test_a_call_after_the_core_died_while_idle_reports_the_core(fake_vllm: Path) -> None:
    engine = Engine(_config("ok"), _placement(fake_vllm), timeout=60, log_dir=str(fake_vllm))
    _, core_pid = _pids(fake_vllm)
    os.kill(core_pid, signal.SIGKILL)
    assert _gone(core_pid)
    assert not engine.alive
    with pytest.raises(
        EngineCrashedError, match=rf"process EngineCore \(pid {core_pid}\) killed by SIGKILL"
    ):
        engine.generate(["hello"], {"max_tokens": 4})
    engine.kill()


def test_close_kills_a_worker_still_busy_with_an_interrupted_command(fake_vllm: Path) -> None:
    engine = Engine(_config("ok"), _placement(fake_vllm), timeout=60, log_dir=str(fake_vllm))
    worker_pid, core_pid = _pids(fake_vllm)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        engine.generate(["slow"], {"max_tokens": 4})
    timer.join()
    engine.close()
    # killed, not asked: a graceful close would have waited for the generate, then shut down
    assert "fake vllm: shutdown" not in Path(engine.log_path).read_text()
    assert _gone(worker_pid) and _gone(core_pid)


def test_a_start_failure_is_not_blamed_on_memory_and_its_log_is_kept(fake_vllm: Path) -> None:
    pool = _pool(fake_vllm, [])
    with pytest.raises(EngineStartError) as excinfo:
        pool.acquire(_config("no-config"))
    message = str(excinfo.value)
    assert "config.json" in message and "kv_cache_memory_bytes" in message  # from the log
    assert "ran out of memory" not in message
    pool.close()
    (kept,) = pool.kept_logs()
    assert f"--- last lines of the engine log {kept} (kept) ---" in message
    assert os.path.exists(kept)


def test_the_log_folder_is_removed_when_no_engine_failed(fake_vllm: Path) -> None:
    pool = _pool(fake_vllm, [])
    pool.acquire(_config("ok"))
    assert os.path.isdir(pool.log_dir)
    pool.close()
    assert not os.path.exists(pool.log_dir)
    assert pool.kept_logs() == []


def test_each_launched_start_is_one_line_in_the_starts_log(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PYTEST_SPECDECODE_STARTS_LOG: a line per engine whose process was launched, started or
    failed, from whichever process's pool started it."""
    log = fake_vllm / "starts.jsonl"
    monkeypatch.setenv(pool_module.STARTS_LOG_ENV, str(log))
    pool = _pool(fake_vllm, [])
    try:
        pool.acquire(_config("ok"))
        with pytest.raises(EngineStartError):
            pool.acquire(_config("no-config"))
    finally:
        pool.close()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["engine"], line["ok"], line["pid"]) for line in lines] == [
        (_config("ok").describe(), True, os.getpid()),
        (_config("no-config").describe(), False, os.getpid()),
    ]
    assert lines[0]["seconds"] > 0 and lines[0]["mode"] == "multiprocess"


#: What vLLM 0.32 printed for a model folder without ``config.json``, in a log that, like every
#: engine log, names the plugin's ``kv_cache_memory_bytes``.
MISSING_CONFIG = """\
(MainProcess pid=8642) INFO [api_utils.py:286] non-default args: {'kv_cache_memory_bytes': \
536870912, 'disable_log_stats': False, 'enforce_eager': True, 'model': '/tmp/draft'}
Traceback (most recent call last):
  File "vllm/engine/arg_utils.py", line 1955, in create_model_config
    return ModelConfig(
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, Invalid repository ID or local directory specified: '/tmp/draft'.
Please verify the following requirements:
1. Provide a valid Hugging Face repository ID.
2. Specify a local directory that contains a recognized configuration file.
   - For Hugging Face models: ensure the presence of a 'config.json'.
"""


@pytest.mark.parametrize(
    "text",
    [
        MISSING_CONFIG,
        "KeyError: 'gpu_memory_utilization'\nkv_cache_memory_bytes=536870912 (512 MiB)",
        "INFO Free memory on device (70.1/79.2 GiB) on startup. Desired GPU memory utilization "
        "is (0.45, 35.6 GiB).",
        "RuntimeError: the KV cache spec is empty; cache blocks: 0",
    ],
)
def test_failures_other_than_memory_get_no_memory_advice(text: str) -> None:
    assert not out_of_memory(text)


@pytest.mark.parametrize(
    "text",
    [
        # vLLM 0.32, CPU: the test_4_start_without_memory case (kv_cache_memory_bytes=2**50)
        "ValueError: Available memory on node 0 (21.1/23.4 GiB) on kv cache allocation is less "
        "than requested memory for kv (1048576.0 GiB).",
        "ValueError: Available memory on node 0 (3.0/23.4 GiB) on startup is less than desired "
        "CPU memory utilization (0.9, 21.1 GiB).",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "ValueError: To serve at least one request with the model's max seq len (4096), (2.0 GiB "
        "KV cache is needed, which is larger than the available KV cache memory (1.0 GiB).",
        "ValueError: Free memory on device cuda:0 (10.0/79.2 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 71.3 GiB).",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "(EngineCore pid=12) torch.cuda.OutOfMemoryError: CUDA error",
        "MemoryError",
        "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes",
    ],
)
def test_out_of_memory_is_read_from_vllm_and_torch_messages(text: str) -> None:
    assert out_of_memory(text)
