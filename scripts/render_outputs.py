"""Render every output of the recorded reports into a folder, to diff two versions of the package.

    python scripts/render_outputs.py OUT

Reads the committed recorded run (``docs/data/example-suites.json``), variants of it made here
that reach the other paths (no verdicts; every verdict with every gate outcome; a slower run and
a 24-round baseline to compare with) and a report built by the tests' own builders (phases, a
sweep, a load, long and short context), and writes through each renderer: the report and saved
JSON, the terminal summary (unfitted and at 80 and 200 columns), the tables in each format, the
checklists, the HTML page (its SVG charts cut out: their ids vary), every export format, the
JUnit properties, ``python -m pytest_specdecode compare`` (and the comparison in the HTML), and
the generated docs (``scripts/render_docs.py``). Run it from two checkouts (each imports its
own package) and ``diff -r`` the folders: a change that must not be visible leaves them
byte-identical.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.__main__ import main as cli  # noqa: E402
from pytest_specdecode.baselines.compare import compare_runs  # noqa: E402
from pytest_specdecode.baselines.report import Report  # noqa: E402
from pytest_specdecode.errors import ConfigError  # noqa: E402
from pytest_specdecode.plugin.fixtures import _phase_properties, _result_properties  # noqa: E402
from pytest_specdecode.reporting.checklist import checklists  # noqa: E402
from pytest_specdecode.reporting.html import render_html  # noqa: E402
from pytest_specdecode.reporting.table import (  # noqa: E402
    phase_markdown,
    render,
    render_comparison,
    sizing_lines,
    summary_lines,
)
from pytest_specdecode.run.outputs import EXPORTS, json_text, with_checklist  # noqa: E402
from pytest_specdecode.tolerances import parse_tolerances  # noqa: E402

RECORDED = ROOT / "docs" / "data" / "example-suites.json"
_SVG = re.compile(r"<svg.*?</svg>", re.DOTALL)


def _no_svg(page: str) -> str:
    """An HTML page with its charts cut out (matplotlib's ids and dates vary)."""
    return _SVG.sub("<svg/>", page)


def _no_verdicts(data: dict[str, Any]) -> dict[str, Any]:
    """Every result and candidate without a verdict (a report from before verdicts)."""
    for r in data["results"]:
        r["verdict"] = ""
    for ranking in data.get("rankings") or []:
        for c in ranking["candidates"]:
            c["verdict"] = ""
    return data


def _gates(data: dict[str, Any]) -> dict[str, Any]:
    """Each verdict with each gate outcome (pass, FAIL, none, inconclusive)."""
    verdicts = ("worth it", "not worth it", "inconclusive", "")
    for i, r in enumerate(data["results"]):
        r["verdict"] = verdicts[i % 4]
        r["passed"] = (True, False, None, True)[(i // 4) % 4]
        r["inconclusive"] = "the interval still contains 1" if (i // 4) % 4 == 3 else ""
        if r["passed"] is False:
            r["gate_failures"] = [f"speedup {r['speedup']:.2f}x below 9.00x"]
    return data


def _scaled(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """Every result's speedup, its interval and its rounds' ratios times ``factor``."""
    for r in data["results"]:
        r["speedup"] *= factor
        r["speedup_ci"] = [None if v is None else v * factor for v in r["speedup_ci"]]
        r["ratios"] = [v * factor for v in r["ratios"]]
    return data


def _rounds(data: dict[str, Any], n: int = 24) -> dict[str, Any]:
    """Every result's rounds repeated to ``n`` (a baseline the compare command takes)."""
    for r in data["results"]:
        for holder, key in [(r, "ratios"), *((r["samples"], k) for k in r.get("samples", {}))]:
            values = holder[key]
            if values:
                holder[key] = (values * n)[:n]
    return data


def _fixtures() -> dict[str, Any] | None:
    """A report made by the tests' builders (None where this checkout has none)."""
    try:
        from tests.load_reports import CROSSING, load_dict
        from tests.phase_reports import complete, result, sweep
    except ImportError:
        return None
    results = [
        result("test_a", verdict="worth it", passed=True),
        result("test_b", verdict="", speedup=0.8, speedup_ci=[0.7, 0.9], passed=False),
        result("test_c", verdict="inconclusive", speedup_ci=[0.9, 1.1], inconclusive="wide"),
        result("test_long", label="long context", category="long", verdict="not worth it",
               speedup=0.9, speedup_ci=[0.85, 0.95]),
        result("test_short", category="short", verdict="worth it"),
    ]  # fmt: skip
    return {
        "format_version": 1,
        "environment": {},
        "results": [complete(r) for r in results],
        "sweeps": [sweep()],
        "loads": [load_dict(CROSSING)],
    }


def _write(out: Path, name: str, make: Callable[[], str]) -> None:
    """``make()``'s text to ``out/name``; an error it raises is written instead."""
    try:
        text = make()
    except (ConfigError, ValueError) as exc:
        text = f"{type(exc).__name__}: {exc}\n"
    (out / name).write_text(text, encoding="utf-8")


def _cli(*args: str) -> str:
    """``python -m pytest_specdecode ARGS``: its exit status, stdout and stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = cli(list(args))
    return f"exit {status}\n--- stdout\n{stdout.getvalue()}--- stderr\n{stderr.getvalue()}"


def render_all(out: Path, name: str, data: dict[str, Any]) -> None:
    """Every output of the report ``data`` into ``out``, each file named after ``name``."""
    report = Report.from_dict(copy.deepcopy(data), name)
    path = Path(f"{name}.input.json")
    (out / path).write_text(json_text(data), encoding="utf-8")
    served = bool(report.environment.get("served"))
    _write(out, f"{name}.report.json", lambda: json_text(report.to_dict()))
    _write(out, f"{name}.saved.json", lambda: json_text(with_checklist(report).to_dict()))
    for width in (None, 80, 200):
        lines = summary_lines(
            report.results, report.sweeps, report.distribution_checks, report.rankings,
            report.session or {}, loads=report.loads, schedule_checks=report.schedule_checks,
            served=served, width=width,
        )  # fmt: skip
        lines += sizing_lines(report)
        for c in checklists(report):
            lines += c.text(width)
        _write(out, f"{name}.summary-{width}.txt", lambda lines=lines: "\n".join(lines) + "\n")
    for fmt in ("simple", "github", "pipe", "html"):
        _write(out, f"{name}.table-{fmt}.txt", lambda fmt=fmt: render(report.results, fmt) + "\n")
    _write(out, f"{name}.phases.md", lambda: "\n".join(phase_markdown(report.results)) + "\n")
    _write(
        out, f"{name}.checklists.json", lambda: json_text([c.to_dict() for c in checklists(report)])
    )
    _write(out, f"{name}.html", lambda: _no_svg(render_html(report)))
    for fmt in EXPORTS:
        _write(out, f"{name}.export-{fmt.name}", lambda fmt=fmt: fmt.document_text(report, name))
    junit = [
        {**_result_properties(e.result), **_phase_properties(e.result.phases)}
        for e in report.results
    ]
    _write(out, f"{name}.junit.json", lambda: json_text(junit))
    _write(out, f"{name}.cli-html.txt", lambda: _no_svg(_cli("html", str(path), "-", "-v")))


def _compare(out: Path, name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """The comparison of ``new`` with ``old``: the command's output, and the HTML page and
    tables of ``new`` with the comparison in it."""
    old_path, new_path = Path(f"{name}.old.json"), Path(f"{name}.new.json")
    (out / old_path).write_text(json_text(old), encoding="utf-8")
    (out / new_path).write_text(json_text(new), encoding="utf-8")
    for fmt in ("simple", "github"):
        args = ["compare", str(old_path), str(new_path), "--format", fmt, "--json", "-"]
        _write(out, f"{name}.compare-{fmt}.txt", lambda args=args: _cli(*args))
    report = Report.from_dict(copy.deepcopy(new), name)
    tolerances = parse_tolerances("speedup:5%,acceptance_rate:0.05")
    verdicts = compare_runs(Report.from_dict(copy.deepcopy(old), name).results, report.results,
                            tolerances)  # fmt: skip
    _write(out, f"{name}.comparison.txt", lambda: render_comparison(verdicts) + "\n")
    compared = replace(report, comparisons=tuple(verdicts))
    _write(out, f"{name}.html", lambda: _no_svg(render_html(compared)))
    _write(out, f"{name}.report.json", lambda: json_text(compared.to_dict()))


def _docs(out: Path) -> None:
    """The generated docs, as ``scripts/render_docs.py`` makes them."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import render_docs

    for path, text in sorted(render_docs.rendered().items()):
        (out / f"docs.{path.relative_to(ROOT).as_posix().replace('/', '.')}").write_text(text)


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)  # the files the commands read are named relative to it, as in their output
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    variants = {
        "recorded": recorded,
        "no-verdicts": _no_verdicts(copy.deepcopy(recorded)),
        "gates": _gates(copy.deepcopy(recorded)),
        "slower": _scaled(copy.deepcopy(recorded), 0.8),
    }
    fixtures = _fixtures()
    if fixtures is not None:
        variants["fixtures"] = fixtures
    for name, data in variants.items():
        render_all(out, name, data)
    baseline = _rounds(copy.deepcopy(recorded))
    _compare(out, "compare-same", baseline, recorded)
    _compare(out, "compare-slower", baseline, variants["slower"])
    _compare(out, "compare-gates", baseline, variants["gates"])
    _docs(out)
    print(f"wrote {len(list(out.iterdir()))} files to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
