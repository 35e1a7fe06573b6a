"""Command line: ``python -m pytest_specdecode compare OLD.json NEW.json``.

Prints the same tables as the plugin, without running anything. Exit status: 0 when nothing
regressed, 1 when something did, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .compare import (
    ALPHA,
    DEFAULT_TOLERANCES,
    compare_runs,
    environment_differences,
    parse_tolerances,
)
from .errors import ConfigError


def _compare(args: argparse.Namespace) -> int:
    from . import report
    from .table import render, render_comparison

    old = report.load(args.old, "baseline file")
    new = report.load(args.new, "results file")
    tolerances = parse_tolerances(args.fail, "--fail")
    changes = environment_differences(old.get("environment", {}), new.get("environment", {}))
    if changes:
        print("WARNING: the two runs come from different environments: " + "; ".join(changes))
        if args.strict_environment:
            print("error: --strict-environment is set", file=sys.stderr)
            return 2
    print(render(new["results"], tablefmt=args.format))
    print()
    verdicts = compare_runs(old["results"], new["results"], tolerances, args.alpha)
    print(render_comparison(verdicts, tablefmt=args.format))
    regressed = [v for v in verdicts if v.status == "regressed"]
    print()
    print(
        f"{len(regressed)} regressed, {sum(v.status == 'improved' for v in verdicts)} improved, "
        f"{sum(v.status == 'new' for v in verdicts)} new, "
        f"{sum(v.status == 'missing' for v in verdicts)} missing "
        f"(tolerances {', '.join(str(t) for t in tolerances)}; one-sided p < {args.alpha:g})"
    )
    return 1 if regressed else 0


def _html(args: argparse.Namespace) -> int:
    from . import report
    from .html_report import render_html

    report.atomic_write_text(args.output, render_html(report.load(args.report, "report file")))
    print(f"wrote {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_specdecode")
    commands = parser.add_subparsers(dest="command", required=True)
    cmp = commands.add_parser("compare", help="compare two saved runs")
    cmp.add_argument("old", help="baseline file (--specdecode-save / --specdecode-report)")
    cmp.add_argument("new", help="results file to check against it")
    cmp.add_argument("--fail", default=DEFAULT_TOLERANCES, help="tolerated drops")
    cmp.add_argument("--alpha", type=float, default=ALPHA, help="significance level")
    cmp.add_argument("--strict-environment", action="store_true")
    cmp.add_argument("--format", default="simple", help="tabulate format (github: Markdown)")
    page = commands.add_parser("html", help="render a saved report as a self-contained HTML page")
    page.add_argument("report", help="report or saved-run file")
    page.add_argument("output", help="HTML file to write")
    args = parser.parse_args(argv)
    try:
        if args.command == "html":
            return _html(args)
        return _compare(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
