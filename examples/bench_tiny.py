"""Measure speculative decoding without pytest, on the built-in tiny CPU models."""

from pytest_specdecode import Bench
from pytest_specdecode.tiny import ENGINE_KWARGS, tiny_models
from pytest_specdecode.tiny.corpus import prompts

models = tiny_models()  # a trained target and a one-layer draft; no download
draft = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}

with Bench(str(models.target), draft, ENGINE_KWARGS, trials=5) as bench:  # starts nothing yet
    result = bench.run(prompts("structured", 4, seed=1), max_tokens=64)
# Leaving the block shut the engines down; the result is plain, frozen data.

r = result
low, high = r.speedup_ci
print(f"speedup {r.speedup:.2f}x (95% CI {low:.2f}-{high:.2f}x) over {r.trials} rounds")
print(f"acceptance rate {r.acceptance_rate:.2f}, {r.mean_acceptance_length:.2f} tokens/step")
print(f"alpha {r.alpha:.2f}, cost ratio {r.cost_ratio:.3f}, predicted {r.predicted_speedup:.2f}x")
print(f"efficiency {r.efficiency:.2f}, +{r.extra_memory_gib:.2f} GiB, match {r.match_rate:.0%}")
print(f"verdict: {r.verdict} ({'; '.join(r.verdict_reasons)})")
