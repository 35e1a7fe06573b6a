"""The HTML report: self-contained, with charts, and visible in a real headless browser."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode.__main__ import main as cli_main

from .fakes import use_fake

# imported here, before any in-process pytester run, so that its module snapshot keeps it
pytest.importorskip("matplotlib.pyplot")

SUITE = """
import pytest
from pytest_specdecode import assert_speedup

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

@pytest.mark.specdecode("structured", target="org/target", speculative_config=SPEC)
def test_json(specdecode):
    specdecode.run(["p"], max_tokens=4)

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
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*results written to report.html*"])
    return pytester.path / "report.html"


def test_page_is_self_contained_with_charts(report_page: Path) -> None:
    page = report_page.read_text()
    assert page.count("<svg") == 4  # speedup, acceptance, and two sweep charts
    assert "<script" not in page and 'src="http' not in page and 'href="http' not in page
    assert "Speedup by category" in page and "Acceptance per position" in page
    assert "worth it" in page and "<table>" in page


def test_cli_renders_the_same_page(report_page: Path, tmp_path: Path) -> None:
    out = tmp_path / "again.html"
    assert cli_main(["html", str(report_page.with_suffix(".json")), str(out)]) == 0
    assert out.read_text().count("<svg") == 4


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
    assert dom.count("<svg") == 4 and "Speedup by category" in dom
    shot = tmp_path / "page.png"
    subprocess.run(
        [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
         "--window-size=1200,2400", report_page.as_uri()], capture_output=True, timeout=120,
    )  # fmt: skip
    image = Image.open(shot).convert("RGB")
    pixels = list(image.getdata())
    # matplotlib's default blue (#1f77b4) marks the plotted points and lines
    blue = sum(1 for r, g, b in pixels if abs(r - 31) < 30 and abs(g - 119) < 30 and b > 150)
    assert blue > 200, f"no chart visible in the screenshot ({blue} blue pixels)"
    assert sum(1 for p in pixels if p != (255, 255, 255)) > 0.02 * len(pixels)
    json.dumps({"screenshot": str(shot)})
