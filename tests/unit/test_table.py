import json
import math
import re
from dataclasses import replace
from typing import Any

from tabulate import tabulate

from pytest_specdecode.baselines.compare import Verdict
from pytest_specdecode.baselines.report import ReportEntry
from pytest_specdecode.measure.choice import Ranking
from pytest_specdecode.measure.equivalence import DistributionCheck, PositionTest
from pytest_specdecode.measure.figures import with_notes, with_verdict
from pytest_specdecode.measure.load import LoadResult
from pytest_specdecode.measure.result import Outcome
from pytest_specdecode.reporting.html import _results_table
from pytest_specdecode.reporting.table import (
    HEADERS,
    Gate,
    gate,
    printable,
    ranking_line,
    render,
    render_comparison,
    render_ranking,
    results_table,
)

from ..helpers import fake_result


def test_table_renders_one_row_per_result_outside_pytest() -> None:
    a = ReportEntry(fake_result(), Outcome(passed=True), with_outputs=False)
    b = ReportEntry(fake_result(spec_times=(2.0, 2.2, 1.8)), Outcome(passed=False))
    text = render([a, b])
    lines = text.splitlines()
    assert all(h in lines[0] for h in ("speedup [95% CI]", "accept rate", "match"))
    assert len(lines) == 2 + 2
    assert "2.00x [2.00-2.00]" in lines[2] and lines[2].rstrip().endswith("pass")
    assert "0.50x" in lines[3] and lines[3].rstrip().endswith("FAIL")
    assert "draft_model (4)" in lines[2]
    assert len(HEADERS) == 14


def test_markdown_table() -> None:
    text = render([ReportEntry(fake_result())], tablefmt="github")
    assert text.startswith("| test")


def test_notes_column_only_when_notes_exist() -> None:
    plain = ReportEntry(fake_result())
    assert "notes" not in render([plain]).splitlines()[0]
    noted = with_notes(fake_result(), json_valid="8/8")
    text = render([plain, ReportEntry(noted)])
    assert "notes" in text.splitlines()[0]
    assert text.splitlines()[-1].rstrip().endswith("json_valid=8/8")


def test_control_characters_from_files_are_escaped() -> None:
    """A baseline's test id, label, category or notes cannot drive the terminal."""
    row = replace(
        fake_result(), nodeid="t.py::test_\x1b[2J", label="\x1b]0;owned\x07", category="a\tb\r",
        mode="\u202e", notes={"n\x9b": "\x00"},
    )  # fmt: skip
    text = render([ReportEntry(row)])
    assert not any(ch in text for ch in "\x1b\x07\t\r\x00\x9b\u202e")
    assert "test_\\x1b[2J [\\x1b]0;owned\\x07]" in text
    assert "a\\tb\\r" in text and "\\u202e" in text and "n\\x9b=\\x00" in text
    verdict = Verdict("t.py::test_\x1b[31m", "speedup\x1b", "regressed", 2.0, 1.0, 0.01)
    table = render_comparison([verdict])
    assert "\x1b" not in table and "test_\\x1b[31m" in table and "speedup\\x1b" in table


def _tabulated(entries: list[ReportEntry]) -> str:
    headers, table = results_table(entries)
    text = [[str(cell) for cell in row] for row in table]
    return tabulate(text, headers=headers, tablefmt="html", disable_numparse=True)


def test_html_results_table_classes_verdict_and_gate_cells_in_tabulates_layout() -> None:
    """The HTML page's results table is laid out as tabulate's html format (the padding too);
    a verdict or gate cell gets its class from its value, not from its text."""
    undecided = [ReportEntry(fake_result()), ReportEntry(replace(fake_result(), label="<&>"))]
    assert [gate(e) for e in undecided] == [Gate.UNKNOWN] * 2
    assert _results_table(undecided) == _tabulated(undecided)
    slower = fake_result(spec_times=(2.0, 2.2, 1.8))
    entries = [
        ReportEntry(with_verdict(fake_result(), None), Outcome(passed=True)),
        ReportEntry(replace(with_verdict(slower, None), label="worth it"), Outcome(passed=False)),
        ReportEntry(replace(with_verdict(fake_result(spec_times=(0.8, 1.3, 1.0)), None),
                            inconclusive="ran out of rounds")),
    ]  # fmt: skip
    page = _results_table(entries)
    for cell in ("<td class='yes'>worth it</td>", "<td class='yes'>pass</td>",
                 "<td class='no'>not worth it</td>", "<td class='no'>FAIL</td>",
                 "<td class='unknown'>inconclusive</td>"):  # fmt: skip
        assert cell in page
    assert page.count("class=") == 6 and "<td>test_a [worth it]" in page  # a label is text
    unpadded = re.compile(r"\s+</td>")
    plain = re.sub(r"<td class='\w+'>", "<td>", unpadded.sub("</td>", page))
    assert plain == unpadded.sub("</td>", _tabulated(entries))


def test_printable_keeps_text_and_optionally_newlines() -> None:
    assert printable("héllo ✓ [batch 32]") == "héllo ✓ [batch 32]"
    assert printable("a\nb") == "a\\nb"
    assert printable("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"


def test_an_unknown_figure_shows_as_its_dict_forms_null_does() -> None:
    """The typed model's unknown figure (nan) reads as the dict form's null: a dash."""
    unknown = replace(fake_result(), alpha=math.nan, speedup=math.nan, speedup_ci=(math.nan, 2.0))
    absent = replace(fake_result(), alpha=None, speedup=math.nan, speedup_ci=(math.nan, 2.0))
    text = render([ReportEntry(unknown)])
    assert text == render([ReportEntry(absent)])
    assert " -x [--2.00] " in text and "nan" not in text


def test_per_prompt_spread_column_only_when_measured() -> None:
    plain = ReportEntry(fake_result())
    assert "p10/p50/p90" not in render([plain])
    spread = ReportEntry(replace(fake_result(), request_acceptance=(1.0, 2.0, 3.0, 4.0, 5.0, None)))
    lines = render([plain, spread]).splitlines()
    assert "accept len p10/p50/p90" in lines[0]
    assert (
        lines[0].index("accept len ") < lines[0].index("accept len p10") < lines[0].index("alpha")
    )
    assert "1.40/3.00/4.60" in lines[3] and "1.40/3.00/4.60" not in lines[2]


RANKING = {
    "nodeid": "t.py::test_choose",
    "best": "good",
    "reason": "good 2.10x (1.95-2.26x) is the fastest and worth it",
    "candidates": [
        {"name": "good", "method": "draft_model", "num_speculative_tokens": 4, "speedup": 2.1,
         "speedup_ci": [1.95, 2.26], "acceptance_rate": 0.78, "mean_acceptance_length": 4.1,
         "alpha": 0.9, "cost_ratio": 0.21, "extra_memory_gib": 0.21, "verdict": "worth it",
         "tied": False},
        {"name": "ngram", "method": "ngram", "num_speculative_tokens": 4, "speedup": 2.0,
         "speedup_ci": [1.9, 2.1], "acceptance_rate": 0.5, "mean_acceptance_length": 3.0,
         "alpha": 0.7, "cost_ratio": 0.0, "extra_memory_gib": None, "verdict": "worth it",
         "tied": True},
    ],
}  # fmt: skip


def test_ranking_table_and_line() -> None:
    ranking = Ranking.from_dict(RANKING)
    lines = render_ranking(ranking).splitlines()
    assert lines[0].split()[:4] == ["rank", "candidate", "method", "(k)"]
    assert lines[2].split() == (
        "1 good draft_model (4) 2.10x [1.95-2.26] 0.78 4.10 0.90 0.21 0.21 worth it best".split()
    )
    assert lines[3].split()[-4:] == ["-", "worth", "it", "tied"]
    assert ranking_line(ranking) == (
        "t.py::test_choose: draft ranking: good 2.10x (1.95-2.26x), ngram 2.00x (1.90-2.10x) "
        "(tied); best: good"
    )
    undecided = [dict(c, verdict="inconclusive") for c in RANKING["candidates"]]
    none = Ranking.from_dict(dict(RANKING, candidates=undecided))
    assert ranking_line(none).endswith(
        "(tied); none is worth it: the fastest, good 2.10x (1.95-2.26x), is inconclusive"
    )


def test_ranking_line_is_the_rankings_own_summary() -> None:
    from types import SimpleNamespace

    results = {
        name: SimpleNamespace(speedup=s, speedup_ci=ci, verdict=v, label=name, method="ngram",
                              draft=None, num_speculative_tokens=2, acceptance_rate=0.5,
                              mean_acceptance_length=2.0, alpha=0.5, cost_ratio=0.0,
                              extra_memory_gib=None, verdict_reasons=[])
        for name, s, ci, v in (("a", 1.4, (0.9, 2.0), "inconclusive"),
                               ("b", 1.2, (1.1, 1.3), "worth it"))
    }  # fmt: skip
    ranking = Ranking.of("t.py::test_x", results)  # type: ignore[arg-type]
    assert ranking_line(ranking) == ranking.summary()
    read = Ranking.from_dict(json.loads(json.dumps(ranking.to_dict())))
    assert ranking_line(read) == ranking.summary()  # as a report has it
    assert ranking_line(Ranking.of("t", {})) == Ranking.of("t", {}).summary()
    # a figure a report does not know (null) is "-", in the line and the reason alike
    unknown = [dict(c, speedup=None, speedup_ci=[None, None], verdict="inconclusive")
               for c in RANKING["candidates"]]  # fmt: skip
    said = Ranking.from_dict(dict(RANKING, nodeid="t\x1b", candidates=unknown))
    assert ranking_line(said) == (
        "t\\x1b: draft ranking: good -x (---x), ngram -x (---x) (tied); none is worth it: the "
        "fastest, good -x (---x), is inconclusive"
    )
    assert said.summary() == ranking_line(said).replace("\\x1b", "\x1b")


def test_sweep_line_says_the_best_k_and_the_crossover() -> None:
    """A sweep is data; its line is the report's only wording of it, the same for a sweep read
    back from its dict."""
    from types import SimpleNamespace

    from pytest_specdecode.measure.sweep import Sweep
    from pytest_specdecode.reporting.table import sweep_line

    def point(speedup: float, high: float) -> Any:
        return SimpleNamespace(speedup=speedup, speedup_ci=(speedup - 0.1, high),
                               acceptance_rate=0.5, phases=None)  # fmt: skip

    sweep = Sweep("t.py::test_s")
    for k, c, s, high in ((1, 1, 1.5, 1.6), (2, 1, 1.8, 1.9), (1, 8, 0.8, 0.9), (2, 8, 0.7, 0.8)):
        sweep.add(k, c, point(s, high))
    assert sweep_line(sweep) == (
        "t.py::test_s: best k per concurrency: c=1: k=2 (1.80x), c=8: k=1 (0.80x); "
        "speedup's interval drops below 1.0 at concurrency 8"
    )
    pays = Sweep("t.py::test_s", sweep.points[:2], label="wide")
    said = (
        "t.py::test_s[wide]: best k per concurrency: c=1: k=2 (1.80x); no crossover: "
        "speculation still pays at concurrency 1"
    )
    assert sweep_line(pays) == said
    assert sweep_line(Sweep.from_dict(json.loads(json.dumps(pays.to_dict())))) == said
    assert sweep_line(Sweep("t.py::test_s")).endswith(
        "best k per concurrency: ; no crossover: speculation still pays at concurrency -"
    )


def test_distribution_line() -> None:
    from pytest_specdecode.reporting.table import distribution_line

    check = _distribution(1.5)
    assert check.passed
    assert distribution_line(check) == (
        f"t.py::test_d: same distribution at temperature 0.8: p={check.p_value:.3g} (alpha "
        "0.01; chi-square summed over 1 prompt per position, Bonferroni over 2 positions; 40 "
        "samples of 3 tokens per engine)"
    )
    failed = _distribution(30.0)
    assert not failed.passed
    assert f"DIFFERENT distributions at temperature 0.8: p={failed.p_value:.3g} (" in (
        distribution_line(failed)
    )


def _distribution(statistic: float) -> DistributionCheck:
    """A check of one prompt at two positions, the first with ``statistic`` (1 df)."""
    tests = [PositionTest(0, position, s, 1, 0.0, [], [])
             for position, s in ((1, statistic), (2, 0.5))]  # fmt: skip
    return DistributionCheck("t.py::test_d", 0.8, 40, 3, 0.01, tests)


def test_time_line_splits_the_wall_time() -> None:
    from pytest_specdecode.reporting.table import time_line

    session = {
        "wall_seconds": 136.2, "workers": 1, "engine_mode": "multiprocess",
        "time": {"engine_starts": 5, "restarts": 1, "start_seconds": 93.4, "stop_seconds": 5.2,
                 "warmup_seconds": 7.3, "round_seconds": 30.1, "cost_ratio_seconds": 0.5,
                 "sampling_seconds": 0.0, "other_seconds": 0.2},
    }  # fmt: skip
    assert time_line(session) == (
        "time: 136 s wall (multiprocess engines): 5 engine starts (1 restart) 93 s, "
        "shutdowns 5.2 s, warm-up 7.3 s, measured rounds 30 s, cost ratio 0.5 s, other 0.2 s"
    )
    workers = {**session, "workers": 2, "time": {**session["time"], "other_seconds": None}}
    assert "over 2 pytest-xdist workers (the parts add up their time)" in time_line(workers)
    assert "other" not in time_line(workers)


def test_memory_parts_stay_in_the_report_not_in_the_notes_column() -> None:
    memory = {"memory": "draft weights 0.0018 GiB + draft KV cache 0.0199 GiB"}
    row = ReportEntry(replace(fake_result(), notes=memory))
    assert "notes" not in render([row]).splitlines()[0]
    row = ReportEntry(replace(fake_result(), notes={**memory, "json": "8/8 parse"}))
    text = render([row])
    assert "json=8/8 parse" in text and "draft weights" not in text


# --- load tests (specdecode.load) ------------------------------------------------------------


def _load_lines(loads: list[LoadResult]) -> list[list[str]]:
    """The load table's rows split on its column gaps (two spaces or more)."""
    import re

    from pytest_specdecode.reporting.table import render_loads

    return [re.split(r"\s{2,}", line.strip()) for line in render_loads(loads).splitlines()]


def test_load_table_gives_each_rate_both_sides_and_the_gain() -> None:
    from pytest_specdecode.reporting.table import LOAD_HEADERS

    from ..load_reports import CROSSING, load_read, load_result

    lines = _load_lines([load_read(CROSSING, slo={"tpot_ms": 30})])
    assert lines[0] == list(LOAD_HEADERS)
    assert len(lines) == 2 + 3
    points = load_result(CROSSING).points
    ci = [p.tpot_speedup_ci for p in points]
    assert ci[0][0] > 1.0 and ci[2][0] < 1.0 < ci[2][1]
    b99, s99 = (side.tpot[99] * 1000 for side in (points[0].baseline, points[0].speculative))
    assert 25.6 < b99 < 25.8 and 13.6 < s99 < 13.6 * 1.04  # pooled over the two rounds
    assert lines[2] == [
        "test_traffic", "0.5 req/s", "24.0 -> 12.0", f"{b99:.1f} -> {s99:.1f}",
        "100.0 -> 120.0",
        f"2.00x [{ci[0][0]:.2f}-{ci[0][1]:.2f}]", "0.89 -> 0.89", "yes",
    ]  # fmt: skip
    assert lines[3][1:3] == ["2 req/s", "30.0 -> 20.0"] and lines[3][6:] == ["0.44 -> 0.89", "yes"]
    assert lines[4][1] == "all at once" and lines[4][5] == f"0.95x [{ci[2][0]:.2f}-{ci[2][1]:.2f}]"
    assert lines[4][-1] == "no"


def test_load_table_has_a_goodput_column_only_under_an_slo() -> None:
    from ..load_reports import PAYING, load_read

    plain = _load_lines([load_read(PAYING)])
    assert "goodput req/s" not in plain[0] and len(plain[0]) == 7
    assert plain[4][:2] == ["test_traffic", "100 req/s"] and plain[4][-1] == "yes"
    both = _load_lines([load_read(PAYING), load_read(PAYING, label="slo", slo={"e2e_ms": 1})])
    assert "goodput req/s" in both[0]
    assert [row[6] for row in both[2:]] == ["-"] * 3 + ["0.00 -> 0.00"] * 3


def test_load_table_shows_an_unmeasured_gain_as_a_dash() -> None:
    from ..load_reports import PAYING, load_dict

    data = load_dict(PAYING[:1])
    data["points"][0].update(tpot_speedup=None, tpot_speedup_ci=[None, None], pays=False)
    data["points"][0]["speculative"]["tpot"] = None
    (row,) = _load_lines([LoadResult.from_dict(data)])[2:]
    assert row[2] == "24.0 -> -" and row[5] == "-x [---]" and row[-1] == "no"


def test_load_line_is_the_load_results_own_wording() -> None:
    from pytest_specdecode.reporting.table import load_line

    from ..load_reports import CROSSING, PAYING, SLOWER, load_read, load_result

    for points in (CROSSING, PAYING, SLOWER):
        result = load_result(points)
        assert load_line(load_read(points)) == f"{result.key}: {result.traffic_line()}"
    assert load_line(load_read(CROSSING, slo={"ttft_ms": 500, "tpot_ms": 30})) == (
        "suite/test_load.py::test_traffic (SLO: ttft 500 ms, tpot 30 ms): speculation pays up "
        "to 2 req/s, not at all at once"
    )
    assert load_line(load_read(SLOWER, label="x")).startswith(
        "suite/test_load.py::test_traffic[x]: speculation does not lower p50 TPOT at any rate"
    )


def test_summary_has_the_load_table_after_the_sweeps_only_when_loads_were_measured() -> None:
    from pytest_specdecode.measure.sweep import Sweep
    from pytest_specdecode.reporting.table import LOAD_LEGEND, summary_lines

    from ..load_reports import CROSSING, load_read

    row = ReportEntry(fake_result())
    sweep = Sweep("t.py::test_s")
    check = _distribution(1.5)
    session = {"wall_seconds": 1.0, "workers": 1, "time": {}}
    plain = summary_lines([row], [sweep], [check], [], session)
    assert not any("TPOT" in line or line.startswith("load ") for line in plain)
    assert LOAD_LEGEND not in plain
    lines = summary_lines([row], [sweep], [check], [], session, loads=[load_read(CROSSING)])
    assert lines[1].startswith("sweep ") and lines[4].startswith("sample_equivalence ")
    assert lines[2].splitlines()[0].split()[:3] == ["test", "rate", "p50"]
    assert "all at once" in lines[2].splitlines()[-1]
    assert lines[3] == (
        "load suite/test_load.py::test_traffic: speculation pays up to 2 req/s, not at all at once"
    )
    assert LOAD_LEGEND in lines and lines.index(LOAD_LEGEND) == len(lines) - 2


def test_load_names_from_files_are_escaped() -> None:
    from pytest_specdecode.reporting.table import load_line, render_loads

    from ..load_reports import PAYING, load_read

    data = load_read(PAYING, nodeid="t.py::test_\x1b[2J", label="\x07")
    text = render_loads([data]) + load_line(data)
    assert "\x1b" not in text and "\x07" not in text
    assert "test_\\x1b[2J [\\x07]" in text and "t.py::test_\\x1b[2J[\\x07]" in text


# --- k schedules (Sweep.schedule) and their checks (check_schedule) ---------------------------
def test_schedule_table_gives_each_measured_concurrency_its_range_and_both_speedups() -> None:
    from pytest_specdecode.reporting.table import SCHEDULE_HEADERS, render_schedule, schedule_rows

    from ..schedule_reports import sweep_read

    schedule = sweep_read().schedule()
    assert schedule_rows(schedule) == [
        ["1", "c=1", "4", "2.29x [2.21-2.38]", "4", "2.29x [2.21-2.38]"],
        ["2-8", "c=8", "2", "1.80x [1.76-1.83]", "4", "1.82x [1.77-1.87]"],
        ["9-32", "c=32", "0 (off)", "off", "1", "0.89x [0.85-0.93]"],
    ]
    assert render_schedule(schedule).splitlines()[0].split("  ")[0] == SCHEDULE_HEADERS[0]


def test_schedule_line_and_the_config_to_paste_are_the_schedules_own() -> None:
    from pytest_specdecode.reporting.table import (
        config_line,
        schedule_line,
        speculative_config_json,
    )

    from ..schedule_reports import NODEID, sweep, sweep_read

    schedule = sweep_read().schedule()
    assert schedule_line(schedule) == f"{NODEID}: {sweep().schedule().summary()}"
    assert schedule_line(schedule) == (
        f"{NODEID}: k=4 at batch 1, k=2 up to 8, off above 8 (measured up to batch 32; larger "
        "batches stay off, as vLLM carries the last range forward)"
    )
    text = (
        '{"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 4, '
        '"num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 8, 2], [9, 32, 0]]}'
    )
    assert speculative_config_json(schedule) == text
    assert json.loads(text) == sweep().schedule().speculative_config
    assert config_line(schedule) == f"--speculative-config '{text}'"
    # a quote in a model path stays one shell word
    quoted = replace(schedule, base_config={**schedule.base_config, "model": "it's/draft"})
    assert config_line(quoted).startswith('--speculative-config \'{"method": "draft_model", ')
    assert '"model": "it\'"\'"\'s/draft"' in config_line(quoted)


def test_check_table_gives_both_speedups_and_where_the_schedule_holds() -> None:
    from pytest_specdecode.reporting.table import check_line, check_rows

    from ..schedule_reports import FELL_SHORT, check, check_read

    assert check_rows(check_read()) == [
        ["1", "4", "2.30x [2.22-2.38]", "4", "2.33x [2.17-2.50]", "0.92-1.06", "yes"],
        ["8", "2", "1.75x [1.69-1.81]", "4", "1.82x [1.72-1.92]", "0.91-1.01", "yes"],
        ["32", "0 (off)", "-", "1", "0.89x [0.85-0.93]", "-", "yes (off)"],
    ]
    assert [row[-1] for row in check_rows(check_read(FELL_SHORT))] == ["yes", "NO", "yes (off)"]
    assert check_line(check_read(FELL_SHORT)) == check(FELL_SHORT).summary()
    assert (
        " does not hold at c=8 (shown more than 5% slower than the best fixed k): "
        in check_line(check_read(FELL_SHORT))
    )
    # past the sweep's concurrencies the schedule stays off and nothing was measured
    beyond = check_rows(check_read(concurrencies=(8, 64)))
    assert beyond[1] == ["64", "0 (off)", "-", "1", "-", "-", "yes (off)"]


def test_summary_shows_each_schedule_and_check_after_the_sweeps() -> None:
    from pytest_specdecode.measure.sweep import Sweep
    from pytest_specdecode.reporting.table import SCHEDULE_LEGEND, summary_lines

    from ..schedule_reports import FELL_SHORT, NODEID, check_read, sweep_read

    session = {"wall_seconds": 1.0, "workers": 1, "time": {}}
    lines = summary_lines(
        [], [sweep_read()], [], [], session, schedule_checks=[check_read(FELL_SHORT)]
    )
    assert lines[0].startswith("sweep ")
    assert lines[1].startswith("schedule suite/test_k_schedule.py::test_k_schedule: k=4 at batch")
    assert lines[2].splitlines()[3].split() == ["2-8", "c=8", "2", "1.80x", "[1.76-1.83]", "4",
                                                "1.82x", "[1.77-1.87]"]  # fmt: skip
    assert lines[3].startswith('--speculative-config \'{"method": "draft_model"')
    assert lines[4].startswith("check_schedule suite/test_k_schedule.py::test_k_schedule: ")
    assert lines[5].splitlines()[3].split() == ["8", "2", "1.40x", "[1.35-1.45]", "4", "1.82x",
                                                "[1.72-1.92]", "0.73-0.81", "NO"]  # fmt: skip
    assert lines.index(SCHEDULE_LEGEND) == len(lines) - 2
    # a sweep that measured nothing has no schedule; no checks: no schedule lines, no legend
    plain = summary_lines([], [Sweep(NODEID)], [], [], session)
    assert len(plain) == 3 and SCHEDULE_LEGEND not in plain
