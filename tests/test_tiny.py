"""The built-in tiny models: committed files, padding, the held-out prompts."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdecode.tiny import TARGET_LAYERS, WEIGHTS_DIR, corpus, tiny_models

ROOT = Path(__file__).resolve().parent.parent


def test_committed_weights_and_card_are_present() -> None:
    for name in ("target", "draft"):
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            assert (WEIGHTS_DIR / name / f).is_file(), f"{name}/{f}"
    assert (WEIGHTS_DIR.parent / "MODEL_CARD.md").is_file()
    draft = json.loads((WEIGHTS_DIR / "draft" / "config.json").read_text())
    assert draft["num_hidden_layers"] == 1


def test_padded_target_computes_the_same_logits(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    models = tiny_models(cache_dir=tmp_path)
    config = json.loads((models.target / "config.json").read_text())
    assert config["num_hidden_layers"] == TARGET_LAYERS
    assert tiny_models(cache_dir=tmp_path) == models  # second call reuses the cache

    ids = torch.tensor([[5, 17, 300, 42, 7, 99]])
    logits = []
    for folder in (models.target, models.target_unpadded):
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
        with torch.no_grad():
            logits.append(model(ids).logits)
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-5, atol=1e-5)


def test_cli_prints_the_folders(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest_specdecode.tiny"],
        capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "PYTEST_SPECDECODE_CACHE": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    paths = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert set(paths) == {"target", "draft", "target_unpadded"}
    assert Path(paths["target"]).is_relative_to(tmp_path)


def test_example_prompt_files_match_the_corpus() -> None:
    """The committed example prompts are what ``prompts/generate.py`` writes."""
    generate = runpy.run_path(str(ROOT / "example_suites" / "prompts" / "generate.py"))
    assert set(generate["COUNTS"]) == set(corpus.CATEGORIES)
    for category in generate["COUNTS"]:
        path = ROOT / "example_suites" / "prompts" / f"{category}.jsonl"
        committed = [json.loads(line)["prompt"] for line in path.read_text().splitlines()]
        assert committed == generate["category_prompts"](category), category


def test_unknown_category_names_the_choices() -> None:
    with pytest.raises(ValueError, match="structured"):
        corpus.prompts("poetry", 1)
