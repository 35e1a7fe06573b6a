"""Issue 28's figures in every renderer: the JSON schema of ``results[i]["phases"]`` (and a
sweep point's), the terminal and Markdown phase lines, the HTML bar chart and break-even
chart, the checklist's "choice of draft" and "batch size" lines, the export and the JUnit
properties; each also without phase figures (an old report, a served engine), where it says
there are none instead of guessing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_specdecode.baselines import files
from pytest_specdecode.engines.protocol import PHASES
from pytest_specdecode.errors import ConfigError
from pytest_specdecode.reporting.phases import phase_line

from ..phase_reports import empty_step, entries, entry, phases, report, result, step, sweep, typed

# --- the schema -----------------------------------------------------------------------------


def _validate(data: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(files.results_schema()).validate(data)


def test_the_schema_describes_every_field_of_the_contract() -> None:
    defs = files.results_schema()["$defs"]
    written = phases()
    assert set(written) == set(defs["phases"]["properties"])
    # counted since issue 44 (absent from reports made before): request_steps, full_step_ms
    optional = {"request_steps", "full_step_ms"}
    assert set(written["baseline"]["decode"]) | optional == set(defs["phase_step"]["properties"])
    assert {f"{p}_ms" for p in PHASES} < set(defs["phase_step"]["properties"])
    assert defs["phases"]["properties"]["clock"] == {"enum": ["wall", "cuda-events"]}
    assert defs["result"]["properties"]["phases"] == {"$ref": "#/$defs/phases"}
    points = defs["sweep"]["properties"]["points"]["items"]["properties"]
    assert points["phases"] == {"$ref": "#/$defs/phases"}


def test_phases_absent_null_or_whole_validate(tmp_path: Path) -> None:
    absent = result()
    del absent["phases"]
    served = result("test_b", phases=None)
    gpu = result("test_c", phases=phases(clock="cuda-events", break_even=None,
                                         break_even_ci=[None, None]))  # fmt: skip
    gpu["phases"]["speculative"]["prefill"] = empty_step()
    gpu["phases"]["break_even_ci"] = None
    data = report([result(), absent, served, gpu], sweeps=[sweep(), sweep(with_phases=False)])
    _validate(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert files.load(path, "report file")["results"][0]["phases"] == phases()


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        (("phases", "clock"), "cpu", "'cpu' is not one of ['wall', 'cuda-events']"),
        (("phases", "baseline", "decode", "steps"), -1, "less than the minimum of 0"),
        (("phases", "speculative", "decode", "draft_ms"), -0.5, "less than the minimum of 0"),
        (("phases", "speculative", "decode", "forward_ms"), "4.1", "'4.1' is not of type"),
        (("phases", "break_even_ci"), [1.9], "is too short"),
        (("phases", "acceptance_length_ci"), [3.2, 3.4, 3.6], "is too long"),
        (("phases", "break_even_length"), -2.1, "less than the minimum of 0"),
        (("phases", "draft_share"), 1.5, "greater than the maximum of 1"),
        (("phases", "speculative"), {"decode": step()}, "'prefill' is a required property"),
        (("phases",), "wall", "'wall' is not of type 'object', 'null'"),
    ],
)
def test_malformed_phases_are_refused_naming_where(
    tmp_path: Path, where: tuple[str, ...], value: Any, says: str
) -> None:
    data = report([result()])
    inner: Any = data["results"][0]
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as error:
        files.load(path, "report file")
    assert f"invalid at results/0/{'/'.join(where)}: " in str(error.value)
    assert says in str(error.value)


def test_a_malformed_sweep_points_phases_are_refused_naming_where(tmp_path: Path) -> None:
    data = report([], sweeps=[sweep()])
    data["sweeps"][0]["points"][2]["phases"]["clock"] = "device"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="invalid at sweeps/0/points/2/phases/clock: 'device'"):
        files.load(path, "report file")


# --- the terminal and Markdown lines ---------------------------------------------------------


def test_the_phase_line_is_the_contracts() -> None:
    assert phase_line(entry(result())) == (
        "phases: spec step 7.9 ms = verify 4.1 + draft 2.9 + sample 0.5 + prepare 0.3 + "
        "other 0.1; base step 3.8 ms; break-even 2.1 tokens/step [1.9-2.3], measured 3.4 "
        "[3.2-3.6]"
    )


def test_the_phase_line_without_figures_says_so() -> None:
    absent = result()
    del absent["phases"]
    assert phase_line(entry(absent)) == "phases: no phase figures recorded"
    assert phase_line(entry(result(phases=None)), served=True) == (
        "phases: no phase figures: served engine"
    )
    gpu = phases(clock="cuda-events", break_even=None, break_even_ci=[None, None],
                 acceptance_ci=[None, None])  # fmt: skip
    gpu["speculative"]["decode"] = empty_step()
    assert phase_line(entry(result(phases=gpu))) == (
        "phases: spec step - (no decode steps); base step 3.8 ms; break-even -, measured 3.4; "
        "clock cuda-events"
    )
    tiny = phases(spec=step(sample=0.004))
    assert "sample 0.004 +" in phase_line(entry(result(phases=tiny)))


def test_the_summary_puts_each_phase_line_under_its_row() -> None:
    from pytest_specdecode.reporting.table import PHASE_LEGEND, summary_lines

    rows = entries([result(), result("test_b", label="batch 8", phases=None)])
    lines = summary_lines(rows, [], [], [], {"time": {}})
    table = lines[0].splitlines()
    assert table[2].startswith("test_a ") and table[3] == f"  {phase_line(rows[0])}"
    assert table[4].startswith("test_b [batch 8] ")
    assert table[5] == "  phases: no phase figures recorded"
    assert PHASE_LEGEND in lines


def test_the_summary_says_once_when_no_result_has_phases() -> None:
    from pytest_specdecode.reporting.table import PHASE_LEGEND, render, summary_lines

    rows = entries([result(phases=None), result("test_b", phases=None)])
    served = summary_lines(rows, [], [], [], {"time": {}}, served=True)
    assert served[:2] == [render(rows), "phases: no phase figures: served engine"]
    assert PHASE_LEGEND not in served
    old = summary_lines(rows, [], [], [], {"time": {}})  # a report from before phase timing
    assert old[0] == render(rows) and not any("phase" in line for line in old)


def test_the_markdown_lists_the_phase_lines() -> None:
    from pytest_specdecode.reporting.table import phase_markdown

    rows = entries([result(label="a`b"), result("test_b", phases=None)])
    assert phase_markdown(rows) == [
        f"- `test_a [a'b]`: {phase_line(rows[0])}",
        "- `test_b`: phases: no phase figures recorded",
    ]
    assert phase_markdown(rows[1:], served=True) == ["Phases: no phase figures: served engine."]
    assert phase_markdown(rows[1:]) == []


# --- the checklist ---------------------------------------------------------------------------


def _line(data: dict[str, Any], question: str) -> tuple[str, str]:
    from pytest_specdecode.reporting.checklist import checklists

    (found,) = checklists(typed(data))
    (line,) = [x for x in found.lines if x.question == question]
    return line.answer, line.figure


LOSING = phases(
    spec=step(prepare=0.4, forward=11.0, sample=0.9, draft=2.9, other=0.2), break_even=4.1,
    break_even_ci=[3.9, 4.3], acceptance=3.3, acceptance_ci=[3.1, 3.5],
    explanation="the verification pass at batch 32 costs 3.24 baseline steps",
)  # fmt: skip


def test_choice_of_draft_quotes_the_figures_from_inside_the_engine() -> None:
    assert _line(report([result()]), "choice of draft") == ("yes", (
        "test_a: draft proposal 37% of each speculative step (cost ratio 0.12), verification "
        "pass 1.21 baseline steps; acceptance length 3.40 [3.20-3.60] against break-even 2.10 "
        "[1.90-2.30]"
    ))  # fmt: skip


def test_choice_of_draft_no_names_the_dominant_term() -> None:
    from pytest_specdecode.reporting.checklist import checklists

    data = report([result(phases=LOSING, speedup=0.8, speedup_ci=[0.75, 0.85])])
    answer, figure = _line(data, "choice of draft")
    assert answer == "no"
    assert figure.endswith(
        "against break-even 4.10 [3.90-4.30] (the verification pass at batch 32 costs 3.24 "
        "baseline steps)"
    )
    (found,) = checklists(typed(data))
    assert found.summary.endswith(
        "the proposal does not pay for itself: the verification pass at batch 32 costs 3.24 "
        "baseline steps"
    )


def test_choice_of_draft_unknown_where_the_intervals_overlap_or_without_figures() -> None:
    close = phases(acceptance=2.2, acceptance_ci=[2.0, 2.4])
    answer, figure = _line(report([result(phases=close)]), "choice of draft")
    assert answer == "unknown" and figure.endswith(": the intervals overlap")
    old = result()
    del old["phases"]
    assert _line(report([old]), "choice of draft") == (
        "unknown", "no phase figures recorded (a report from before phase timing)"
    )  # fmt: skip
    served = report([result(phases=None)], environment={"served": {"speculative": {}}})
    assert _line(served, "choice of draft") == ("unknown", "no phase figures: served engine")


def test_choice_of_draft_of_a_proposer_without_a_model() -> None:
    ngram = result(method="ngram", draft=None, cost_ratio=0.0,
                   phases={**phases(), "draft_share": 0.02})  # fmt: skip
    _, figure = _line(report([ngram]), "choice of draft")
    assert figure.startswith("test_a: proposal 2% of each speculative step (cost ratio 0.00)")


def test_batch_size_quotes_break_even_against_acceptance_per_concurrency() -> None:
    swept = sweep()
    runs = [result("test_sweep", category="sweep", phases=None)]
    _, figure = _line(report(runs, sweeps=[swept]), "batch size")
    assert figure.endswith(
        "; break-even vs measured acceptance length in test_sweep: c=1 (k=4) 1.80 [1.67-1.93] "
        "vs 3.40 [3.20-3.60]; c=8 (k=4) 2.30 [2.14-2.46] vs 3.40 [3.20-3.60]; c=32 (k=4) 3.80 "
        "[3.53-4.07] vs 3.40 [3.20-3.60]"
    )
    # one test's runs at two batch sizes, one of them without phase figures
    runs = [result(label="batch 1", concurrency=1),
            result(label="batch 32", concurrency=32, phases=LOSING),
            result(label="batch 8", concurrency=8, phases=None)]  # fmt: skip
    _, figure = _line(report(runs), "batch size")
    assert figure.endswith(
        "; break-even vs measured acceptance length in test_a: c=1 (k=4) 2.10 [1.90-2.30] vs "
        "3.40 [3.20-3.60]; c=32 (k=4) 4.10 [3.90-4.30] vs 3.30 [3.10-3.50]"
    )
    _, old = _line(report(runs[:1], sweeps=[sweep(with_phases=False)]), "batch size")
    assert "break-even" not in old


# --- the HTML page ---------------------------------------------------------------------------


def test_the_page_has_a_stacked_bar_per_test_and_one_legend() -> None:
    pytest.importorskip("matplotlib.pyplot")
    from pytest_specdecode.reporting.html import render_html
    from pytest_specdecode.reporting.phases import PHASE_COLOURS

    runs = [result(label="batch 1"), result(label="batch 32", phases=LOSING),
            result("test_b", phases=None)]  # fmt: skip
    page = render_html(typed(report(runs)))
    assert page.count("id='phase-legend'") == 1
    for phase, colour in PHASE_COLOURS.items():
        assert page.count(f"background:{colour}'") >= 1 + (phase != "draft"), phase
    # one scale per test: the longest of the two steps and the break-even mark takes 80%
    first = page[page.index("id='phases-0'") : page.index("id='phases-1'")]
    scale = 3.8 * 3.4 / 0.8  # the mark: the baseline step times the measured length
    assert f"width:{100 * 3.4 / scale:.2f}%;background:{PHASE_COLOURS['forward']}" in first
    assert f"width:{100 * 2.9 / scale:.2f}%;background:{PHASE_COLOURS['draft']}" in first
    assert "class='break-even' style='left:80.00%'" in first
    assert ">3.8 ms<" in first and ">7.9 ms<" in first
    assert phase_line(entry(runs[0])).replace("'", "&#x27;") in first
    second = page[page.index("id='phases-1'") : page.index("id='phases-2'")]
    assert "the verification pass at batch 32 costs 3.24 baseline steps" in second
    third = page[page.index("id='phases-2'") :]
    assert "<p class='phase-text'>no phase figures recorded</p>" in third


def test_the_page_says_when_no_test_has_phase_figures() -> None:
    pytest.importorskip("matplotlib.pyplot")
    from pytest_specdecode.reporting.html import render_html

    served = render_html(typed(report([result(phases=None)], environment={"served": {"x": 1}},
                                      sweeps=[sweep(with_phases=False)])))  # fmt: skip
    assert "<p id='phases'>no phase figures: served engine.</p>" in served
    assert "Break-even against concurrency: no phase figures: served engine." in served
    assert "phase-legend" not in served and "break-even-0" not in served
    old = result()
    del old["phases"]
    assert "no phase figures recorded in this report" in render_html(typed(report([old])))


def test_a_sweeps_break_even_chart_has_both_lengths_per_k_at_the_measured_concurrencies() -> None:
    pytest.importorskip("matplotlib.pyplot")
    import matplotlib.pyplot as plt

    from pytest_specdecode.reporting.charts import break_even_figure
    from pytest_specdecode.reporting.html import render_html

    fig = break_even_figure(typed(report([], sweeps=[sweep()])).sweeps[0])
    (ax,) = fig.axes
    assert list(ax.get_xticks()) == [1, 8, 32] and ax.get_xscale() == "log"
    lines = {bars.get_label(): bars.lines[0] for bars in ax.containers}
    assert set(lines) == {f"{what}, k={k}" for k in (2, 4)
                          for what in ("break-even L*", "measured acceptance length")}  # fmt: skip
    be = lines["break-even L*, k=4"]
    assert list(be.get_xdata()) == [1, 8, 32]
    assert list(be.get_ydata()) == pytest.approx([1.8, 2.3, 3.8])
    assert list(lines["measured acceptance length, k=2"].get_ydata()) == [2.6, 2.6, 2.6]
    assert lines["measured acceptance length, k=4"].get_linestyle() == "--"
    plt.close(fig)
    page = render_html(typed(report([], sweeps=[sweep()])))
    assert "<div class='chart fit' id='break-even-0'><svg" in page


#: A page that shows the report in a frame ``{width}`` px wide (headless Chromium's window is
#: at least 500 px wide) and writes, once loaded, how far right the frame's phase charts and
#: break-even chart reach.
FRAME = (
    "<html><body style='margin:0'><iframe id='f' src='{page}' style='width:{width}px;"
    "height:3000px;border:0'></iframe><script>"
    "document.getElementById('f').addEventListener('load', () => {{"
    "const d = document.getElementById('f').contentDocument;"
    "const right = s => Math.max(0, ...[...d.querySelectorAll(s)].map("
    "e => e.getBoundingClientRect().right));"
    "document.body.dataset.view = d.documentElement.clientWidth;"
    "document.body.dataset.bars = Math.ceil(right('#phases *'));"
    "document.body.dataset.chart = Math.ceil(right('#break-even-0 svg'));}});</script>"
    "</body></html>"
)


def _reach(page: str, tmp_path: Path, width: int) -> tuple[int, int, int]:
    """(viewport, right edge of the phase charts, of the break-even chart) in CSS pixels, the
    page shown ``width`` px wide."""
    import re
    import subprocess

    from ..plugin.test_html import BROWSER_FLAGS, _browser

    (tmp_path / "page.html").write_text(page)
    frame = tmp_path / f"frame-{width}.html"
    frame.write_text(FRAME.format(page="page.html", width=width))
    dom = subprocess.run(
        [str(_browser()), *BROWSER_FLAGS, "--allow-file-access-from-files",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000", "--dump-dom",
         frame.as_uri()], capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    found = re.search(r'data-view="(\d+)" data-bars="(\d+)" data-chart="(\d+)"', dom)
    assert found is not None, dom[:500]
    view, bars, chart = (int(found.group(i)) for i in (1, 2, 3))
    return view, bars, chart


def test_the_phase_charts_and_the_break_even_chart_fit_a_phone_and_a_laptop(
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib.pyplot")
    from pytest_specdecode.reporting.html import render_html

    from ..plugin.test_html import _browser

    if _browser() is None:
        pytest.skip("no chromium installed (.ci/run installs it)")
    runs = [result(label="batch 1"), result(label="batch 32", phases=LOSING)]
    page = render_html(typed(report(runs, sweeps=[sweep()])))
    for width in (390, 1280):
        view, bars, chart = _reach(page, tmp_path, width)
        assert view <= width and 0 < bars <= view and 0 < chart <= view, (width, bars, chart)
    # the check can fail: without the rule that fits the chart to the page it runs past 390 px
    unfitted = page.replace(".chart svg, .chart img { max-width: 100%; height: auto; }", "")
    assert unfitted != page
    assert _reach(unfitted, tmp_path, 390)[2] > 390


# --- junit XML properties --------------------------------------------------------------------


def test_junit_properties_carry_the_break_even_and_the_draft_share() -> None:
    from types import SimpleNamespace

    from pytest_specdecode.plugin.fixtures import SpecDecode

    def record(phases_: Any) -> dict[str, Any]:
        fixture = SpecDecode.__new__(SpecDecode)
        fixture._node = SimpleNamespace(user_properties=[])  # type: ignore[assignment]
        engine = SimpleNamespace(tokens_per_second=100.0)
        result_ = SimpleNamespace(
            label="batch 8", category="structured", method="draft_model",
            num_speculative_tokens=4, speedup=1.8, speedup_ci=(1.7, 1.9), acceptance_rate=0.6,
            mean_acceptance_length=3.4, match_rate=1.0, baseline=engine, speculative=engine,
            phases=phases_,
        )  # fmt: skip
        fixture._record_properties(result_)  # type: ignore[arg-type]
        return dict(fixture._node.user_properties)  # type: ignore[union-attr]

    props = record(SimpleNamespace(to_dict=phases))  # as Result.phases: to_dict() gives it
    assert props["specdecode[batch 8].break_even_length"] == 2.1
    assert props["specdecode[batch 8].break_even_ci_low"] == 1.9
    assert props["specdecode[batch 8].break_even_ci_high"] == 2.3
    assert props["specdecode[batch 8].draft_share"] == 0.37
    assert record(phases(break_even=None, break_even_ci=[None, None])) == {
        k: v for k, v in props.items() if "break_even" not in k
    }  # fmt: skip
    served = record(None)
    assert served["specdecode[batch 8].speedup"] == 1.8
    assert not any("break_even" in k or "draft_share" in k for k in served)
