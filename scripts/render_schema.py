"""Write the JSON Schema of report files from the report model.

    python scripts/render_schema.py          # rewrite pytest_specdecode/schemas/results.schema.json
    python scripts/render_schema.py --check  # exit 1 if it is out of date

The schema is generated (:func:`pytest_specdecode.baselines.report.report_schema`, from the
records' fields and their metadata); ``tests/unit/test_result_form.py`` fails when the committed
file differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.baselines.report import schema_text  # noqa: E402

SCHEMA = ROOT / "pytest_specdecode" / "schemas" / "results.schema.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    args = parser.parse_args(argv)
    text = schema_text()
    if SCHEMA.read_text() == text:
        return 0
    if args.check:
        print(f"{SCHEMA.relative_to(ROOT)} is out of date: run python scripts/render_schema.py")
        return 1
    SCHEMA.write_text(text)
    print(f"wrote {SCHEMA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
