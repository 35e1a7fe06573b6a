"""The error lines of an engine log (``engines/engine_log.py``), from what vLLM 0.32 wrote
when synthetic acceptance killed a CPU engine at its first step."""

from __future__ import annotations

from pathlib import Path

from pytest_specdecode.engines.engine_log import SEARCHED_LINES, raised, raised_in

WORKER = "(Worker pid=14344) ERROR 12-04 16:50:37 [multiproc_executor.py:1063] "
CORE = "(EngineCore pid=14104) ERROR 12-04 16:50:37 [core.py:1512] "
ASSERTION = "AssertionError: Synthetic acceptance not supported with CPU sampling"
RUNTIME = (
    "RuntimeError: Worker failed with error 'Synthetic acceptance not supported with CPU "
    "sampling', please check the stack trace above for the root cause"
)
LOG = "\n".join(
    [
        "(EngineCore pid=14104) INFO 12-04 16:50:30 [core.py:100] ValueError: not an error line",
        WORKER + "Traceback (most recent call last):",
        WORKER + '    assert not SYNTHETIC_MODE, "Synthetic acceptance not supported"',
        WORKER + ASSERTION,
        WORKER + "Traceback (most recent call last):",  # vLLM logs it twice
        WORKER + ASSERTION,
        CORE + "EngineCore encountered a fatal error.",
        CORE + "Traceback (most recent call last):",
        WORKER + "a line of another process in between",
        CORE + "    raise RuntimeError(",
        CORE + RUNTIME,
        "Traceback (most recent call last):",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        "specdecode worker: vLLM's engine core died: no engine-core process had exited "
        "(vLLM raised EngineDeadError)",
        "(specdecode-engine pid=12915) INFO 12-04 16:50:42 [core_client.py:772] [shutdown] done",
    ]
)


def test_each_error_line_once_in_the_order_logged_without_the_death_itself() -> None:
    assert raised(LOG) == [ASSERTION, RUNTIME]
    assert raised(LOG, most=1) == [RUNTIME]


def test_plain_tracebacks_and_dotted_names_count_and_only_the_log_s_end_is_searched() -> None:
    """Only the line that ends a traceback is an error line (not a log message that reads
    like one)."""
    text = "Traceback (most recent call last):\nvllm.errors.SomeError: bad\n"
    assert raised(text) == ["vllm.errors.SomeError: bad"]
    old = "Traceback (most recent call last):\nRuntimeError: earlier\n" + "ok\n" * SEARCHED_LINES
    assert raised(old + "Traceback (most recent call last):\nKeyError") == ["KeyError"]
    assert raised("no error here\nValueError: not in a traceback\n") == []


def test_a_log_that_cannot_be_read_has_no_error(tmp_path: Path) -> None:
    assert raised_in(str(tmp_path / "missing.log")) == []
    (tmp_path / "e.log").write_text(LOG)
    assert raised_in(str(tmp_path / "e.log")) == [ASSERTION, RUNTIME]
