"""The HTML report's style sheet (:mod:`.html` puts it in the page's ``<style>``)."""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; }
.wrap { max-width: 100%; overflow-x: auto; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.4em; text-align: left; vertical-align: top; }
td { overflow-wrap: break-word; } li, p, h2, h3 { overflow-wrap: anywhere; }
#results td:first-child { min-width: 9em; }
#results td:nth-child(6) { white-space: nowrap; }
#results td:last-child, .checklist td:last-child { overflow-wrap: anywhere; }
#results.notes td:last-child { min-width: 14em; }
th { background: #f3f3f3; }
.chart { margin: 1em 0; } .env { color: #555; font-size: 0.85em; }
.answer { font-size: 1.1em; max-width: 60em; }
.yes { color: #1a7f37; font-weight: bold; } .no { color: #c62828; font-weight: bold; }
.unknown { color: #777; font-weight: bold; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
.chart svg, .chart img { max-width: 100%; height: auto; }
#summary { border: 1px solid #ddd; background: #fafafa; padding: 0.6em 1em; margin: 1em 0;
  max-width: 60em; }
#summary dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.2em 1em; margin: 0; }
#summary dt { font-weight: bold; color: #444; } #summary dd { margin: 0; overflow-wrap: anywhere; }
.flag { border-left: 4px solid #c62828; background: #fff4f4; padding: 0.4em 0.8em;
  margin: 0.6em 0; }
.flag.expected { border-left-color: #b26a00; background: #fff8e6; }
.legend { display: flex; flex-wrap: wrap; gap: 0.3em 1.2em; font-size: 0.85em; margin: 0.5em 0; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em;
  margin-right: 0.3em; border-radius: 2px; }
.mark { display: inline-block; width: 0; height: 1em; border-left: 2px dashed #c62828;
  vertical-align: -0.15em; margin: 0 0.4em 0 0.2em; }
.phase-chart { margin: 1em 0 1.4em; max-width: 56em; }
.phase-title { font-weight: bold; font-size: 0.95em; overflow-wrap: anywhere; }
.phase-row { display: flex; align-items: center; margin: 0.25em 0; }
.phase-side { flex: 0 0 6.8em; font-size: 0.85em; color: #444; }
.phase-track { position: relative; flex: 1 1 auto; display: flex; align-items: center;
  height: 1.6em; min-width: 0; }
.seg { height: 100%; display: inline-flex; align-items: center; justify-content: center;
  overflow: hidden; color: #fff; font-size: 0.75em; white-space: nowrap; }
.phase-total { margin-left: 0.4em; font-size: 0.85em; white-space: nowrap; }
.break-even { position: absolute; top: -0.2em; bottom: -0.2em; border-left: 2px dashed #c62828; }
.phase-text { font-size: 0.85em; color: #333; margin: 0.3em 0 0; overflow-wrap: anywhere; }
@media (max-width: 600px) { body { margin: 0.7em; } h1 { font-size: 1.3em; }
  #summary dl { grid-template-columns: 1fr; } #summary dd { margin-bottom: 0.4em; } }
"""
