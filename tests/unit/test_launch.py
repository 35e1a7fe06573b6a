"""How engine workers are launched (engines/launch.py): forked from a fork server per launch
environment, which gives each worker the caller's environment of the moment; spawned on request
or when a server fails. The servers here preload nothing heavy (no torch, no vLLM)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection
from typing import Any

import pytest

from pytest_specdecode.engines import launch as launch_module
from pytest_specdecode.engines import local as local_module
from pytest_specdecode.engines.launch import START_METHOD_ENV, apply_environment, launch
from pytest_specdecode.errors import SpecDecodeWarning


def _report(conn: Connection, environ: Mapping[str, str] | None = None) -> None:
    """A worker's target: say what it sees, then exit."""
    apply_environment(environ)
    parent = multiprocessing.parent_process()
    conn.send(
        {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "caller": parent.pid if parent is not None else None,
            "env": dict(os.environ),
            "path": list(sys.path),
            "modules": sorted(sys.modules),
        }
    )
    conn.close()


def _facts() -> dict[str, Any]:
    """Launch one reporting worker and return what it saw."""
    mine, theirs = multiprocessing.Pipe()
    with local_module._main_not_rerun():
        process = launch(_report, (theirs,), "specdecode-test")
    theirs.close()
    assert mine.poll(60), "the worker never reported"
    facts: dict[str, Any] = mine.recv()
    process.join(30)
    assert process.exitcode == 0
    return facts


@pytest.fixture(autouse=True)
def _fresh_servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[OrderedDict[Any, Any]]:
    """Servers of this test only, preloading nothing heavy; let go of at its end."""
    servers: OrderedDict[Any, Any] = OrderedDict()
    monkeypatch.setattr(launch_module, "_servers", servers)
    monkeypatch.setattr(launch_module, "_broken", [])
    monkeypatch.setattr(launch_module, "PRELOAD", ("pytest_specdecode.engines.fork_server",))
    monkeypatch.setenv(START_METHOD_ENV, "forkserver")
    yield servers
    for server in servers.values():
        launch_module._let_go(server)


def test_workers_of_one_environment_are_forked_from_one_server() -> None:
    first, second = _facts(), _facts()
    assert first["ppid"] == second["ppid"] != os.getpid()  # the server, not the caller
    assert first["caller"] == second["caller"] == os.getpid()  # whose end of the pipe it watches
    assert first["pid"] != second["pid"]


def test_a_worker_gets_the_callers_environment_and_path_of_its_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "one")
    first = _facts()
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "two")  # changes from test to test: same server
    second = _facts()
    assert second["ppid"] == first["ppid"]
    assert (first["env"]["PYTEST_CURRENT_TEST"], second["env"]["PYTEST_CURRENT_TEST"]) == (
        "one",
        "two",
    )
    assert second["env"] == dict(os.environ)
    assert "PYTHONPATH" not in os.environ or second["env"]["PYTHONPATH"] == os.environ["PYTHONPATH"]
    assert second["path"] == sys.path


def test_another_environment_or_path_gets_its_own_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    first = _facts()
    monkeypatch.setenv("SPECDECODE_TEST_LAUNCH", "1")  # e.g. LD_PRELOAD: read at exec
    second = _facts()
    assert second["env"]["SPECDECODE_TEST_LAUNCH"] == "1"
    monkeypatch.syspath_prepend(str(tmp_path))  # a server imports from the path it started with
    third = _facts()
    assert len({first["ppid"], second["ppid"], third["ppid"]}) == 3
    assert third["path"][0] == str(tmp_path)


def test_at_most_max_servers_are_kept_and_one_let_go_exits(
    monkeypatch: pytest.MonkeyPatch, _fresh_servers: OrderedDict[Any, Any]
) -> None:
    seen = []
    for value in range(launch_module.MAX_SERVERS + 1):
        monkeypatch.setenv("SPECDECODE_TEST_LAUNCH", str(value))
        seen.append(_facts()["ppid"])
    assert len(set(seen)) == launch_module.MAX_SERVERS + 1
    assert len(_fresh_servers) == launch_module.MAX_SERVERS
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{seen[0]}") and time.monotonic() < deadline:
        time.sleep(0.1)  # its workers have exited: it follows
    assert not os.path.exists(f"/proc/{seen[0]}")


def test_a_cache_folder_torch_sets_in_the_environment_keeps_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch writes TORCHINDUCTOR_CACHE_DIR into the caller's environment at its first use
    and reads it at each use: no second server for it, the worker still gets it."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    first = _facts()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_somebody")
    second = _facts()
    assert second["ppid"] == first["ppid"]
    assert second["env"]["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/torchinductor_somebody"


IOMP = "/opt/intel/lib/libiomp5.so"


@pytest.mark.parametrize(
    ("environ", "affinity"),
    [
        ({"LD_PRELOAD": IOMP}, "none"),  # unbound, as a spawned worker's threads are
        ({"LD_PRELOAD": f"/x/libtcmalloc.so:{IOMP}"}, "none"),
        ({"LD_PRELOAD": IOMP, "KMP_AFFINITY": "granularity=fine,explicit,proclist=[0]"},
         "granularity=fine,explicit,proclist=[0]"),  # the in-process engine's binding kept
        ({"LD_PRELOAD": IOMP, "OMP_PROC_BIND": "true"}, None),  # the user's binding kept
        ({"LD_PRELOAD": IOMP, "OMP_PLACES": "{0}"}, None),
        ({"LD_PRELOAD": "/x/libgomp.so.1"}, None),  # only Intel OpenMP binds after a fork
        ({}, None),
    ],
)  # fmt: skip
def test_a_forked_worker_binds_its_openmp_threads_only_when_told(
    environ: dict[str, str], affinity: str | None
) -> None:
    env = launch_module.forked_environment(environ)
    assert env.get("KMP_AFFINITY") == affinity
    assert {k: v for k, v in env.items() if k != "KMP_AFFINITY"} == {
        k: v for k, v in environ.items() if k != "KMP_AFFINITY"
    }


def test_spawn_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(START_METHOD_ENV, "spawn")
    facts = _facts()
    assert facts["ppid"] == facts["caller"] == os.getpid()


def test_a_bad_start_method_names_the_variable_and_the_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(START_METHOD_ENV, "vfork")
    with pytest.raises(ValueError, match=rf"{START_METHOD_ENV}='vfork'.*spawn, forkserver, auto"):
        launch_module.start_method()


@pytest.mark.parametrize(("in_process", "method"), [("0", "forkserver"), ("1", "spawn")])
def test_auto_forks_only_the_workers_that_run_the_model(in_process: str, method: str) -> None:
    """``auto``: in-process engines skip the worker's imports; multiprocess ones gained nothing
    from a fork server (vLLM spawns its own processes), so they are spawned."""
    vllm_env = {launch_module.MULTIPROCESSING_ENV: in_process}
    assert launch_module.start_method({START_METHOD_ENV: "auto", **vllm_env}) == method
    assert launch_module.start_method({START_METHOD_ENV: "auto"}) == "spawn"  # multiprocess


def test_spawn_is_the_default() -> None:
    """The fork server is opt-in: it cost the real-engine tests more than it saved."""
    assert launch_module.start_method({launch_module.MULTIPROCESSING_ENV: "0"}) == "spawn"
    assert launch_module.start_method({}) == "spawn"


def test_a_server_that_cannot_start_a_worker_gives_way_to_spawn_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Any, fds: Any) -> Any:
        raise OSError("no fork server here")

    monkeypatch.setattr(multiprocessing.forkserver.ForkServer, "connect_to_new_process", refuse)
    with pytest.warns(SpecDecodeWarning, match="no fork server here.*spawned instead"):
        facts = _facts()
    assert facts["ppid"] == os.getpid()
    assert launch_module.start_method() == "spawn"  # for the rest of this process
    assert _facts()["ppid"] == os.getpid()


def test_a_fork_server_prints_nothing_on_the_callers_streams(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # the standard library's ``this`` prints the Zen of Python when imported
    monkeypatch.setattr(launch_module, "PRELOAD", ("pytest_specdecode.engines.fork_server", "this"))
    facts = _facts()
    assert "this" in facts["modules"]  # the server imported it, its worker inherited it
    assert "Beautiful is better" not in capfd.readouterr().out


def test_the_fork_server_module_does_nothing_outside_a_server(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import importlib

    import pytest_specdecode.engines.fork_server as fork_server

    importlib.reload(fork_server)
    print("still heard")
    assert "still heard" in capfd.readouterr().out
