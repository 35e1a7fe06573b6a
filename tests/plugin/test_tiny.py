"""The built-in tiny models: committed files, padding, the held-out prompts."""

from __future__ import annotations

import importlib.util
import json
import runpy
import shutil
import subprocess
import sys
import warnings
from dataclasses import asdict
from pathlib import Path

import pytest

from pytest_specdecode.engines.compat import check_compatibility
from pytest_specdecode.tiny import TARGET_LAYERS, WEIGHTS_DIR, corpus, tiny_models
from pytest_specdecode.tiny.train import MODELS, ModelSpec, TrainConfig, train, weights_sha256

ROOT = Path(__file__).resolve().parents[2]


def test_committed_weights_and_card_are_present() -> None:
    for name in MODELS:
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            assert (WEIGHTS_DIR / name / f).is_file(), f"{name}/{f}"
    assert (WEIGHTS_DIR.parent / "MODEL_CARD.md").is_file()
    for name in ("draft", "weak_draft"):
        config = json.loads((WEIGHTS_DIR / name / "config.json").read_text())
        assert config["num_hidden_layers"] == 1, name


def test_committed_weights_are_the_recorded_training_runs() -> None:
    """Each committed model is the file its training run wrote (hash in ``training.json``), and
    the weak draft's record is the training script's current configuration."""
    record = json.loads((WEIGHTS_DIR / "training.json").read_text())
    for index, name in enumerate(MODELS):
        assert weights_sha256(WEIGHTS_DIR / name) == record[name]["sha256"], name
        assert record[name]["seed"] == record["seed"] + index, name
    config = TrainConfig()
    for name in MODELS:
        assert {k: record[name][k] for k in asdict(config.draft)} == asdict(getattr(config, name))
    assert record["weak_draft"]["steps"] * 10 < record["draft"]["steps"]
    assert record["weak_draft"]["final_loss"] > 2 * record["draft"]["final_loss"]


def test_weak_draft_shares_the_target_tokenizer_and_is_smaller() -> None:
    target, weak = WEIGHTS_DIR / "target", WEIGHTS_DIR / "weak_draft"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        assert (weak / f).read_bytes() == (target / f).read_bytes(), f
    weak_config = json.loads((weak / "config.json").read_text())
    target_config = json.loads((target / "config.json").read_text())
    for key in ("vocab_size", "bos_token_id", "eos_token_id"):
        assert weak_config[key] == target_config[key], key
    assert weak_config["num_hidden_layers"] < target_config["num_hidden_layers"]
    assert (weak / "model.safetensors").stat().st_size < (
        target / "model.safetensors"
    ).stat().st_size
    spec = {"method": "draft_model", "model": str(weak), "num_speculative_tokens": 4}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a larger draft or an unchecked model would warn
        notes = check_compatibility(
            str(target), spec, {"max_model_len": 512}, "draft_model", "test_tiny"
        )
    assert notes == []


def _agreement(draft_dir: Path, prompts: list[str], tokens: int = 32) -> float:
    """Share of the target's greedy tokens that ``draft_dir`` predicts (teacher forced)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    load = transformers.AutoModelForCausalLM.from_pretrained
    target, draft = load(str(WEIGHTS_DIR / "target")), load(str(draft_dir))
    tok = transformers.AutoTokenizer.from_pretrained(str(WEIGHTS_DIR / "target"))
    agree = 0
    with torch.no_grad():
        for prompt in prompts:
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            for _ in range(tokens):
                ids.append(int(target(torch.tensor([ids])).logits[0, -1].argmax()))
            guess = draft(torch.tensor([ids])).logits[0, -tokens - 1 : -1].argmax(-1)
            agree += int((guess == torch.tensor(ids[-tokens:])).sum())
    return agree / (tokens * len(prompts))


def test_weak_draft_agrees_with_the_target_less_than_the_draft() -> None:
    """On held-out structured prompts the weak draft guesses fewer of the target's greedy
    tokens than the draft (0.57 against 0.85 here), but far more than chance."""
    prompts = corpus.prompts("structured", 8, seed=7)
    good = _agreement(WEIGHTS_DIR / "draft", prompts)
    weak = _agreement(WEIGHTS_DIR / "weak_draft", prompts)
    assert good > 0.75 and 0.3 < weak < good - 0.15, (good, weak)


def test_padding_keeps_torch_out_of_the_calling_process(tmp_path: Path) -> None:
    """The first ``tiny_models()`` pads the target in a child process: a pytest run that calls
    it (or whose in-process pytester run does) never imports torch or transformers."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("no transformers")
    code = (
        "import sys; from pytest_specdecode.tiny import tiny_models;"
        "m = tiny_models(cache_dir=sys.argv[1]);"
        "print(m.target.is_dir(), [n for n in ('torch', 'transformers') if n in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split("\n")[-2] == "True []", out.stdout + out.stderr


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
    assert set(paths) == {
        "target", "draft", "weak_draft", "target_unpadded", "eagle3_head", "mtp_target"
    }  # fmt: skip
    assert Path(paths["weak_draft"]) == WEIGHTS_DIR / "weak_draft"
    assert Path(paths["target"]).is_relative_to(tmp_path)


def test_cli_ini_points_the_plugin_at_the_tiny_models(pytester: pytest.Pytester) -> None:
    """``--ini`` writes a pytest.ini the plugin reads: the settings parse and name the folders."""
    from pytest_specdecode.settings import BY_NAME
    from pytest_specdecode.tiny import ENGINE_KWARGS, TinyModels
    from pytest_specdecode.tiny.__main__ import ini_text

    models = TinyModels(*(Path(f"/m/{n}") for n in ("t", "d", "w", "u", "e", "m")))
    pytester.makefile(".ini", pytest=ini_text(models))
    pytester.makepyfile(
        """
        def test_settings(pytestconfig):
            import json
            print("INI", json.dumps({k: pytestconfig.getini("specdecode_" + k)
                  for k in ("target", "speculative_config", "engine_kwargs")}))
        """
    )
    out = pytester.runpytest("-s", "-p", "no:cacheprovider")
    line = next(x for x in out.outlines if "INI {" in x)
    ini = json.loads(line.split("INI ", 1)[1])
    assert ini["target"] == "/m/t"
    config = BY_NAME["speculative_config"].parse(ini["speculative_config"], "ini")
    assert config == {"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 4}
    assert BY_NAME["engine_kwargs"].parse(ini["engine_kwargs"], "ini") == ENGINE_KWARGS


def test_cli_ini_says_the_file_is_this_machines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--ini > pytest.ini`` keeps stdout the file alone; stderr, and a comment in the file,
    say its paths are this machine's: a file to use locally, not to commit."""
    from pytest_specdecode.tiny import TinyModels
    from pytest_specdecode.tiny import __main__ as cli

    models = TinyModels(*(Path(f"/m/{n}") for n in ("t", "d", "w", "u", "e", "m")))
    monkeypatch.setattr(cli, "tiny_models", lambda: models)
    cli.main(["--ini"])
    out, err = capsys.readouterr()
    assert out == cli.ini_text(models) and out.startswith("# ")
    assert "this machine's folders and CPU-only" in out and "do not commit it" in out
    assert err == cli.ini_note(models)
    assert "for this machine only" in err and "do not commit it" in err
    assert "/m/t" in err and "/m/d" in err and '"enforce_eager": true' in err


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


def _small_config(seed: int) -> TrainConfig:
    spec = ModelSpec(
        layers=1, hidden_size=64, intermediate_size=64, steps=2, lr=5e-3,
        batch_tokens=256, short_seq_len=32, seq_len=32, long_seq_len=64,
    )  # fmt: skip
    return TrainConfig(seed=seed, documents=60, tokenizer_documents=60, weak_draft=spec)


def _retrain_weak_draft(out: Path, seed: int) -> dict[str, object]:
    shutil.copytree(WEIGHTS_DIR / "target", out / "target")
    return train(out, _small_config(seed), threads=1, only=["weak_draft"])


def test_weak_draft_training_is_reproducible(tmp_path: Path) -> None:
    """``--only weak_draft`` writes the same file from the same seed, on the target's
    tokenizer, and records it; another seed gives other weights."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    runs = [_retrain_weak_draft(tmp_path / name, seed) for name, seed in
            (("a", 0), ("b", 0), ("c", 1))]  # fmt: skip
    hashes = [weights_sha256(tmp_path / name / "weak_draft") for name in ("a", "b", "c")]
    assert hashes[0] == hashes[1] != hashes[2]
    recorded = json.loads((tmp_path / "a" / "training.json").read_text())["weak_draft"]
    assert recorded["sha256"] == hashes[0] and recorded["seed"] == 2 and recorded["steps"] == 2
    assert runs[0]["weak_draft"].items() <= recorded.items()
    target, weak = WEIGHTS_DIR / "target", tmp_path / "a" / "weak_draft"
    assert (weak / "tokenizer.json").read_bytes() == (target / "tokenizer.json").read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "target",
        "training.json",
        "weak_draft",
    ]


def test_only_refuses_unknown_models_a_missing_target_and_another_corpus(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="unknown model.*known: target, draft, weak_draft"):
        train(tmp_path, _small_config(0), only=["tiny"])
    with pytest.raises(FileNotFoundError, match="holds no model"):
        train(tmp_path / "empty", _small_config(0), only=["weak_draft"])
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    shutil.copytree(WEIGHTS_DIR / "target", tmp_path / "out" / "target")
    shutil.copy2(WEIGHTS_DIR / "training.json", tmp_path / "out" / "training.json")
    with pytest.raises(ValueError, match="corpus is"):
        train(tmp_path / "out", _small_config(0), threads=1, only=["weak_draft"])
    assert not (tmp_path / "out" / "weak_draft").exists()


def test_the_eagle3_head_drafts_the_target_s_tokens_at_every_position() -> None:
    """The committed head, drafting in torch as vLLM does (k = 3, greedy), has its drafts
    accepted at every position on held-out structured prompts (0.95, 0.90, 0.86 on 8 prompts
    of 64 tokens; vLLM reports the same counts)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from pytest_specdecode.tiny.eagle3 import simulate

    prompts = corpus.prompts("structured", 2, seed=1)
    result = simulate(WEIGHTS_DIR / "eagle3_head", WEIGHTS_DIR / "target", prompts, 3, 32)
    assert result["drafts"] > 0
    assert all(p > 0.5 for p in result["per_position"]), result
    assert result["per_position"] == sorted(result["per_position"], reverse=True)
