"""Regenerate the example prompt files from the tiny models' held-out corpus stream.

    python example_suites/prompts/generate.py

The files are committed; this script only documents (and reproduces) where they came from.
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_specdecode.tiny import corpus

HERE = Path(__file__).parent
COUNTS = {"structured": 8, "creative": 8, "summarization": 8, "long_context": 4}
#: Prose before each long-context request: about 1,800 tokens, most of the tiny models'
#: 2,048-token window (their training documents stop at about 900).
LONG_CONTEXT_WORDS = 1000


def category_prompts(category: str) -> list[str]:
    """The prompts written to ``CATEGORY.jsonl``."""
    if category == "long_context":
        return corpus.long_context_prompts(COUNTS[category], LONG_CONTEXT_WORDS, seed=0)
    return corpus.prompts(category, COUNTS[category], seed=0)


def main() -> None:
    for category, n in COUNTS.items():
        lines = []
        for i, prompt in enumerate(category_prompts(category)):
            item: dict[str, object] = {
                "id": f"{category}-{i}",
                "category": category,
                "prompt": prompt,
            }
            if category in ("structured", "long_context"):
                item["output_schema"] = corpus.SCHEMAS[corpus.schema_of(prompt)]
            lines.append(json.dumps(item))
        (HERE / f"{category}.jsonl").write_text("\n".join(lines) + "\n")
        print(f"{category}: {n} prompts")


if __name__ == "__main__":
    main()
