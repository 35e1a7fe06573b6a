"""The HTML report: self-contained, with charts, and visible in a real headless browser."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.measure.sweep import Sweep

from ..fakes import use_fake

# the charts need matplotlib (tests/conftest.py loads it before any in-process run)
pytest.importorskip("matplotlib.pyplot")

SUITE = """
import pytest
from pytest_specdecode import assert_speedup

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_json(specdecode):
    result = specdecode.run(["p"], max_tokens=4)
    result.notes["detail"] = "a note long enough to run off a wide page " * 6
    result.notes["path"] = "/very/long/unbroken/path/" * 6

@pytest.mark.specdecode("chat", target="org/target", speculative_config=SPEC)
def test_choose(specdecode):
    ranking = specdecode.choose_draft(["p"], {
        "ngram2": {"method": "ngram", "num_speculative_tokens": 2},
        "ngram4": {"method": "ngram", "num_speculative_tokens": 4},
    }, max_tokens=4)
    ranking.assert_best("ngram4", within=0.2)

@pytest.mark.specdecode("creative", target="org/target", speculative_config=SPEC)
def test_prose(specdecode):
    specdecode.run(["p"], max_tokens=4)

@pytest.mark.specdecode("concurrency", target="org/target", speculative_config=SPEC)
def test_sweep(specdecode):
    specdecode.sweep(["p"], max_tokens=4, num_speculative_tokens=[1, 4], concurrency=[1, 16])
"""


@pytest.fixture
def report_page(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    engines = use_fake(pytester, monkeypatch)
    engines.speedup_fn = lambda k, c: 2.0 if c is None else (1.0 + 0.2 * k) / (1 + c / 16)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess(
        "--specdecode-html", "report.html", "--specdecode-report", "report.json"
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*results written to report.html*"])
    return pytester.path / "report.html"


#: speedup, acceptance, two sweep charts, the sweep's break-even chart (its points carry
#: phases) and the ranking's speedup against memory
CHARTS = 6


def test_page_is_self_contained_with_charts(report_page: Path) -> None:
    page = report_page.read_text()
    assert page.count("<svg") == CHARTS
    assert "<script" not in page and 'src="http' not in page and 'href="http' not in page
    assert "Speedup by test and category" in page and "Acceptance per position" in page
    assert "worth it" in page and "<table>" in page


def test_the_short_answer_comes_first(report_page: Path) -> None:
    """Under the title the run (date, models, versions, hardware), then the checklist's answer
    in words, above the table."""
    page = report_page.read_text()
    body = page.split("<h1>Speculative decoding report</h1>", 1)[1]
    summary = re.match(r"\s*<section id='summary'>(.*?)</section>", body, re.DOTALL)
    assert summary is not None, body[:300]
    assert "<dt>run started</dt><dd>20" in summary.group(1)
    assert "<dt>models</dt><dd>target org/target; proposers ngram</dd>" in summary.group(1)
    body = body[summary.end() :]
    first = re.match(r"\s*<section id='checklist'>\s*<p class='answer'>(.*?)</p>", body)
    assert first is not None, body[:300]
    # e.g. "worth it for creative at batch 1: 2.02x, chat at batch 1: 2.01x, structured at
    # batch 1: 1.97x, concurrency at batch 1: 1.70x; gone by batch 16" (ordered by speedup)
    answer = re.fullmatch(
        r"<b>ngram on org/target:</b> worth it for ((\w+) at batch 1: (\d\.\d\d)x, ){3}"
        r"concurrency at batch 1: 1\.\d\dx; gone by batch 16",
        first.group(1),
    )
    assert answer is not None, first.group(1)
    assert all(f"{c} at batch 1: " in first.group(1) for c in ("chat", "structured", "creative"))
    assert body.index("Worth it? The checklist") < body.index("<h2>Results</h2>")
    assert (
        "<td class='no'>no</td><td>batch size</td><td>k=4 at batch 1, off above 1 (measured up "
        "to batch 16; larger batches stay off, as vLLM carries the last range forward) in "
        "test_sweep; gone by batch 16"
    ) in body


def test_a_sweeps_schedule_has_its_table_and_the_config_to_paste(report_page: Path) -> None:
    page = report_page.read_text()
    section = page.split("<h2>Sweep: test_suite.py::test_sweep</h2>", 1)[1]
    assert (
        "<h3>Which k at which batch size</h3><p>test_suite.py::test_sweep: k=4 at batch 1, off "
        "above 1 (measured up to batch 16;"
    ) in section
    assert re.search(r"<tr><td>1</td><td>c=1</td><td>4</td><td>1\.\d\dx \[", section)
    assert "<tr><td>2-16</td><td>c=16</td><td>0 (off)</td><td>off</td><td>4</td>" in section
    config = (
        "<pre class='config'>{&quot;method&quot;: &quot;ngram&quot;, "
        "&quot;num_speculative_tokens&quot;: 4, &quot;num_speculative_tokens_per_batch_size"
        "&quot;: [[1, 1, 4], [2, 16, 0]]}</pre>"
    )
    assert config in section


def test_the_ranking_section(report_page: Path) -> None:
    page = report_page.read_text()
    section = page.split("<h2>Draft ranking: test_suite.py::test_choose</h2>", 1)[1]
    assert re.search(r"<tr><td>1</td><td>ngram[24]</td><td>ngram \([24]\)</td><td>\d\.\d\dx "
                     r"\[\d\.\d\d-\d\.\d\d\]</td>", section)  # fmt: skip
    assert "<th>extra GiB</th>" in section and ">best<" in section
    # the fake measures no memory: both candidates are plotted at 0 and said so
    assert "extra memory not measured for ngram" in section and "plotted at 0 GiB" in section
    assert "speedup against memory" in section and "<svg" in section


def test_the_json_report_has_the_checklist_and_the_ranking(report_page: Path) -> None:
    report = json.loads(report_page.with_suffix(".json").read_text())
    (checklist,) = report["checklist"]
    assert checklist["proposer"] == "ngram" and checklist["target"] == "org/target"
    questions = {line["question"]: line["answer"] for line in checklist["lines"]}
    assert questions["batch size"] == "no" and questions["workload: structured"] == "yes"
    # both candidates are ngram (k=2 and k=4), the faster the best, the other tied with it
    assert {questions["choice: ngram2"], questions["choice: ngram4"]} == {"yes", "unknown"}
    assert report["rankings"][0]["nodeid"] == "test_suite.py::test_choose"


def test_cli_renders_the_same_page(
    report_page: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "again.html"
    assert cli_main(["html", str(report_page.with_suffix(".json")), str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {out} (HTML report of 8 results)"]
    assert cli_main(["html", "--verbose", str(report_page.with_suffix(".json")), str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("ngram on org/target: worth it for ")
    assert printed[2].split()[:3] == ["NO", "batch", "size"]
    assert printed[-1] == f"wrote {out} (HTML report of 8 results)"
    page = out.read_text()
    assert page.count("<svg") == CHARTS
    assert page.index("<p class='answer'>") < page.index("<h2>Results</h2>")


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.mark.skipif(_browser() is None, reason="no chromium installed (.ci/run installs it)")
def test_headless_browser_shows_the_charts(report_page: Path, tmp_path: Path) -> None:
    from PIL import Image

    browser: Any = _browser()
    profile = tmp_path / "profile"
    dom = subprocess.run(
        [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
         report_page.as_uri()], capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert dom.count("<svg") == CHARTS and "Speedup by test and category" in dom
    shot = tmp_path / "page.png"
    subprocess.run(
        [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
         "--window-size=1200,4000", report_page.as_uri()], capture_output=True, timeout=120,
    )  # fmt: skip
    image = Image.open(shot).convert("RGB")
    pixels = list(image.getdata())
    # matplotlib's default blue (#1f77b4) marks the plotted points and lines
    blue = sum(1 for r, g, b in pixels if abs(r - 31) < 30 and abs(g - 119) < 30 and b > 150)
    assert blue > 200, f"no chart visible in the screenshot ({blue} blue pixels)"
    assert sum(1 for p in pixels if p != (255, 255, 255)) > 0.02 * len(pixels)
    json.dumps({"screenshot": str(shot)})


#: Added to a copy of the page (the report itself has no script): the rendered widths.
WIDTH_PROBE = (
    "<script>addEventListener('load', () => {"
    "document.body.dataset.table = document.querySelector('#results table').scrollWidth;"
    "document.body.dataset.page = document.documentElement.scrollWidth;});</script>"
)


def _rendered_widths(page: str, tmp_path: Path, name: str) -> tuple[int, int]:
    """(results table, whole page) scrollWidth in a 1400 px wide headless browser."""
    probe = tmp_path / f"{name}.html"
    probe.write_text(page.replace("</body>", WIDTH_PROBE + "</body>"))
    dom = subprocess.run(
        [str(_browser()), *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1400,1000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    found = re.search(r'<body data-table="(\d+)" data-page="(\d+)"', dom)
    assert found is not None, dom[:500]
    return int(found.group(1)), int(found.group(2))


@pytest.mark.skipif(_browser() is None, reason="no chromium installed (.ci/run installs it)")
def test_results_table_fits_a_1400_px_page(report_page: Path, tmp_path: Path) -> None:
    """Long notes wrap inside their cell instead of running off the right edge."""
    page = report_page.read_text()
    assert "a note long enough to run off a wide page" in page
    table, whole = _rendered_widths(page, tmp_path, "page")
    assert table <= 1400 and whole <= 1400, (table, whole)
    # the check can fail: without the wrapping rules the same table runs past 1400 px
    unwrapped = re.sub(r"#results[^\n]*\n", "", page).replace(" max-width: 100%;", "")
    assert unwrapped != page
    table, _ = _rendered_widths(unwrapped, tmp_path, "unwrapped")
    assert table > 1400, table


# --- load tests (specdecode.load) ------------------------------------------------------------


def test_load_positions_put_all_at_once_at_the_right_end() -> None:
    import math

    from pytest_specdecode.reporting.charts import load_positions

    assert load_positions([0.5, 2.0, math.inf]) == ([0.5, 2.0, 2.6], False)
    xs, log = load_positions([1.0, 10.0, 100.0, math.inf])
    assert log and xs[:3] == [1.0, 10.0, 100.0] and xs[3] == pytest.approx(100 * 100**0.25)
    assert load_positions([1.0, 2.0, 8.0]) == ([1.0, 2.0, 8.0], False)
    assert load_positions([math.inf]) == ([1.0], False)
    assert load_positions([1.0, math.inf]) == ([1.0, 1.3], False)


def _page(**products: Any) -> str:
    """The page of a report with no results and ``products`` (lists of their dicts), read as
    a report file is: once, into the typed objects."""
    from pytest_specdecode.baselines.report import Report
    from pytest_specdecode.reporting.html import render_html

    data = {"format_version": 1, "results": [], "environment": {}, **products}
    return render_html(Report.from_dict(data, "test"))


def _load_section(page: str, key: str) -> str:
    return page.split(f"<h2>Under load: {key}</h2>", 1)[1]


def test_load_section_has_the_line_the_table_and_the_chart_with_the_crossover() -> None:
    from ..load_reports import CROSSING, PAYING, load_dict

    crossing = load_dict(CROSSING, slo={"tpot_ms": 30})
    paying = load_dict(PAYING, label="ngram")
    page = _page(loads=[crossing, paying])
    assert page.count("<svg") == 2 and "<script" not in page
    first = _load_section(page, "suite/test_load.py::test_traffic")
    first = first.split("<h2>", 1)[0]
    assert "<p>suite/test_load.py::test_traffic (SLO: tpot 30 ms): speculation pays up to 2 " \
        "req/s, not at all at once</p>" in first  # fmt: skip
    assert re.search(r"<th>goodput req/s\s*</th>", first)
    assert re.search(r"<td>all at once</td><td>40.0 -&gt; 42.0\s*</td>", first)
    assert "id='load-0'" in first and "TPOT against arrival rate" in first
    for line in ("baseline p50", "baseline p99", "speculative p50", "speculative p99"):
        assert f"<!-- {line} -->" in first, line
    assert "stops paying: all at once" in first and "<!-- all at once -->" in first
    second = _load_section(page, "suite/test_load.py::test_traffic[ngram]")
    assert "id='load-1'" in second and "stops paying" not in second
    assert "goodput req/s" not in second
    # the checklist above reads the same loads
    assert "<td class='yes'>yes</td><td>traffic</td><td>speculation pays up to 2 req/s" in page


def test_no_load_section_without_loads() -> None:
    page = _page()
    assert "Under load" not in page and "id='load-" not in page and "<svg" not in page


def test_cli_renders_a_saved_load_report(tmp_path: Path) -> None:
    from ..load_reports import SLOWER, load_dict

    saved = tmp_path / "load.json"
    report = {"format_version": 1, "results": [], "environment": {}, "loads": [load_dict(SLOWER)]}
    saved.write_text(json.dumps(report))
    out = tmp_path / "load.html"
    assert cli_main(["html", str(saved), str(out)]) == 0
    page = out.read_text()
    assert page.count("<svg") == 1 and "stops paying: 1 req/s" in page


# --- k schedules and their checks ------------------------------------------------------------
def test_schedule_and_check_sections_have_their_tables_the_config_and_the_chart() -> None:
    from pytest_specdecode.reporting.table import SCHEDULE_LEGEND

    from ..schedule_reports import FELL_SHORT, NODEID, check, check_dict, sweep_dict

    page = _page(sweeps=[sweep_dict()], schedule_checks=[check_dict(FELL_SHORT)])
    sweep = page.split(f"<h2>Sweep: {NODEID}</h2>", 1)[1].split("<h2>", 1)[0]
    head = f"<h3>Which k at which batch size</h3><p>{NODEID}: k=4 at batch 1, k=2 up to 8, "
    assert head in sweep
    assert (
        "<tr><td>2-8</td><td>c=8</td><td>2</td><td>1.80x [1.76-1.83]</td><td>4</td>"
        "<td>1.82x [1.77-1.87]</td></tr>"
    ) in sweep
    assert (
        "<pre class='config'>{&quot;method&quot;: &quot;draft_model&quot;, &quot;model&quot;: "
        "&quot;org/draft&quot;, &quot;num_speculative_tokens&quot;: 4, "
        "&quot;num_speculative_tokens_per_batch_size&quot;: [[1, 1, 4], [2, 8, 2], [9, 32, 0]]}"
        "</pre>"
    ) in sweep
    section = page.split(f"<h2>Schedule check: {NODEID}</h2>", 1)[1]
    assert f"<p>{html.escape(check(FELL_SHORT).summary())}</p>" in section
    assert (
        "<tr><td>8</td><td>2</td><td>1.40x [1.35-1.45]</td><td>4</td><td>1.82x [1.72-1.92]</td>"
        "<td>0.73-0.81</td><td>NO</td></tr><tr><td>32</td><td>0 (off)</td><td>-</td><td>1</td>"
        "<td>0.89x [0.85-0.93]</td><td>-</td><td>yes (off)</td></tr>"
    ) in section
    chart = section.split("id='schedule-check-0'>", 1)[1]
    # the k's under the concurrency ticks (schedule / best fixed), not over the points
    for text in ("schedule", "best fixed k", "schedule off (not run) ", "k 2 / 4", "k off / 1"):
        assert f"<!-- {text} -->" in chart, text
    assert page.count("<svg") == 3  # the sweep's two charts and the check's
    assert html.escape(SCHEDULE_LEGEND) in page


def test_no_schedule_section_for_a_sweep_without_one() -> None:
    """A sweep that measured nothing has no schedule (every other sweep has one: the report
    model derives it from the points)."""
    from pytest_specdecode.reporting.table import SCHEDULE_LEGEND

    from ..schedule_reports import NODEID, as_read

    page = _page(sweeps=[as_read(Sweep(NODEID).to_dict())])
    assert f"<h2>Sweep: {NODEID}</h2>" in page
    assert "Which k at which batch size" not in page and "Schedule check" not in page
    assert "<pre" not in page and html.escape(SCHEDULE_LEGEND) not in page
