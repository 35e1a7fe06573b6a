"""``python -m pytest_specdecode.tiny``: print the tiny model folders (building them if needed)."""

from __future__ import annotations

from pytest_specdecode.tiny import tiny_models


def main() -> None:
    """Print one ``name: path`` line per model folder."""
    models = tiny_models()
    print(f"target: {models.target}")
    print(f"draft: {models.draft}")
    print(f"weak_draft: {models.weak_draft}")
    print(f"target_unpadded: {models.target_unpadded}")


if __name__ == "__main__":
    main()
