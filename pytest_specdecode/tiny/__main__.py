"""``python -m pytest_specdecode.tiny``: print the tiny model folders (building them if needed).

``--ini`` prints a ``pytest.ini`` instead that points the plugin at them: the tiny target, the
tiny draft (k = 4) and the engine arguments they run with on a CPU.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from pytest_specdecode.tiny import ENGINE_KWARGS, TinyModels, tiny_models


def ini_text(models: TinyModels) -> str:
    """A ``pytest.ini`` whose specdecode settings name the tiny models."""
    draft = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    return (
        "[pytest]\n"
        f"specdecode_target = {models.target}\n"
        f"specdecode_speculative_config = {json.dumps(draft)}\n"
        f"specdecode_engine_kwargs = {json.dumps(ENGINE_KWARGS)}\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_specdecode.tiny",
        description="Print the built-in tiny models' folders (built on first use).",
    )
    parser.add_argument(
        "--ini", action="store_true", help="print a pytest.ini that uses them instead"
    )
    args = parser.parse_args(argv)
    models = tiny_models()
    if args.ini:
        print(ini_text(models), end="")
        return
    print(f"target: {models.target}")
    print(f"draft: {models.draft}")
    print(f"weak_draft: {models.weak_draft}")
    print(f"target_unpadded: {models.target_unpadded}")


if __name__ == "__main__":
    main()
