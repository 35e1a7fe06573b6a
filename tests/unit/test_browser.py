"""The docs site and the HTML report of the recorded run, as a reader sees them in a real
browser: every docs page and the report at 1280 px (a laptop) and 390 px (a phone).

At both widths the page itself does not scroll sideways; at 1280 px no docs table or code block
needs sideways scrolling inside its own box (at 390 px a wide table may scroll in its box); the
report's top summary names the run's date and its models.

One headless Chromium session measures every page: a harness page holds each page in an iframe
of the given width (file URLs may read each other with ``--allow-file-access-from-files``), a
script measures them and writes the figures into the DOM, which ``--dump-dom`` prints. Set
``SPECDECODE_SCREENSHOTS=DIR`` to also keep a screenshot of each page (CI artefacts).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "docs" / "data" / "example-suites.json"
RUN = ROOT / "docs" / "data" / "example-suites.run.json"
WIDTHS = (1280, 390)

BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--allow-file-access-from-files",
]  # fmt: skip


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _missing() -> str | None:
    """Why this test cannot run here, or None."""
    if _browser() is None:
        return "no chromium installed (.ci/run installs it)"
    for module, package in (("mkdocs", "mkdocs"), ("material", "mkdocs-material")):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed (tox's py and docs environments have it)"
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (the HTML report's charts)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

#: Measures every framed page once all have loaded; writes the figures as JSON into #result.
PROBE = """
<script>
function clipper(el) {
  for (let a = el.parentElement; a && a.tagName !== 'BODY'; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (s.overflowX !== 'visible') return a;
  }
  return null;
}
function wide(el, win) {
  // how far the box's content runs past what its reader sees without scrolling inside it
  const s = win.getComputedStyle(el);
  if (s.display === 'none' || el.getClientRects().length === 0) return 0;
  let over = 0;
  if (s.overflowX !== 'visible') over = el.scrollWidth - el.clientWidth;
  const box = clipper(el);
  const width = el.getBoundingClientRect().width;
  const room = box ? box.clientWidth : win.innerWidth;
  return Math.max(over, Math.round(width - room));
}
function measure(frame) {
  const win = frame.contentWindow, doc = frame.contentDocument;
  const boxes = [];
  doc.querySelectorAll('table, pre, pre > code').forEach((el) => {
    const over = wide(el, win);
    if (over > 1) {
      const near = el.closest('table, pre') || el;
      const text = (near.innerText || '').trim().split('\\n')[0].slice(0, 70);
      boxes.push({tag: el.tagName.toLowerCase(), over: over, text: text});
    }
  });
  const summary = doc.querySelector('#summary');
  return {
    page: frame.dataset.page, width: +frame.dataset.width,
    scroll: doc.documentElement.scrollWidth, view: win.innerWidth,
    boxes: boxes, summary: summary ? summary.innerText : null,
    title: doc.title,
  };
}
addEventListener('load', () => setTimeout(() => {
  const out = [...document.querySelectorAll('iframe')].map((f) => {
    try { return measure(f); } catch (e) { return {page: f.dataset.page, error: String(e)}; }
  });
  document.getElementById('result').textContent = JSON.stringify(out);
}, 1500));
</script>
"""


def _build_site(out: Path) -> list[Path]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    pages = [
        p
        for p in sorted(out.rglob("*.html"))
        if p.name != "404.html" and "assets" not in p.relative_to(out).parts
    ]
    assert len(pages) >= 10, pages
    return pages


def _render_report(out: Path) -> Path:
    """The HTML report of the recorded run. A run recorded before reports carried
    ``session.started`` gets the date its publication names (docs/data/*.run.json)."""
    from pytest_specdecode.baselines.report import Report
    from pytest_specdecode.reporting.html import render_html

    report = json.loads(RECORDED.read_text(encoding="utf-8"))
    if not report["session"].get("started"):
        report["session"]["started"] = json.loads(RUN.read_text(encoding="utf-8"))["date"]
    out.write_text(render_html(Report.from_dict(report, str(RECORDED))))
    return out


def _measure(pages: dict[str, Path], tmp_path: Path) -> list[dict[str, Any]]:
    frames = "".join(
        f"<iframe data-page='{name}' data-width='{w}' src='{path.as_uri()}' "
        f"style='width:{w}px;height:900px;border:0;display:block'></iframe>"
        for name, path in pages.items()
        for w in WIDTHS
    )
    harness = tmp_path / "harness.html"
    harness.write_text(
        f"<!DOCTYPE html><html><body style='margin:0'><pre id='result'></pre>{frames}"
        f"{PROBE}</body></html>"
    )
    dom = subprocess.run(
        [str(_browser()), *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1400,1000", "--virtual-time-budget=60000", "--dump-dom",
         harness.as_uri()],
        capture_output=True, text=True, timeout=180,
    ).stdout  # fmt: skip
    found = re.search(r"<pre id=\"result\">(.*?)</pre>", dom, re.DOTALL)
    assert found and found.group(1), dom[:2000]
    import html

    return list(json.loads(html.unescape(found.group(1))))


def _screenshots(pages: dict[str, Path], tmp_path: Path) -> None:
    """One screenshot per page and width into $SPECDECODE_SCREENSHOTS (CI artefacts)."""
    where = os.environ.get("SPECDECODE_SCREENSHOTS")
    if not where:
        return
    Path(where).mkdir(parents=True, exist_ok=True)
    for name, path in pages.items():
        for w in WIDTHS:
            shot = Path(where) / f"{name.replace('/', '_')}-{w}.png"
            subprocess.run(
                [str(_browser()), *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'shots'}",
                 f"--window-size={w},2400", f"--screenshot={shot}", path.as_uri()],
                capture_output=True, timeout=120,
            )  # fmt: skip


def problems(measured: list[dict[str, Any]]) -> list[str]:
    """What a reader would have to scroll sideways to see, page by page."""
    found = []
    for m in measured:
        where = f"{m['page']} at {m.get('width')} px"
        if "error" in m:
            found.append(f"{where}: not measured ({m['error']})")
            continue
        if m["scroll"] > m["view"] + 1:
            found.append(f"{where}: the page scrolls sideways ({m['scroll']} px wide)")
        if m["width"] >= 1280 and m["page"] != "report":
            found += [
                f"{where}: a {b['tag']} is {b['over']} px too wide for its box ({b['text']!r})"
                for b in m["boxes"]
            ]
    return found


def test_docs_and_report_fit_a_laptop_and_a_phone(tmp_path: Path) -> None:
    site = tmp_path / "site"
    pages = {str(p.relative_to(site)): p for p in _build_site(site)}
    pages["report"] = _render_report(tmp_path / "report.html")
    measured = _measure(pages, tmp_path)
    _screenshots(pages, tmp_path)
    assert len(measured) == len(pages) * len(WIDTHS)
    found = problems(measured)
    assert not found, "\n".join(found)
    report = [m for m in measured if m["page"] == "report"]
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    from pytest_specdecode.names import display_name

    models = {display_name(r.get("target")) for r in recorded["results"]}
    for m in report:
        summary = m["summary"] or ""
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", summary), f"no run date in {summary!r}"
        assert all(model in summary for model in models), (models, summary)


def test_the_check_sees_a_table_too_wide_for_its_box() -> None:
    measured = [
        {"page": "a.html", "width": 1280, "scroll": 1280, "view": 1280,
         "boxes": [{"tag": "table", "over": 800, "text": "option"}]},
        {"page": "a.html", "width": 390, "scroll": 1400, "view": 390, "boxes": []},
        {"page": "b.html", "width": 390, "scroll": 390, "view": 390,
         "boxes": [{"tag": "table", "over": 800, "text": "option"}]},
    ]  # fmt: skip
    assert problems(measured) == [
        "a.html at 1280 px: a table is 800 px too wide for its box ('option')",
        "a.html at 390 px: the page scrolls sideways (1400 px wide)",
    ]
