"""Multi-turn conversations: the workloads (MT-Bench's two turns, the user's files), the checks
made before any engine starts, and ``Bench.conversation`` on the simulated backend, whose
engines keep a prefix cache of the prompts they saw (real engines: ``tests/e2e/test_e2e.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_specdecode import Bench, ConfigError, prompts
from pytest_specdecode.measure.conversation import FIRST_SEND_NOTE, check_conversations
from pytest_specdecode.tiny import WEIGHTS_DIR
from pytest_specdecode.tiny.build import CHAT_TEMPLATE

from ..fakes import Collected, FakeSource

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
TARGET = str(WEIGHTS_DIR / "target")  # the tiny tokenizer, with its chat template


def _rates(note: str) -> tuple[float, float]:
    """(baseline, speculative) from ``0.62 baseline, 0.61 speculative``."""
    base, spec = note.split(", ")
    return float(base.split()[0]), float(spec.split()[0])


# -- workloads ---------------------------------------------------------------------------------
def test_mt_bench_conversations_are_both_turns_drawn_as_standard_draws_them() -> None:
    convs = prompts.standard_conversations("mt-bench", n=5, seed=3)
    assert len(convs) == 5 and all(len(c) == 2 for c in convs)
    assert [c[0] for c in convs] == prompts.standard("mt-bench", n=5, seed=3)
    assert [c[1] for c in convs] == prompts.standard("mt-bench", n=5, seed=3, turn=2)
    coding = prompts.standard_conversations("mt-bench", category="coding")
    assert len(coding) == 10
    with pytest.raises(ConfigError, match="one turn, no conversation; .* mt-bench"):
        prompts.standard_conversations("gsm8k")
    with pytest.raises(ConfigError, match="unknown category 'poetry'"):
        prompts.standard_conversations("mt-bench", category="poetry")
    with pytest.raises(ConfigError, match="n must be between 1 and 10"):
        prompts.standard_conversations("mt-bench", category="coding", n=11)


def test_conversation_files_give_every_human_turn(tmp_path: Path) -> None:
    share = tmp_path / "chats.json"
    share.write_text(
        json.dumps([
            {"conversations": [
                {"from": "human", "value": "a"}, {"from": "gpt", "value": "recorded"},
                {"from": "human", "value": "b"},
            ]},
            {"conversations": [{"from": "gpt", "value": "no human turn: skipped"}]},
            {"conversations": [{"from": "user", "value": "c"}]},
        ])
    )  # fmt: skip
    assert prompts.conversations_from_file(share) == [("a", "b"), ("c",)]
    assert prompts.from_file(share) == ["a", "c"]  # run()'s prompts: the first turns
    lines = tmp_path / "chats.jsonl"
    lines.write_text('{"turns": ["x", "y"]}\n\n{"turns": ["z"]}\n')
    assert prompts.conversations_from_file(lines) == [("x", "y"), ("z",)]
    lines.write_text('{"turns": ["x", ""]}\n')
    with pytest.raises(ConfigError, match=r"chats.jsonl, line 1: turn 2 of \"turns\" must be"):
        prompts.conversations_from_file(lines)
    lines.write_text('{"prompt": "x"}\n')
    with pytest.raises(ConfigError, match=r'line 1: expected \{"turns": \['):
        prompts.conversations_from_file(lines)
    with pytest.raises(ConfigError, match='expected format="sharegpt"'):
        prompts.conversations_from_file(tmp_path / "chats.txt")


# -- checks --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("conversations", "turns", "message"),
    [
        ([], None, "the list of conversations is empty"),
        ("hi", None, "expected a list of conversations"),
        (["hi"], None, r"conversation 0 is a single text; .* \[\['hi'\]\]"),
        ([[]], None, "conversation 0 must be a non-empty list"),
        ([["a", ""]], None, "conversation 0, turn 2 must be a non-empty text"),
        ([["a", "b"], ["c"]], None, r"have 1, 2 turns; pass turns= \(at most 1"),
        ([["a", "b"], ["c"]], 2, r"turns=2\): conversation 1 has 1 turn\(s\); lower turns"),
        ([["a"]], 0, "expected a positive integer"),
    ],
)
def test_bad_conversations_are_named_with_the_fix(
    conversations: object, turns: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        check_conversations(conversations, turns)


def test_uneven_conversations_run_the_turns_asked_for() -> None:
    assert check_conversations([["a", "b"], ("c", "d", "e")], 2) == (
        [("a", "b"), ("c", "d", "e")],
        2,
    )


def test_bad_calls_are_refused_before_any_engine_starts(tmp_path: Path) -> None:
    source = FakeSource()
    bench = Bench(TARGET, NGRAM, source=source, progress=None)
    with pytest.raises(ConfigError, match=r"conversation\(warmup=...\): each turn is sent once"):
        bench.conversation([["a"]], max_tokens=4, warmup=2)
    with pytest.raises(ConfigError, match="max_tokens"):
        bench.conversation([["a"]], max_tokens=0)
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(WEIGHTS_DIR / "target" / name, bare / name)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="has no chat template"):
        bench.conversation([["a"]], max_tokens=4, tokenizer=bare)
    served = Bench(
        None, None, baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:10"
    )
    with pytest.raises(ConfigError, match="Pass tokenizer="):
        served.conversation([["a"]], max_tokens=4)
    assert source.sent == [] and source.starts == 0


def test_the_tiny_models_carry_the_chat_template() -> None:
    for name in ("target", "draft", "weak_draft"):
        config = json.loads((WEIGHTS_DIR / name / "tokenizer_config.json").read_text())
        assert config["chat_template"] == CHAT_TEMPLATE, name
    text = prompts.chat(TARGET, [[{"role": "user", "content": "hi"}]])
    assert text == ["user: hi\nassistant:"]


# -- Bench.conversation on the simulated backend --------------------------------------------
def test_each_turn_carries_the_baseline_answers_on_both_sides() -> None:
    source, seen = FakeSource(), Collected()
    source.prefix_cache = True
    bench = Bench(TARGET, NGRAM, source=source, progress=None, sink=seen, trials=3)
    convs = [("what is a word", "and another"), ("say hot", "say cold")]
    results = bench.conversation(convs, max_tokens=4, system="be brief")
    assert [r.label for r in results] == ["turn 1", "turn 2"]
    assert seen.products == results and bench.results == results
    # turn 2's prompts: the template over the first message, the baseline's answer, the second
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TARGET)
    turn2 = [p for side, p in source.sent if side == "baseline"][-1]
    assert [p for side, p in source.sent if side == "speculative"][-1] == turn2  # same history
    answer = results[0].baseline.texts[0]
    assert tokenizer.decode(turn2[0]["prompt_token_ids"]) == (
        f"system: be brief\nuser: what is a word\nassistant: {answer}\nuser: and another\n"
        "assistant:"
    )
    # each turn sent once before its rounds (the first send), then 3 measured rounds
    assert len(source.sent) == 2 * (1 + 3) * 2
    first = [_rates(r.notes[FIRST_SEND_NOTE]) for r in results]
    assert first[0] == (0.0, 0.0)  # nothing cached before turn 1
    assert first[1][0] > 0.5 and first[1][0] == first[1][1]  # turn 1's prompt, cached
    for r in results:  # measured rounds resend what the first send cached
        for side in (r.baseline, r.speculative):
            assert side.prefix_cache_hit_rate is not None and side.prefix_cache_hit_rate > 0.9
    assert results[1].num_prompts == 2 and results[1].max_tokens == 4


def test_labels_and_a_second_conversation() -> None:
    bench = Bench(TARGET, NGRAM, source=FakeSource(), progress=None, trials=3)
    bench.conversation([["a", "b", "c"]], max_tokens=4, turns=2, label="mt")
    assert [r.label for r in bench.results] == ["mt turn 1", "mt turn 2"]
    with pytest.raises(ConfigError, match=r"earlier conversation\(label='mt'\) holds"):
        bench.conversation([["a"]], max_tokens=4, label="mt")
    bench.conversation([["a"]], max_tokens=4)
    assert bench.results[-1].label == "turn 1"


def test_a_pool_of_one_warms_each_turn_up_as_run_does_and_notes_no_first_send() -> None:
    source = FakeSource()
    source.max_engines = 1
    bench = Bench(TARGET, NGRAM, source=source, progress=None, trials=3)
    results = bench.conversation([["a", "b"]], max_tokens=4)
    assert [r.mode for r in results] == ["sequential"] * 2
    assert all(FIRST_SEND_NOTE not in r.notes for r in results)
