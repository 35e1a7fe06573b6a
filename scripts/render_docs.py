"""Render the generated parts of README.md and docs/ from code and from recorded reports.

    python scripts/render_docs.py          # rewrite them (and the chart, with matplotlib)
    python scripts/render_docs.py --check  # exit 1, naming the files, if any is out of date

Generated text sits between ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->``
in README.md and docs/*.md; ``docs/example-suites.md`` is rendered whole from
``scripts/templates/example-suites.md``, whose ``{{ ... }}`` placeholders take their figures
from the recorded run (``docs/data/example-suites.json``), so prose and table cannot disagree.
After a new run of the example suites, copy its report there and run this script.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.baselines.report import Report, ReportEntry  # noqa: E402
from pytest_specdecode.figure_table import finite  # noqa: E402
from pytest_specdecode.reporting.checklist import checklists  # noqa: E402
from pytest_specdecode.reporting.phases import (  # noqa: E402
    ms,
    pair,
    phase_ms,
    phases,
    step,
    step_yield,
    with_interval,
)
from pytest_specdecode.reporting.table import (  # noqa: E402
    LEGEND,
    LOAD_LEGEND,
    Gate,
    check_line,
    distribution_line,
    gate,
    label,
    load_line,
    ranking_line,
    render_check,
    render_loads,
    render_ranking,
    render_schedule,
    schedule_line,
    schedule_of,
    speculative_config_json,
    sweep_line,
)
from pytest_specdecode.settings import MARKER_KEYWORD_HELP, SETTINGS  # noqa: E402

DOCS = ROOT / "docs"
REPORT = DOCS / "data" / "example-suites.json"
RUN = DOCS / "data" / "example-suites.run.json"  # command, date, machine of the recorded run
TEMPLATE = ROOT / "scripts" / "templates" / "example-suites.md"
PAGE = DOCS / "example-suites.md"
CHART = DOCS / "img" / "example-speedup.svg"
CHANGELOG_PAGE = DOCS / "changelog.md"
#: The recorded sweep both k-schedule rules read (``benchmarks/tuner_rule.py measure``).
TUNER = DOCS / "data" / "tuner-comparison.json"
BLOCK = re.compile(r"(<!-- generated:([\w-]+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.DOTALL)
PLACEHOLDER = re.compile(r"\{\{\s*(.+?)\s*\}\}")


def load(path: Path = REPORT) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


# -- blocks generated from code ------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("%%", "%")


def _without_default(text: str) -> str:
    """The help text less its "(default N)" (the list gives the default on its own line);
    "(default 2; 1 runs ...)" keeps what follows the semicolon."""
    text = re.sub(r"\(default [^;)]*; ", "(", text)
    return re.sub(r" ?\(default [^)]*\)", "", text)


def settings_table() -> str:
    """Every setting as a definition list: the option and its ini key, then its meaning and
    default (a table four columns wide left a few characters for the meaning)."""
    items = []
    for s in SETTINGS:
        default = "off" if s.flag else ("none" if s.default is None else f"`{s.default}`")
        option = f"`{s.option}`" if s.flag else f"`{s.option} VALUE`"
        meaning = _cell(_without_default(s.help))
        head = f"{option} &nbsp;·&nbsp; ini `{s.ini_name}`"
        items.append(f"{head}\n:   {meaning}. Default: {default}.\n")
    return "\n".join(items)


def marker_table() -> str:
    rows = ["| keyword | meaning |", "| --- | --- |"]
    rows += [f"| `{name}` | {_cell(text)} |" for name, text in MARKER_KEYWORD_HELP.items()]
    return "\n".join(rows) + "\n"


def example_script(name: str) -> str:
    """A script in examples/ as the docs show it."""
    script = (ROOT / "examples" / name).read_text(encoding="utf-8")
    return "```python\n" + script + "```\n"


# -- blocks generated from the recorded run ------------------------------------------------
def results(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(r) for r in report["results"]]


def typed(report: Mapping[str, Any]) -> Report:
    """The report as the renderers take it."""
    return Report.from_dict(report, str(REPORT))


def by_label(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Results by the name the table shows (``test_x [label]``)."""
    return {label(ReportEntry.from_dict(r)): r for r in results(report)}


def _markdown(table: str) -> str:
    return table.strip("\n") + "\n"


def figures(table: str) -> str:
    """A table of figures in a box whose cells after the first do not wrap (``figures`` in
    docs/css/extra.css): ``1.97x [1.88-2.07]`` stays on one line."""
    return f'<div class="figures" markdown>\n\n{table}\n</div>\n'


def _results_table(entries: Sequence[ReportEntry]) -> str:
    lines = [
        "| test | category | proposer (k) | speedup [95% CI] | accept rate | accept len | "
        "match | verdict | gate |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for e in entries:
        r = e.to_dict()
        low, high = r["speedup_ci"]
        outcome = {Gate.UNKNOWN: "-", Gate.FAIL: "**FAIL**"}.get(gate(e), gate(e))
        lines.append(
            f"| {_cell(label(e))} | {r['category']} | {r['method']} "
            f"({r['num_speculative_tokens']}) | {r['speedup']:.2f}x [{low:.2f}-{high:.2f}] | "
            f"{r['acceptance_rate']:.2f} | {r['mean_acceptance_length']:.2f} | "
            f"{r['match_rate']:.2f} | {r.get('verdict') or '-'} | {outcome} |"
        )
    return "\n".join(lines) + "\n"


def _phase_table(rows: Sequence[ReportEntry]) -> str:
    """Per result: the decode steps in ms, the break-even (pooled, and at full batch), the
    step ratio, the tokens a verification step yields per request and the measured acceptance
    length."""
    lines = [
        "| test | spec step ms | verify | draft | other | base step ms | break-even "
        "[95% CI] | at full batch | step ratio | per request | accept len |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        figures = phases(r)
        if figures is None:
            continue
        spec, base = step(figures, "speculative"), step(figures, "baseline")
        other = sum(phase_ms(spec, p) or 0.0 for p in ("sample", "prepare", "other"))
        be = finite(figures.break_even_length)
        ci = pair(figures.break_even_ci)
        lines.append(
            f"| {_cell(label(r))} | {ms(phase_ms(spec, 'step'))} | "
            f"{ms(phase_ms(spec, 'forward'))} | {ms(phase_ms(spec, 'draft'))} | {ms(other)} | "
            f"{ms(phase_ms(base, 'step'))} | {with_interval(be, ci, '.2f')} | "
            f"{with_interval(finite(figures.break_even_full), None, '.2f')} | "
            f"{with_interval(step_yield(figures, r), None, '.2f')} | "
            f"{with_interval(finite(figures.request_yield), None, '.2f')} | "
            f"{with_interval(finite(figures.acceptance_length), None, '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def _round_table(rows: Sequence[ReportEntry]) -> str:
    """Per result, where each side's round went (ms: prefill steps, decode steps, outside
    any step) and the named phases' share of a speculative decode step."""
    lines = [
        "| test | base round ms | prefill | decode | outside | spec round ms | prefill | decode "
        "| outside | named phases |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        figures = phases(r)
        if figures is None:
            continue
        cells = []
        for side in (figures.baseline, figures.speculative):
            split = side.split()
            if split is None:
                break
            cells += [ms(sum(split)), *(ms(v) for v in split)]
        else:
            share = finite(figures.speculative.decode.named_share)
            named = "-" if share is None else f"{share:.0%}"
            lines.append(f"| {_cell(label(r))} | {' | '.join(cells)} | {named} |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def summary_text(report: Mapping[str, Any]) -> str:
    """What the terminal summary printed, as tables a page can show: the results, the phases,
    the sweep and its schedule, the schedule check, the load, the ranking, the distribution
    check and the "worth it?" checklists."""
    read = typed(report)
    rows = read.results
    out = ["### Results\n\n", figures(_results_table(rows))]
    out.append(f"\n{LEGEND}\n")
    if any(phases(r) is not None for r in rows):
        out += [
            "\n### Where a decode step goes\n",
            "\nMean milliseconds per decode step, timed inside each engine (the speculative "
            "step's verification pass, draft proposal, and sampling + preparation + other). "
            "The decode steps pay where the step ratio (the baseline's decode steps over the "
            "speculative engine's) is above the break-even length (the speculative step over "
            "the baseline step, pooled over every decode step; `at full batch`: over the steps "
            "where the whole batch ran). The step ratio is set by the slowest request; `per "
            "request` is the tokens a verification step yields per request. vLLM's acceptance "
            "length counts only the steps that drafted, so it can lie above both "
            "([methodology](methodology.md#the-cost-ratio-and-the-break-even-length)).\n\n",
            figures(_phase_table(rows)),
        ]
        split = _round_table(rows)
        if split:
            out += [
                "\n### Where a round goes\n",
                "\nPer side, a round's milliseconds in prefill steps, in decode steps and "
                "outside any step (request handling before the first step and after the last): "
                "step ratio / break-even is the decode steps' speedup exactly, and the rest of "
                "the round is what separates it from the measured speedup. `named phases`: the "
                "share of a speculative decode step the named phases account for (the rest is "
                "`other`: bookkeeping, scheduling and, with engines in their own processes, the "
                "traffic between them).\n\n",
                figures(split),
            ]
    for sweep in read.sweeps:
        out += [f"\n### Sweep: `{sweep_name(sweep)}`\n", f"\n{_own(sweep, sweep_line(sweep))}.\n"]
        schedule = schedule_of(sweep)
        if schedule is not None:
            out += [
                f"\n{_own(sweep, schedule_line(schedule))}\n\n",
                _markdown(render_schedule(schedule, tablefmt="github")),
                "\nThe speculative config it gives (`--speculative-config`, one line of JSON "
                "in the HTML report):\n\n```json\n"
                + json.dumps(json.loads(speculative_config_json(schedule)), indent=2)
                + "\n```\n",
            ]
    for check in read.schedule_checks:
        out += [
            f"\n### Schedule check: `{sweep_name(check)}`\n",
            f"\n{_own(check, check_line(check))}\n\n",
            _markdown(render_check(check, tablefmt="github")),
        ]
    for load in read.loads:
        out += [
            f"\n### Under load: `{sweep_name(load)}`\n",
            f"\n{_own(load, load_line(load))}\n\n",
            _markdown(render_loads([load], tablefmt="github")),
            f"\n{LOAD_LEGEND}\n",
        ]
    for ranking in read.rankings:
        out += [
            f"\n### Draft ranking: `{sweep_name(ranking)}`\n",
            f"\n{_own(ranking, ranking_line(ranking))}\n\n",
            _markdown(render_ranking(ranking, tablefmt="github")),
        ]
    checks = read.distribution_checks
    if checks:
        out.append("\n### Sampling equivalence\n\n")
        out += [f"- {_cell(distribution_line(c))}\n" for c in checks]
    found = checklists(read)
    if found:
        out.append("\n### Worth it? (per target and proposer)\n")
        for checklist in found:
            out += [
                f"\n**{_cell(checklist.title)}:** {_cell(checklist.summary)}\n\n",
                "| answer | question | figure |\n| --- | --- | --- |\n",
                *(
                    f"| {line.answer} | {_cell(line.question)} | {_cell(line.figure)} |\n"
                    for line in checklist.lines
                ),
            ]
    return "".join(out)


def _own(item: Any, line: str) -> str:
    """``line`` without the node id it starts with (the heading above names the test)."""
    return _cell(line.removeprefix(f"{item.nodeid}: "))


def sweep_name(item: Any) -> str:
    """A sweep's, check's, load's or ranking's test function (its node id's last part)."""
    return str(item.nodeid).rsplit("::", 1)[-1]


def home_table(report: Mapping[str, Any]) -> str:
    """The docs home's table: per category the first result (a sweep's grid left out)."""
    grids = {str(x.get("nodeid")) for x in report.get("sweeps") or []}
    seen: dict[str, dict[str, Any]] = {}
    for r in results(report):
        if r["nodeid"] not in grids:
            seen.setdefault(str(r["category"]), r)
    rows = [
        "| test | category | speedup [95% CI] | accept rate | verdict |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for r in seen.values():
        low, high = r["speedup_ci"]
        name = label(ReportEntry.from_dict(r))
        rows.append(
            f"| {_cell(name)} | {r['category']} | {r['speedup']:.2f}x [{low:.2f}-{high:.2f}]"
            f" | {r['acceptance_rate']:.2f} | {r.get('verdict') or '-'} |"
        )
    return "\n".join(rows) + "\n"


def short_table(report: Mapping[str, Any]) -> str:
    """README's trimmed table: one row per result (a sweep's grid left to the example-suites
    page), the figures a newcomer reads first."""
    rows = [
        "| test | category | proposer (k) | speedup [95% CI] | accept rate | match | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    grids = {str(x.get("nodeid")) for x in report.get("sweeps") or []}
    for r in results(report):
        if r["nodeid"] in grids:  # a sweep's grid: on the example-suites page
            continue
        low, high = r["speedup_ci"]
        name = label(ReportEntry.from_dict(r))
        rows.append(
            f"| {name} | {r['category']} | {r['method']} ({r['num_speculative_tokens']}) | "
            f"{r['speedup']:.2f}x [{low:.2f}-{high:.2f}] | {r['acceptance_rate']:.2f} | "
            f"{r['match_rate']:.2f} | {r.get('verdict') or '-'} |"
        )
    return "\n".join(rows) + "\n"


#: The example suite over the standard sets (one labelled result per category).
STANDARD_SUITE = "example_suites/test_standard_sets.py"


def standard_sets_table(report: Mapping[str, Any]) -> str:
    """The standard sets' results, one row per category (set = the marker's category, category
    = the result's label); a run recorded before the suite existed says so."""
    rows = [r for r in results(report) if str(r["nodeid"]).startswith(STANDARD_SUITE)]
    if not rows:
        return (
            f"*Not in the recorded run: `{STANDARD_SUITE}` is newer than it; the next "
            "recording of the example suites fills this table.*\n"
        )
    lines = [
        "| set | category | prompts | speedup [95% CI] | accept rate | accept len | match |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        low, high = r["speedup_ci"]
        lines.append(
            f"| {r['category']} | {r['label'] or '-'} | {r['num_prompts']} | "
            f"{r['speedup']:.2f}x [{low:.2f}-{high:.2f}] | {r['acceptance_rate']:.2f} | "
            f"{r['mean_acceptance_length']:.2f} | {r['match_rate']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def run_line(report: Mapping[str, Any]) -> str:
    run = load(RUN)
    session = report["session"]
    minutes, seconds = divmod(round(session["wall_seconds"]), 60)
    return (
        f"Recorded with `{run['command']}` on {run['date']}, {run['machine']}: "
        f"{run['outcome']}, {minutes} min {seconds} s of session wall time, "
        f"{session['engine_starts']} engine starts.\n"
    )


def tuner_comparison() -> str:
    """The k schedule beside vLLM's tuner's rule on the recorded sweep, as
    ``benchmarks/tuner_rule.py`` renders it (the rule lives there, beside its measurement)."""
    path = ROOT / "benchmarks" / "tuner_rule.py"
    spec = importlib.util.spec_from_file_location("tuner_rule_benchmark", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return str(module.render_markdown(load(TUNER)))


# -- placeholders in the example-suites template --------------------------------------------
def _figure(report: Mapping[str, Any], expression: str) -> str:
    """One placeholder: ``FIELD KEY [FORMAT]`` (FIELD a dotted path into the result whose
    table name is KEY; FORMAT ``x`` for a speedup, ``ci``, ``pct`` or a format spec),
    ``session FIELD [FORMAT]``, ``load TEST FIELD [FORMAT]`` (a dotted path into the load
    result of the test function TEST) or ``report PATH [FORMAT]`` (from the report's root)."""
    words = expression.split()
    if words[0] == "load":  # load TEST FIELD [FORMAT]: a field of the test's load result
        loads = {str(x["nodeid"]).rsplit("::", 1)[-1]: x for x in report.get("loads") or []}
        if words[1] not in loads:
            raise KeyError(f"placeholder {{{{ {expression} }}}}: no load {words[1]!r}")
        return _format(_dig(loads[words[1]], words[2]), words[3] if len(words) > 3 else ".2f")
    if words[0] in ("report", "session"):  # a dotted path from the report's root (or session)
        root = report if words[0] == "report" else report["session"]
        return _format(_dig(root, words[1]), words[2] if len(words) > 2 else "")
    field, rest = words[0], " ".join(words[1:])
    fmt = ""
    key = rest
    if rest and rest.rsplit(" ", 1)[-1] in FORMATS or rest.rsplit(" ", 1)[-1].startswith("."):
        key, fmt = rest.rsplit(" ", 1)
    rows = by_label(report)
    if key not in rows:
        raise KeyError(f"placeholder {{{{ {expression} }}}}: no result {key!r} in {sorted(rows)}")
    return _format(_dig(rows[key], field), fmt or ("x" if field == "speedup" else ".2f"))


def _dig(value: Any, path: str) -> Any:
    """``value`` followed along a dotted path of keys and list indices."""
    for part in path.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def _ci(value: Any) -> str:
    return f"[{value[0]:.2f}-{value[1]:.2f}]"


FORMATS: dict[str, Callable[[Any], str]] = {
    "x": lambda v: f"{v:.2f}x",
    "ci": _ci,
    "pct": lambda v: f"{100 * v:.0f}%",
    "int": lambda v: f"{round(v):,}",
    "min": lambda v: f"{int(v // 60)} min {round(v % 60)} s",
    "ms": lambda v: f"{1000 * v:.1f} ms",
}


def _format(value: Any, fmt: str) -> str:
    if fmt in FORMATS:
        return FORMATS[fmt](value)
    if fmt:
        return format(value, fmt)
    return str(value)


def with_derived(report: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``report`` whose phase figures (each result's and sweep point's) carry the
    figures derived from them, for placeholders to quote: ``phases.step_yield`` (the step
    ratio), ``phases.request_yield`` and ``phases.break_even_full``."""
    out = json.loads(json.dumps(report))
    read = typed(report)
    for row, e in zip(out["results"], read.results, strict=True):
        if isinstance(row.get("phases"), dict) and e.result.phases is not None:
            row["phases"]["step_yield"] = step_yield(e.result.phases, e)
            row["phases"]["request_yield"] = e.result.phases.request_yield
            row["phases"]["break_even_full"] = e.result.phases.break_even_full
    for data, sweep in zip(out.get("sweeps") or [], read.sweeps, strict=True):
        for point, (_, _, result) in zip(data.get("points") or [], sweep.points, strict=True):
            if isinstance(point.get("phases"), dict) and result.phases is not None:
                point["phases"]["step_yield"] = step_yield(result.phases)  # a point's alone
    return dict(out)


def render_template(report: Mapping[str, Any], template: str) -> str:
    full = with_derived(report)
    return PLACEHOLDER.sub(lambda m: _figure(full, m.group(1)), template)


# -- the files ---------------------------------------------------------------------------------
def generators(report: Mapping[str, Any]) -> dict[str, Callable[[], str]]:
    return {
        "settings": settings_table,
        "marker-keywords": marker_table,
        "example-summary": lambda: summary_text(report),
        "example-short-table": lambda: short_table(report),
        "home-table": lambda: figures(home_table(report)),
        "example-run": lambda: run_line(report),
        "standard-sets": lambda: standard_sets_table(report),
        "bench-script": lambda: example_script("bench_tiny.py"),
        "record-script": lambda: example_script("gate_tiny.py"),
        "tuner-comparison": tuner_comparison,
    }


def fill_blocks(text: str, made: Mapping[str, Callable[[], str]], where: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in made:
            raise KeyError(f"{where}: unknown generated block {name!r}; known: {sorted(made)}")
        return match.group(1) + made[name]() + match.group(4)

    return BLOCK.sub(one, text)


def rendered() -> dict[Path, str]:
    """Every generated file, as it should be."""
    report = load()
    made = generators(report)
    page = render_template(report, TEMPLATE.read_text(encoding="utf-8"))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    out = {
        PAGE: fill_blocks(page, made, str(TEMPLATE)),
        CHANGELOG_PAGE: "<!-- A copy of CHANGELOG.md made by scripts/render_docs.py -->\n"
        + changelog,
    }
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        if path in out:
            continue
        text = path.read_text(encoding="utf-8")
        out[path] = fill_blocks(text, made, str(path))
    return out


def write_chart(report: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "pytest-specdecode"
    from pytest_specdecode.reporting.charts import speedup_chart

    CHART.parent.mkdir(exist_ok=True)
    svg = re.sub(r"\s*<dc:date>[^<]*</dc:date>", "", speedup_chart(typed(report).results))
    CHART.write_text(svg + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check:
        if stale:
            names = ", ".join(str(p) for p in stale)
            print(f"out of date: {names}; run python scripts/render_docs.py", file=sys.stderr)
            return 1
        return 0
    write_chart(load())
    print("rewrote " + (", ".join(str(p) for p in stale) or "nothing") + f"; chart {CHART}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
