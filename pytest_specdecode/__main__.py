"""Command line: ``python -m pytest_specdecode compare OLD.json NEW.json``,
``python -m pytest_specdecode html REPORT.json OUT.html`` and
``python -m pytest_specdecode export REPORT.json --format bmf|github-action-benchmark|
github-action-benchmark-smaller``.

``compare`` prints the same tables as the plugin, without running anything; ``html`` and
``export`` (with ``--output``) print one line saying what they wrote (``--verbose``: the
"worth it?" checklists, or the names of what the export holds); ``export`` writes the figures
for a history tracker (stdout, or ``--output``). Every output takes ``-`` (or ``/dev/stdout``)
for standard output, which then holds that document alone: what the command says goes to
stderr.

Exit status (every command): :data:`EXIT_OK` (0) when nothing regressed, :data:`EXIT_REGRESSED`
(1) when ``compare`` found a regression, :data:`EXIT_BAD_INPUT` (2) on a usage error or bad
input (an unreadable or invalid file, an impossible tolerance, a baseline with fewer than 20
rounds per result, a comparison that compares nothing: a file with no results, or no result
matching a stored one; a file with two results under one key, results of another target or
method without ``--allow-config-change``, a report with no results to export, an output file
that cannot be written or that is one of the inputs), :data:`EXIT_CRASH` (3) when the command
itself failed (a bug: the traceback goes to stderr), so that CI can tell a crash from a
regression.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .baselines.compare import (
    ALPHA,
    DEFAULT_TOLERANCES,
    Entry,
    Matching,
    StoredResults,
    check_baseline_rounds,
    check_speedup_amount,
    check_unique_keys,
    comparison_entries,
    configuration_changes,
    environment_change_lines,
    environments_differing,
    nothing_compared,
    parse_tolerances,
    verdicts_for,
    with_detectable,
)
from .baselines.outputs import STDOUT, is_stdout
from .errors import ConfigError
from .run.outputs import EXPORT_BY_NAME, EXPORTS
from .run.record import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_OK, EXIT_REGRESSED

if TYPE_CHECKING:
    from .baselines.report import Report

__all__ = ["EXIT_BAD_INPUT", "EXIT_CRASH", "EXIT_OK", "EXIT_REGRESSED", "main"]


def _say(text: str, file: TextIO | None = None) -> None:
    """Print ``text`` with control characters escaped: it may quote a file's contents."""
    from .reporting.table import printable

    print(printable(text, keep_newlines=True), file=file or sys.stdout)


def _read(path: str, what: str) -> tuple[dict[str, Any], Report]:
    """The file at ``path`` (``what`` it is, in messages), read and checked once: its data
    and its typed :class:`~pytest_specdecode.baselines.report.Report`."""
    from .baselines import files
    from .baselines.report import Report

    data = files.load(path, what)
    return data, Report.from_dict(data, f"{what} {Path(path)}")


#: Why two files' results may not match (in the "nothing compared" error).
RENAMED = (
    "Tests are matched by pytest node id, relative to the rootdir: the runs were likely made "
    "with different rootdirs (add a pytest.ini or pyproject.toml, or pass --rootdir), or the "
    "tests were renamed"
)


def _check_configurations(args: argparse.Namespace, matching: Matching[Entry], old: Report,
                          new: Report) -> None:  # fmt: skip
    """Warn when matched results are of other configurations than their stored entries
    (naming each field), and refuse another target or method unless
    ``--allow-config-change``."""
    changes = configuration_changes(matching, old.environment, new.environment)
    if not changes:
        return
    by_change: dict[str, list[str]] = {}
    for change in changes:
        for text in change.changes:
            by_change.setdefault(text, []).append(change.key)
    _say(
        "WARNING: the two runs are of different configurations: "
        + "; ".join(environment_change_lines(by_change))
    )
    refused = [c for c in changes if c.incomparable]
    if refused and not args.allow_config_change:
        shown = "; ".join(f"{c.key}: {', '.join(c.incomparable)}" for c in refused[:3])
        more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
        raise ConfigError(
            f"results of the results file {args.new} match baseline entries of another "
            f"target or method ({shown}{more}), whose figures are not theirs to compare with; "
            "compare with a baseline of this configuration, or pass --allow-config-change if "
            "the change is intended"
        )


def _check_output(path: str | None, option: str, *inputs: tuple[str, str]) -> None:
    """Refuse an output ``path`` (given with ``option``; None or ``-``: stdout) that names
    one of the ``inputs`` (``(path, what it is)``), before anything is read or written."""
    from .baselines.outputs import check_not_input

    if path is not None and not is_stdout(path):
        check_not_input(path, option, inputs)


def _compare(args: argparse.Namespace) -> int:
    from .reporting.table import blind_line, render, render_comparison

    _check_output(
        args.json, "--json", (args.old, "baseline file (OLD)"), (args.new, "results file (NEW)")
    )
    _, old = _read(args.old, "baseline file")
    _, new = _read(args.new, "results file")
    check_unique_keys(old.results, f"baseline file {args.old}")
    check_unique_keys(new.results, f"results file {args.new}")
    tolerances = parse_tolerances(args.fail, "--fail")
    check_speedup_amount(tolerances, old.results, f"--fail (against {args.old})")
    if not 0 < args.alpha < 1:
        raise ConfigError(
            f"--alpha: expected a significance level between 0 and 1, got {args.alpha}"
        )
    check_baseline_rounds(old.results, tolerances, f"baseline file {args.old}", args.old)
    matching = StoredResults(old.results).match(new.results)
    nothing = nothing_compared(
        matching, f"the baseline file {args.old}", f"the results file {args.new}", RENAMED
    )
    if nothing is not None:
        raise ConfigError(nothing)
    _check_configurations(args, matching, old, new)
    differing = environments_differing(matching, old.environment, new.environment)
    if differing:  # each matched pair's own environments (a baseline keeps one per entry)
        _say(
            "WARNING: the two runs come from different environments: "
            + "; ".join(environment_change_lines(differing))
        )
        if args.strict_environment:
            _say("error: --strict-environment is set", file=sys.stderr)
            return EXIT_BAD_INPUT
    _say(render(new.results, tablefmt=args.format))
    _say("")
    verdicts = verdicts_for(matching, tolerances, args.alpha)
    with_detectable(verdicts, matching, tolerances, lambda reference: reference)
    _say(render_comparison(verdicts, tablefmt=args.format))
    for v in verdicts:
        if v.detectable is not None and v.detectable.blind:
            _say(blind_line(v.key, v.figure, v.detectable))
    if args.json:
        _write(
            args.json,
            json.dumps(comparison_entries(verdicts), indent=2, allow_nan=False) + "\n",
            args.stdout,
        )
    regressed = [v for v in verdicts if v.status == "regressed"]
    _say("")
    _say(
        f"{len(regressed)} regressed, {sum(v.status == 'improved' for v in verdicts)} improved, "
        f"{sum(v.status == 'new' for v in verdicts)} new, "
        f"{sum(v.status == 'missing' for v in verdicts)} missing "
        f"(tolerances {', '.join(str(t) for t in tolerances)}; one-sided p < {args.alpha:g})"
    )
    return EXIT_REGRESSED if regressed else EXIT_OK


def _write(path: str, text: str, stdout: TextIO) -> None:
    """Write ``text`` to ``path`` whole (a :class:`ConfigError` naming it when it cannot be),
    or to ``stdout`` for ``-`` (:func:`~.baselines.outputs.is_stdout`)."""
    from .baselines.files import atomic_write_text

    if is_stdout(path):
        stdout.write(text)
        stdout.flush()
        return
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be written ({exc.strerror or exc})") from None


def _html(args: argparse.Namespace) -> int:
    from .reporting.checklist import checklists
    from .run.outputs import OUTPUTS

    _check_output(args.output, "OUTPUT", (args.report, "report file (REPORT)"))
    _, report = _read(args.report, "report file")
    html = next(o for o in OUTPUTS if o.setting == "html")
    if is_stdout(args.output):
        from .reporting.html import render_html

        _write(args.output, render_html(report), args.stdout)
    else:
        try:
            html.write(args.output, report)
        except OSError as exc:
            raise ConfigError(f"{args.output}: cannot be written ({exc.strerror or exc})") from None
    if args.verbose:
        for checklist in checklists(report):
            _say("\n".join(checklist.text()))
    results = len(report.results)
    _say(f"wrote {_shown(args.output)} (HTML report of {results} result{'s' * (results != 1)})")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    _check_output(args.output, "--output", (args.report, "report file (REPORT)"))
    _, report = _read(args.report, "report file")
    fmt = EXPORT_BY_NAME[args.format]
    text = fmt.document_text(report, f"report file {args.report}")
    if args.output is None or is_stdout(args.output):
        _write(STDOUT, text, args.stdout)
        return EXIT_OK
    _write(args.output, text, args.stdout)
    results = len(report.results)
    _say(f"wrote {args.output} ({args.format}, {results} result{'s' * (results != 1)})")
    if args.verbose:
        for name in _benchmarks(fmt.render(report), report):
            _say(f"  {name}")
    return EXIT_OK


def _shown(path: str) -> str:
    """An output path as a message names it: ``standard output`` for ``-``."""
    return "standard output" if is_stdout(path) else path


def _on_stdout(args: argparse.Namespace) -> bool:
    """Whether the command writes its document to standard output."""
    if args.command == "compare":
        return is_stdout(args.json)
    return args.output is None or is_stdout(args.output)


def _benchmarks(document: Any, report: Report) -> list[str]:
    """The names of the benchmarks an export document holds: a BMF document's keys, a
    list's ``name`` fields; for a text format (CSV), the benchmarks of its BMF figures."""
    if isinstance(document, dict):
        return list(document)
    if isinstance(document, list):
        return [b["name"] for b in document]
    from .reporting.export import bmf

    return list(bmf(report))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_specdecode",
        description="Work with the reports pytest-specdecode saved (--specdecode-report, "
        "--specdecode-save) without running anything: compare two runs for regressions, "
        "render a report as an HTML page, or export its figures for a history tracker.",
        epilog="Exit status: 0 ok, 1 compare found a regression, 2 usage error or bad input, "
        "3 the command crashed (a bug).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    cmp = commands.add_parser("compare", help="compare two saved runs")
    cmp.add_argument(
        "old", metavar="OLD", help="baseline file (--specdecode-save / --specdecode-report)"
    )
    cmp.add_argument("new", metavar="NEW", help="results file to check against it")
    cmp.add_argument("--fail", default=DEFAULT_TOLERANCES, help="tolerated drops")
    cmp.add_argument("--alpha", type=float, default=ALPHA, help="significance level")
    cmp.add_argument("--strict-environment", action="store_true")
    cmp.add_argument(
        "--allow-config-change", action="store_true",
        help="compare results with stored entries of another target or speculative method "
        "(the change is intended); without it such a comparison exits 2",
    )  # fmt: skip
    cmp.add_argument("--format", default="simple", help="tabulate format (github: Markdown)")
    cmp.add_argument(
        "--json",
        metavar="OUT",
        help="also write the verdicts as the report's comparisons list (-: to stdout, the "
        "tables then to stderr)",
    )
    page = commands.add_parser("html", help="render a saved report as a self-contained HTML page")
    page.add_argument("report", metavar="REPORT", help="report or saved-run file")
    page.add_argument("output", metavar="OUTPUT", help="HTML file to write (-: stdout)")
    page.add_argument(
        "--verbose", "-v", action="store_true", help="also print the 'worth it?' checklists"
    )
    export = commands.add_parser(
        "export", help="write a report's figures for a history tracker (Bencher, ...)"
    )
    export.add_argument("report", metavar="REPORT", help="report or saved-run file")
    export.add_argument(
        "--format", required=True, choices=[f.name for f in EXPORTS],
        help="; ".join(f"{f.name}: {f.help}" for f in EXPORTS).replace("%", "%%"),
    )  # fmt: skip
    export.add_argument("--output", metavar="FILE", help="file to write (default or -: stdout)")
    export.add_argument(
        "--verbose", "-v", action="store_true", help="with --output: also list what it holds"
    )
    args = parser.parse_args(argv)
    # a document written to stdout has it to itself: what the command says goes to stderr
    args.stdout = sys.stdout
    says = contextlib.redirect_stdout(sys.stderr) if _on_stdout(args) else contextlib.nullcontext()
    try:
        with says:
            if args.command == "html":
                return _html(args)
            if args.command == "export":
                return _export(args)
            return _compare(args)
    except ConfigError as exc:
        _say(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - a crash gets its own status, not "regressed"
        traceback.print_exc()
        _say(
            f"internal error: {args.command} crashed ({type(exc).__name__}: {exc}); this is a "
            f"bug in pytest-specdecode, not a regression (exit status {EXIT_CRASH}); the "
            "traceback is above",
            file=sys.stderr,
        )
        return EXIT_CRASH


if __name__ == "__main__":
    sys.exit(main())
