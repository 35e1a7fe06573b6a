"""``python -m pytest_specdecode.tiny``: print the tiny model folders (building them if needed).

``--ini`` prints a ``pytest.ini`` instead that points the plugin at them: the tiny target, the
tiny draft (k = 4) and the engine arguments they run with on a CPU. Its paths are this
machine's (its cache and the package's folder), so a note on stderr, and a comment in the file,
say to use it locally and not commit it; stdout stays the file alone, for ``> pytest.ini``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pytest_specdecode.tiny import ENGINE_KWARGS, TinyModels, tiny_models


def ini_text(models: TinyModels) -> str:
    """A ``pytest.ini`` whose specdecode settings name the tiny models."""
    draft = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    return (
        "# From python -m pytest_specdecode.tiny --ini: this machine's folders and CPU-only\n"
        "# engine settings. Use it locally, do not commit it; rerun the command elsewhere.\n"
        "[pytest]\n"
        f"specdecode_target = {models.target}\n"
        f"specdecode_speculative_config = {json.dumps(draft)}\n"
        f"specdecode_engine_kwargs = {json.dumps(ENGINE_KWARGS)}\n"
    )


def ini_note(models: TinyModels) -> str:
    """What ``--ini`` says on stderr: the file is this machine's, not one to commit."""
    return (
        "pytest-specdecode: this pytest.ini is for this machine only: it names local folders "
        f"(the padded tiny target in this machine's cache, {models.target}; the draft where the "
        f"package is installed or checked out, {models.draft}) and CPU-only engine settings "
        f"({json.dumps(ENGINE_KWARGS)}). "
        "Use it locally and do not commit it: run `python -m pytest_specdecode.tiny --ini` on "
        "each machine, and name your own models for a GPU.\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_specdecode.tiny",
        description="Print the built-in tiny models' folders (built on first use).",
    )
    parser.add_argument(
        "--ini",
        action="store_true",
        help="print a pytest.ini that uses them instead (this machine's paths and CPU settings: "
        "use it locally, do not commit it)",
    )
    args = parser.parse_args(argv)
    models = tiny_models()
    if args.ini:
        print(ini_text(models), end="")
        sys.stdout.flush()
        print(ini_note(models), end="", file=sys.stderr)
        return
    print(f"target: {models.target}")
    print(f"draft: {models.draft}")
    print(f"weak_draft: {models.weak_draft}")
    print(f"target_unpadded: {models.target_unpadded}")
    print(f"eagle3_head: {models.eagle3_head}")
    print(f"mtp_target: {models.mtp_target}")


if __name__ == "__main__":
    main()
