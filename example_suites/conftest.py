"""Example suites: "when is speculative decoding worth it?", one file per workload category.

Without ``--specdecode-target`` they run on the built-in tiny CPU models
(``pytest_specdecode.tiny``); with ``--specdecode-target`` and
``--specdecode-speculative-config`` the same suites measure your models. Gates default to values
that hold on the tiny models on a 2-core CPU; raise them for your models with
``--gate CATEGORY.NAME=VALUE`` (e.g. ``--gate structured.min_speedup=1.3``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_specdecode.tiny import ENGINE_KWARGS

#: Gates per category; measured on the tiny models on 2 CPU cores, set with margin.
DEFAULT_GATES: dict[str, dict[str, float]] = {
    "structured": {
        "min_speedup": 1.5,
        "guided_min_speedup": 0.5,
        "min_acceptance_rate": 0.45,
        "min_match_rate": 0.75,
    },
    "creative": {"min_acceptance_rate": 0.001, "max_acceptance_rate": 0.3},
    "summarization": {
        "min_speedup": 1.0,
        "min_acceptance_rate": 0.2,
        "ngram_min_speedup": 0.8,
        "ngram_min_acceptance_rate": 0.15,
    },
    "concurrency": {"min_speedup": 1.1, "min_acceptance_rate": 0.45},
    # min_long_to_short: the share of the short-prompt speedup a long prompt must keep at least
    "long_context": {"min_speedup": 1.1, "min_acceptance_rate": 0.45, "min_long_to_short": 0.8},
    "load": {"min_latency_gain": 1.2, "slo_ttft_ms": 2000.0, "slo_tpot_ms": 100.0},
    # tolerance: how close to the fastest k a smaller k must be to be scheduled;
    # check_tolerance: how close the schedule must come to the best fixed k when checked
    "k_schedule": {"tolerance": 0.05, "check_tolerance": 0.05},
    # the standard sets (test_standard_sets.py); min_category_spread: how far apart the
    # highest and lowest acceptance of MT-Bench's categories must be at least
    "mt-bench": {"min_acceptance_rate": 0.3, "min_category_spread": 0.04},
    "humaneval": {"min_acceptance_rate": 0.35},
    "gsm8k": {"min_acceptance_rate": 0.3},
}

#: Engines resident at once on the tiny models (the plugin's default is 2).
TINY_MAX_ENGINES = 3

#: Engine settings for the tiny models, with room for the long-context prompts.
TINY_ENGINE_KWARGS = {**ENGINE_KWARGS, "max_model_len": 2048}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gate",
        action="append",
        default=[],
        metavar="CATEGORY.NAME=VALUE",
        help="override an example-suite gate, e.g. structured.min_speedup=1.3 (repeatable)",
    )


def tiny_model_paths() -> dict[str, str]:
    """Paths of the built-in tiny models, built in a subprocess (no torch in this process)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest_specdecode.tiny"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise pytest.UsageError(f"could not prepare the built-in tiny models:\n{out.stderr}")
    pairs = (line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    return {name.strip(): path.strip() for name, path in pairs}


def pytest_configure(config: pytest.Config) -> None:
    """Default to the tiny models when no target is configured (runs before the plugin reads
    its settings)."""
    _parse_gates(config.getoption("--gate"))  # a bad --gate is a usage error before any engine
    if config.getoption("specdecode_target", None) or config.getini("specdecode_target"):
        return
    paths = tiny_model_paths()
    config.option.specdecode_target = paths["target"]
    if not (
        config.getoption("specdecode_speculative_config", None)
        or config.getini("specdecode_speculative_config")
    ):
        config.option.specdecode_speculative_config = json.dumps(
            {"method": "draft_model", "model": paths["draft"], "num_speculative_tokens": 4}
        )
    if not (
        config.getoption("specdecode_engine_kwargs", None)
        or config.getini("specdecode_engine_kwargs")
    ):
        config.option.specdecode_engine_kwargs = json.dumps(TINY_ENGINE_KWARGS)
    if not (config.getoption("specdecode_max_engines", None) or config.getini(
        "specdecode_max_engines"
    )):  # fmt: skip
        # one more proposer beside the pair (choose_draft's, ngram, each k of the schedule
        # sweep): with three tiny engines resident and the sweep last (below), no engine is
        # started twice (a few GiB of RAM)
        config.option.specdecode_max_engines = str(TINY_MAX_ENGINES)


#: Suites whose engines no other suite uses run last, so that they evict nobody's engine.
RUN_LAST = ("test_k_schedule.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the k-schedule sweep (three engines of its own) after the others: run in file
    order it would evict the n-gram engine that the summarization suite needs again."""
    items.sort(key=lambda item: item.path.name in RUN_LAST)  # stable: file order otherwise


def _parse_gates(values: list[str]) -> dict[str, dict[str, float]]:
    gates = {category: dict(g) for category, g in DEFAULT_GATES.items()}
    for value in values:
        try:
            key, number = value.split("=", 1)
            category, name = key.split(".", 1)
            parsed = float(number)
        except ValueError:
            raise pytest.UsageError(
                f"--gate {value!r}: expected CATEGORY.NAME=VALUE, e.g. structured.min_speedup=1.3"
            ) from None
        if category not in gates:
            raise pytest.UsageError(
                f"--gate {value!r}: unknown category {category!r}; "
                f"known: {', '.join(sorted(gates))}"
            )
        if name not in gates[category]:
            raise pytest.UsageError(
                f"--gate {value!r}: {category} has no gate {name!r}; "
                f"its gates: {', '.join(sorted(gates[category]))}"
            )
        gates[category][name] = parsed
    return gates


@pytest.fixture
def gates(request: pytest.FixtureRequest) -> dict[str, float]:
    """The gates for this test's category (defaults, then ``--gate`` overrides)."""
    marker = request.node.get_closest_marker("specdecode")
    category = marker.args[0] if marker and marker.args else marker.kwargs["category"]
    return _parse_gates(request.config.getoption("--gate")).get(category, {})
