"""pytest hooks of pytest-specdecode. Importing this module imports neither vLLM nor torch."""

from __future__ import annotations

import os
from collections.abc import Generator, Sequence

import pytest

from ..baselines.report import ReportEntry
from ..errors import ConfigError, GateError, InconclusiveError
from ..measure.assertions import check_gates, check_load_gates
from ..run.record import NOTHING_MEASURED
from ..settings import SETTINGS, load_global
from .fixtures import SESSION_KEY, baseline_engine, specdecode, speculative_engine
from .marker import MARKER, MARKER_DOC, marker_category, resolve
from .order import groups, reorder, schedule, test_id
from .session import SpecDecodeSession
from .xdist import (
    GROUPS_KEY,
    WORKERINPUT_KEY,
    WORKEROUTPUT_KEY,
    XdistController,
    check_worker_count,
    to_wire,
    write_groups,
)

__all__ = ["baseline_engine", "specdecode", "speculative_engine"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specdecode", "speculative decoding (pytest-specdecode)")
    for setting in SETTINGS:
        if setting.flag:
            group.addoption(
                setting.option, dest=setting.dest, action="store_const", const=True,
                default=None, help=setting.help.replace("%", "%%"),
            )  # fmt: skip
            parser.addini(setting.ini_name, help=setting.help, type="bool", default=False)
        else:
            group.addoption(
                setting.option,
                dest=setting.dest,
                default=None,
                help=setting.help.replace("%", "%%"),
            )
            parser.addini(setting.ini_name, help=setting.help, default=None)


def _progress_writer(config: pytest.Config) -> SpecDecodeSession:
    def progress(message: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capman = config.pluginmanager.get_plugin("capturemanager")
        if capman is not None:
            capman.suspend_global_capture(in_=True)
        try:
            reporter.ensure_newline()
            _write(reporter, f"[specdecode] {message}")
        finally:
            if capman is not None:
                capman.resume_global_capture()

    try:
        settings = load_global(config.getoption, config.getini)
        return SpecDecodeSession(
            settings=settings,
            progress=progress,
            source_factory=lambda: config.hook.pytest_specdecode_engine_source(
                config=config, settings=settings
            ),
        )
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # trylast: conftest files may fill in default options (e.g. the built-in tiny models) first.
    config.addinivalue_line("markers", MARKER_DOC)
    state = config.stash[SESSION_KEY] = _progress_writer(config)
    _setup_xdist(config, state)


def _setup_xdist(config: pytest.Config, state: SpecDecodeSession) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        visible = workerinput.get(WORKERINPUT_KEY)
        if visible is not None:  # before any engine process starts: they inherit it
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        return
    workers = getattr(config.option, "numprocesses", None)
    if not workers or not config.pluginmanager.hasplugin("xdist"):
        return
    per_worker = state.settings.gpus_per_worker
    controller = XdistController(config, per_worker, by_engines=state.reorders)
    try:
        check_worker_count(int(workers), controller.groups, len(controller.gpus), per_worker)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(controller, "specdecode-xdist-controller")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker per GPU (group) when NVML sees GPUs, else xdist's default."""
    from ..engines.hardware import nvml_gpus
    from .xdist import gpu_groups

    gpus = nvml_gpus()
    if not gpus:
        return None
    raw = config.getoption("specdecode_gpus_per_worker") or config.getini(
        "specdecode_gpus_per_worker"
    )
    per_worker = int(raw) if raw else 1
    return max(1, len(gpu_groups(gpus, per_worker)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    # tryfirst: before other plugins see (and reorder) the items
    state = config.stash[SESSION_KEY]
    wanted = state.settings.category
    keep, deselected = [], []
    for item in items:
        mark = item.get_closest_marker(MARKER)
        if mark is None:
            keep.append(item)
            continue
        if wanted is not None and marker_category(mark.args, mark.kwargs) not in wanted:
            deselected.append(item)
            continue
        keep.append(item)
        try:
            state.specs[item.nodeid] = resolve(item.nodeid, mark.args, mark.kwargs, state.settings)
        except ConfigError as exc:
            state.spec_errors[item.nodeid] = exc
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep
    if state.reorders:
        items[:] = reorder(items, state.specs)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get(GROUPS_KEY):
        # a pytest-xdist worker: the controller's scheduler sends each group to one worker
        write_groups(workerinput[GROUPS_KEY], workerinput["workerid"], groups(state.specs))
    state.schedule = schedule([state.specs[i.nodeid] for i in items if i.nodeid in state.specs])


def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[SESSION_KEY]
    nodeid = test_id(item)
    error = state.spec_errors.get(nodeid)
    if error is not None:
        pytest.fail(str(error), pytrace=False)
    spec = state.specs.get(nodeid)
    if spec is not None and spec.min_gpus:
        from ..engines.hardware import nvml_gpus

        found = len(nvml_gpus())
        if found < spec.min_gpus:
            reason = f"needs {spec.min_gpus} GPU(s), NVML sees {found}"
            if state.settings.require_gpu:
                pytest.fail(f"{reason} and --specdecode-require-gpu is set", pytrace=False)
            pytest.skip(reason)
    if spec is not None:
        state.plan_from(nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    state = item.config.stash[SESSION_KEY]
    nodeid = test_id(item)
    try:
        outcome = yield
    except InconclusiveError as exc:
        pytest.skip(f"inconclusive: {exc}")
    except GateError as exc:
        state.gate_failed(nodeid, exc)
        raise
    spec = state.specs.get(nodeid)
    failures: list[str] = []
    if spec is not None and spec.gates:
        try:
            for result in state.results_for(nodeid):
                for message in check_gates(result, spec.gates):
                    state.gate_failed(nodeid, GateError(message, result.key))
                    failures.append(message)
            for load in state.loads_for(nodeid):
                for message in check_load_gates(load, spec.gates):
                    state.gate_failed(nodeid, GateError(message))
                    failures.append(message)
        except InconclusiveError as exc:
            pytest.skip(f"inconclusive: {exc}")
    failures += state.check_regressions(nodeid)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        state = item.config.stash[SESSION_KEY]
        nodeid = test_id(item)
        state.judge(nodeid, None if report.skipped else report.passed)
        if hasattr(item.config, "workerinput"):
            # pytest-xdist worker: what the test made travels to the controller with the
            # report, as plain JSON types (execnet cannot serialise anything else)
            output = state.worker_output(nodeid, item.config.workerinput.get("workerid"))
            if output:
                setattr(report, WORKEROUTPUT_KEY, to_wire(output))
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # tryfirst: the files are written before other plugins' session-finish hooks run, so that
    # one of them raising (pytest's JUnit writer on a lone surrogate) cannot cost them
    state = session.config.stash.get(SESSION_KEY, None)
    if state is None:
        return
    try:
        if hasattr(session.config, "workerinput"):  # the controller writes every file
            output = getattr(session.config, "workeroutput", {})
            output[WORKEROUTPUT_KEY] = to_wire(state.worker_output())
            return
        # written also when nothing was measured: the report says so, no file of an earlier
        # run is left to pass for this one's
        if not state.write(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED):
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        unmatched = state.nothing_compared()
        if unmatched is not None:
            state.output_errors.append(unmatched)
        if state.output_errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        state.close()


def _width(terminalreporter: pytest.TerminalReporter) -> int:
    """The terminal's width as pytest sees it (``$COLUMNS`` where set; 80 when it cannot
    tell, as when the output is not a terminal)."""
    return int(terminalreporter.config.get_terminal_writer().fullwidth)


def _write(terminalreporter: pytest.TerminalReporter, text: str, **markup: bool) -> None:
    """Write ``text``: a table (several lines) as it is, one line wrapped to the terminal's
    width (:func:`~pytest_specdecode.reporting.fit.wrap`)."""
    from ..reporting.fit import wrap

    for line in [text] if "\n" in text else wrap(text, _width(terminalreporter)):
        terminalreporter.write_line(line, **markup)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = terminalreporter.config.stash.get(SESSION_KEY, None)
    if state is None:
        return
    if not state.produced:
        _nothing_measured_summary(terminalreporter, state)
        return
    from ..reporting.checklist import checklists
    from ..reporting.table import printable, sizing_lines, summary_lines

    terminalreporter.write_sep("=", "speculative decoding summary")
    report = state.as_report()  # once: the summary, the checklists and the step summary
    lines = summary_lines(
        report.results,
        report.sweeps,
        report.distribution_checks,
        report.rankings,
        report.session or {},
        loads=report.loads,
        schedule_checks=report.schedule_checks,
        served=state.served,
        width=_width(terminalreporter),
    )
    for text in lines:
        _write(terminalreporter, text)
    for text in sizing_lines(report):
        _write(terminalreporter, text, yellow=text.startswith("WARNING"))
    terminalreporter.write_sep("-", "worth it? (per target and proposer)")
    for checklist in checklists(report):
        for line in checklist.text(_width(terminalreporter)):
            terminalreporter.write_line(printable(line))
    _file_lines(terminalreporter, state)
    if state.baseline is not None or state.settings.update_baseline:
        _comparison_summary(terminalreporter, state)
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            _github_summary(summary_path, state, report.results)
        except OSError as exc:
            terminalreporter.write_line(
                f"WARNING: the GitHub step summary was not written: $GITHUB_STEP_SUMMARY="
                f"{printable(summary_path)} cannot be appended to ({exc.strerror or exc})",
                yellow=True,
                bold=True,
            )


def _file_lines(terminalreporter: pytest.TerminalReporter, state: SpecDecodeSession) -> None:
    """What happened to each output file, and the errors."""
    for name, path in state.written:
        what = "baseline updated" if name == "baseline" else "results written to"
        terminalreporter.write_line(f"{what} {path}" if name != "baseline" else f"{what}: {path}")
    for notice in state.notices:
        _write(terminalreporter, notice, yellow=True)
    for error in state.output_errors:
        _write(terminalreporter, f"ERROR: {error}", red=True, bold=True)


def _nothing_measured_summary(
    terminalreporter: pytest.TerminalReporter, state: SpecDecodeSession
) -> None:
    """A run that measured nothing, where it was asked to write or compare: say so, and what
    became of each file."""
    asked = state.written or state.notices or state.output_errors or state.baseline is not None
    if not asked:
        return
    terminalreporter.write_sep("=", "speculative decoding summary")
    terminalreporter.write_line(f"WARNING: {NOTHING_MEASURED}", yellow=True, bold=True)
    _file_lines(terminalreporter, state)


def _comparison_summary(
    terminalreporter: pytest.TerminalReporter, state: SpecDecodeSession
) -> None:
    from ..reporting.table import printable, render_comparison

    terminalreporter.write_sep("=", "comparison with the baseline")
    if state.environment_changes:
        terminalreporter.write_line(
            "WARNING: the baseline comes from another environment: "
            + printable("; ".join(state.environment_changes)),
            yellow=True,
            bold=True,
        )
    if state.configuration_lines:
        terminalreporter.write_line(
            "WARNING: compared with baseline entries of another configuration: "
            + printable("; ".join(state.configuration_lines)),
            yellow=True,
            bold=True,
        )
    shown = [v for v in state.verdicts if v.status != "unchanged"] or state.verdicts
    missing = state.missing()
    if shown:
        terminalreporter.write_line(render_comparison(shown))
    for key in missing:
        terminalreporter.write_line(f"missing from this run: {printable(key)}")
    if any(v.status == "improved" for v in state.verdicts):
        terminalreporter.write_line(
            "some figures improved beyond the tolerance: refresh the baseline with "
            "--specdecode-update-baseline"
        )


def _github_summary(path: str, state: SpecDecodeSession, results: Sequence[ReportEntry]) -> None:
    from ..reporting.table import phase_markdown, render, render_comparison

    parts = ["## Speculative decoding", "", render(results, tablefmt="github"), ""]
    phase_lines = phase_markdown(results, served=state.served)
    if phase_lines:
        parts += [*phase_lines, ""]
    if state.verdicts:
        parts += ["### Comparison with the baseline", "", render_comparison(
            state.verdicts, tablefmt="github"), ""]  # fmt: skip
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n".join(parts) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(SESSION_KEY, None)
    if state is not None:
        state.close()
