"""Publish a recorded run for the docs: copy a JSON report with every absolute local path
replaced by its display name (``tiny-target``, a folder's name), so that nothing of the
machine it ran on reaches the repository.

    python scripts/publish_run.py /tmp/run.json                # -> docs/data/example-suites.json
    python scripts/publish_run.py /tmp/run.json docs/data/other.json

Then run ``python scripts/render_docs.py`` to render the pages from it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytest_specdecode.names import redact_paths

DEFAULT = Path(__file__).resolve().parent.parent / "docs" / "data" / "example-suites.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a report written by --specdecode-report")
    parser.add_argument(
        "output", type=Path, nargs="?", default=DEFAULT, help=f"(default {DEFAULT})"
    )
    args = parser.parse_args(argv)
    data = json.loads(args.report.read_text(encoding="utf-8"))
    args.output.write_text(json.dumps(redact_paths(data), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output} from {args.report} (local paths replaced by display names)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
