"""Models are named for a person (tiny-*, a folder's name, a hub id) and a published report
holds no absolute local path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.names import display_name, redact_paths
from pytest_specdecode.tiny import WEIGHTS_DIR

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("model", "shown"),
    [
        ("/home/u/.cache/pytest-specdecode/tiny-3ed28775dd13/target", "tiny-target"),
        (str(WEIGHTS_DIR / "draft"), "tiny-draft"),
        (str(WEIGHTS_DIR / "weak_draft") + "/", "tiny-weak-draft"),
        (str(WEIGHTS_DIR / "target"), "tiny-target"),
        ("/models/llama-3.1-8b/", "llama-3.1-8b"),
        ("./checkpoints/mine", "mine"),
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        (None, "-"),
    ],
)
def test_display_names(model: str | None, shown: str) -> None:
    assert display_name(model) == shown


def test_a_relative_local_folder_is_shown_by_its_name(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "models" / "mine").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert display_name("models/mine") == "mine"
    assert display_name("models/absent") == "models/absent"  # a hub id, as given


def test_engine_messages_name_models_by_display_name() -> None:
    spec = {
        "method": "draft_model",
        "model": str(WEIGHTS_DIR / "draft"),
        "num_speculative_tokens": 4,
    }
    target = "/srv/cache/tiny-0123456789ab/target"
    assert EngineConfig.create(target, None, {}).describe() == "baseline engine (tiny-target)"
    assert EngineConfig.create(target, spec, {}).describe() == (
        "speculative engine (tiny-target, draft_model k=4, draft tiny-draft)"
    )


def test_redact_paths_replaces_paths_inside_strings_and_keeps_the_rest() -> None:
    report = {
        "target": "/root/.cache/pytest-specdecode/tiny-3ed28775dd13/target",
        "lines": [
            '--speculative-config \'{"model": "/opt/x/pytest_specdecode/tiny/weights/draft"}\'',
            "LD_PRELOAD=/usr/lib/libiomp5.so; see https://docs.vllm.ai/en/latest/x.html, n/a",
        ],
        "speedup": 1.5,
    }
    assert redact_paths(report) == {
        "target": "tiny-target",
        "lines": [
            '--speculative-config \'{"model": "tiny-draft"}\'',
            "LD_PRELOAD=libiomp5.so; see https://docs.vllm.ai/en/latest/x.html, n/a",
        ],
        "speedup": 1.5,
    }


#: A local absolute path as it leaks into docs: a home, a checkout, a cache or a temp folder.
LOCAL_PATH = re.compile(r"(?<![\w.:/])/(?:root|home|work|tmp|Users|private|var/folders)/[\w.-]+")


def test_no_absolute_local_path_in_readme_docs_or_docs_data() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += sorted((ROOT / "docs" / "data").glob("*.json"))
    found = {
        str(p.relative_to(ROOT)): sorted(set(LOCAL_PATH.findall(p.read_text(encoding="utf-8"))))
        for p in files
    }
    found = {k: v for k, v in found.items() if v}
    assert not found, f"absolute local paths (publish runs with scripts/publish_run.py): {found}"


def test_the_local_path_check_can_fail() -> None:
    text = json.dumps({"target": "/root/.cache/x/target", "url": "https://a.b/root/x"})
    assert LOCAL_PATH.findall(text) == ["/root/.cache"]
