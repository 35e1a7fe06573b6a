"""A simulated engine backend, for plugin tests that need no vLLM.

:class:`FakeSource` implements :class:`~pytest_specdecode.engines.protocol.EngineSource` and
its engines :class:`~pytest_specdecode.engines.protocol.EngineBackend`: the measurement code runs
unchanged on them.
Baseline rounds take about 1 s, speculative ones 1 / ``speedup`` s, each with log-normal noise;
every round carries a step profile (:func:`step_profile`: a draft model's proposal costs a
tenth of a target step per draft token); speculative rounds report each prompt's acceptance
(10 verify steps of k draft tokens). Load rounds come from a
deterministic model of a batching engine (:meth:`FakeEngine.load_round`). Tests select it
through the ``pytest_specdecode_engine_source`` hook (:class:`FakePlugin`, or a conftest).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.dynamic_sd import SCHEDULE_KEY, k_at
from pytest_specdecode.engines.hardware import Device
from pytest_specdecode.engines.methods import has_model
from pytest_specdecode.engines.protocol import (
    Counters,
    EngineBackend,
    EngineSource,
    LoadRound,
    PhaseTimes,
    Placement,
    PlainCalls,
    RequestFigures,
    Round,
    StepProfile,
    Timeline,
    check_arrivals,
)

#: Draft tokens per draft in the fake's counters (100 drafts of 400 tokens a round).
DRAFTED = 4
#: Share of a simulated round spent in prefill steps.
PREFILL_SHARE = 0.1


def step_profile(
    source: FakeSource,
    config: EngineConfig,
    prompts: int,
    sampling: Mapping[str, Any],
    concurrency: int | None,
    elapsed: float,
) -> StepProfile | None:
    """A plausible profile of a simulated round of ``elapsed`` seconds: one prefill step per
    batch (:data:`PREFILL_SHARE` of the round), then decode steps: ``max_tokens - 1`` per batch
    on the baseline, that divided by the acceptance length ``1 + 4 * acceptance`` on the
    speculative side. A baseline decode step is 4% preparing inputs, 88% forward pass, 4%
    sampling and 4% the rest; a speculative one spends ``source.draft_cost`` (draft model:
    0.1, a proposer without a model: 0.005) nominal baseline decode steps per draft token on
    its draft, 4% preparing, 4% sampling and rejection, 2% the rest, and the remainder, which
    grows as the speedup falls with k and batch, on the verification pass. None when
    ``source.profiles`` is off (a served-like engine)."""
    if not source.profiles:
        return None
    batch = min(concurrency or prompts, prompts)
    batches = -(-prompts // batch)
    decoded = batches * max(0, int(sampling.get("max_tokens", 4)) - 1)
    prefill_s, decode_s = PREFILL_SHARE * elapsed, (1 - PREFILL_SHARE) * elapsed
    prefill = PhaseTimes(batches, prefill_s, 0.05 * prefill_s, 0.9 * prefill_s, 0.03 * prefill_s)
    if config.speculative_json is None:
        decode = PhaseTimes(decoded, decode_s, 0.04 * decode_s, 0.88 * decode_s, 0.04 * decode_s)
        return StepProfile(prefill, decode)
    length = 1 + DRAFTED * min(1.0, max(0.0, source.acceptance))
    steps = max(batches, round(decoded / length)) if decoded else 0
    nominal_base_step = (1 - PREFILL_SHARE) / decoded if decoded else 0.0
    cost = source.draft_cost if has_model(config.method) else 0.005
    draft = min(0.6 * decode_s, steps * cost * DRAFTED * nominal_base_step)
    forward = max(0.0, 0.9 * decode_s - draft)
    decode = PhaseTimes(steps, decode_s, 0.04 * decode_s, forward, 0.04 * decode_s, draft)
    return StepProfile(prefill, decode)


def scheduled_k(config: EngineConfig, batch_size: int) -> int:
    """The k a speculative engine runs at ``batch_size``: its ``num_speculative_tokens``, or
    what its ``num_speculative_tokens_per_batch_size`` schedule gives there (capped at it), as
    vLLM's scheduler does."""
    k = config.num_speculative_tokens
    schedule = (config.speculative_config or {}).get(SCHEDULE_KEY)
    if not schedule:
        return k
    return min(k, k_at(sorted((int(s), int(e), int(v)) for s, e, v in schedule), batch_size))


class SimulatedEngine(PlainCalls):
    """What every simulated engine shares (this fake's and ``benchmarks/decisions.py``'s): no
    process, a placement and versions named ``kind``, the counters its rounds add up, random
    samples from its source's ``rng``. Subclasses give ``generate_round``."""

    def __init__(
        self,
        config: EngineConfig,
        source: SimulatedSource,
        kind: str = "simulated",
        vllm_version: str = "simulated",
    ) -> None:
        self.config = config
        self.source = source
        self.placement = Placement({}, kind, {})
        self.info: dict[str, Any] = {"vllm_version": vllm_version, "torch_version": kind}
        self.timeout = 900.0
        self._counters = Counters()

    @property
    def speculative(self) -> bool:
        """Whether this engine speculates (its config has a speculative part)."""
        return self.config.speculative_json is not None

    @property
    def alive(self) -> bool:
        return True

    @property
    def pid(self) -> int | None:
        return None

    def sample(self, prompts: Sequence[Any], sampling: Mapping[str, Any]) -> list[list[list[int]]]:
        n, tokens = int(sampling.get("n", 1)), int(sampling["max_tokens"])
        rng = self.source.rng
        return [[[rng.randrange(4) for _ in range(tokens)] for _ in range(n)] for _ in prompts]

    def counters(self) -> Counters:
        return self._counters

    def close(self) -> None:
        pass


class SimulatedSource:
    """What every simulated engine source shares: one engine per configuration, started on
    first use (``start`` makes it) and resident until :meth:`close`; a random generator
    ``rng`` and a clock ``slots`` (rounds generated so far, any engine) for its engines."""

    max_engines = 2
    quiet_seconds = 0.0  # simulated rounds leave nothing behind

    def __init__(self, device: Device, rng: random.Random) -> None:
        self.device = device
        self.rng = rng
        self.slots = 0
        self.starts = self.restarts = 0
        self.start_seconds = self.stop_seconds = 0.0
        self.sequential_reasons: list[str] = []
        self._engines: dict[str, SimulatedEngine] = {}

    def start(self, config: EngineConfig) -> SimulatedEngine:
        raise NotImplementedError

    def acquire(
        self,
        config: EngineConfig,
        *,
        keep: Sequence[EngineConfig] = (),
        timeout: float | None = None,
    ) -> EngineBackend:
        engine = self._engines.get(config.key)
        if engine is None:
            engine = self._engines[config.key] = self.start(config)
            self.starts += 1
        if timeout:
            engine.timeout = timeout
        return engine

    def is_running(self, config: EngineConfig) -> bool:
        return config.key in self._engines

    def plan(self, upcoming: Sequence[Collection[str]]) -> None:
        pass

    def memory_gib(self, engine: EngineBackend) -> float | None:
        return None

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()


class FakeEngine(SimulatedEngine):
    """One simulated engine: a baseline or a speculative engine (``draft``: a draft model
    run as a target, ten times faster per token)."""

    source: FakeSource

    def __init__(self, config: EngineConfig, source: FakeSource, draft: bool) -> None:
        super().__init__(config, source, "fake", source.vllm_version)
        self.draft = draft
        self._cached: list[tuple[Any, ...]] = []  # prompts seen (source.prefix_cache)

    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Round:
        source = self.source
        source.rounds += self.config.speculative_json is not None
        source.sent.append(("speculative" if self.config.speculative_json else "baseline",
                            list(prompts)))  # fmt: skip
        tpot = 0.0001 if self.draft else 0.001
        request = RequestFigures((1, 2, 3, 4), "abcd", 0.01, tpot)
        elapsed = math.exp(source.rng.gauss(0, source.noise) + source.drift * source.slots)
        source.slots += 1
        requests = (request,) * len(prompts)
        if self.config.speculative_json is not None:
            k = scheduled_k(self.config, concurrency or len(prompts))
            speedup = source.speedup
            if source.speedup_fn is not None:
                speedup = source.speedup_fn(k, concurrency)
            elapsed /= speedup
            accepted = round(400 * min(1.0, source.acceptance + source.rng.gauss(0, 0.01)))
            self._counters = self._counters + Counters(100, 400, accepted, (accepted // 4,) * 4)
            if source.per_request:
                requests = tuple(self._with_acceptance(request, i, k) for i in range(len(prompts)))
        self._look_up(prompts)
        profile = step_profile(source, self.config, len(prompts), sampling, concurrency, elapsed)
        note = "" if profile is not None else source.profile_note
        return Round(elapsed, requests, profile=profile, profile_note=note)

    def _look_up(self, prompts: Sequence[Any]) -> None:
        """Count each prompt's prefix-cache lookup as the source's ``cache`` says, or with
        ``prefix_cache`` on, look the prompts up in a cache of the prompts this engine saw."""
        if self.source.prefix_cache and prompts:
            self._simulate_cache(prompts)
            return
        cache = self.source.cache
        if cache is None:
            return
        side = "speculative" if self.config.speculative_json else "baseline"
        for prompt in prompts:
            queries, hits = cache(side, prompt) if callable(cache) else cache[side]
            looked = Counters(prefix_cache_queries=queries, prefix_cache_hits=hits)
            self._counters = self._counters + looked

    def _simulate_cache(self, prompts: Sequence[Any]) -> None:
        """A prefix cache of whole prompts, one token (a token id, or a character of a text) a
        block: each prompt looks up its tokens and finds its longest common prefix with a
        prompt seen before, all but its last token at most (as vLLM recomputes the last)."""
        queries = hits = 0
        for prompt in prompts:
            tokens = tuple(prompt["prompt_token_ids"] if isinstance(prompt, dict) else prompt)
            found = 0
            for seen in self._cached:
                common = next(
                    (i for i, (a, b) in enumerate(zip(tokens, seen, strict=False)) if a != b),
                    min(len(tokens), len(seen)),
                )
                found = max(found, common)
            queries += len(tokens)
            hits += min(found, len(tokens) - 1)
        self._cached += [
            tuple(p["prompt_token_ids"] if isinstance(p, dict) else p) for p in prompts
        ]
        self._counters = self._counters + Counters(
            prefix_cache_queries=queries, prefix_cache_hits=hits
        )

    def _with_acceptance(self, request: RequestFigures, i: int, k: int) -> RequestFigures:
        """``request`` with 10 verify steps of ``k`` draft tokens each, accepting
        ``prompt_acceptance(i)`` (default: the source's acceptance) of them."""
        fn = self.source.prompt_acceptance
        rate = fn(i) if fn is not None else self.source.acceptance
        total = round(10 * k * min(1.0, max(0.0, rate)))
        steps = tuple(total // 10 + (j < total % 10) for j in range(10))
        return replace(
            request, spec_steps=10, accepted_tokens=total, draft_tokens=10 * k,
            per_step_accepted=steps, per_step_drafted=(k,) * 10,
        )  # fmt: skip

    def load_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], arrivals: Sequence[float]
    ) -> LoadRound:
        """A simulated open-loop round, without sleeping: a batching engine steps while any
        request is in flight; a request arriving during a step joins at the step's end.

        A baseline step of ``b`` requests takes ``load_step + load_per_token * b`` seconds and
        gives each request one token. A speculative step (``k`` draft tokens) verifies
        ``k + 1`` tokens per request and runs the draft, so it takes
        ``load_step * (1 + load_draft) + load_per_token * (k + 1) * b`` seconds, and gives
        each request ``1 + k * acceptance`` tokens on average (whole tokens; the fraction
        carries over). With the defaults (10 ms, 4 ms, 0.2; k = 4, acceptance 0.8) and 32
        tokens a request, the p50 TPOT gain (baseline / speculative) is 1.9 for 12 requests
        at 0.5 req/s (one in flight at a time), 1.4 at 8 req/s, 0.99 for 16 at once and 0.94
        for 32 at once. A draft model run as a target steps at a tenth of the target's costs.
        ``max_tokens`` tokens per request; the speculative engine's counters count its
        steps."""
        check_arrivals(arrivals, len(prompts))
        self._look_up(prompts)
        source, k = self.source, self.config.num_speculative_tokens
        speculative = self.config.speculative_json is not None and k > 0
        scale = 0.1 if self.draft else 1.0
        per_step = 1.0 + k * min(1.0, max(0.0, source.acceptance)) if speculative else 1.0
        limit = int(sampling["max_tokens"])
        timelines = [Timeline(float(t)) for t in arrivals]
        credit = [0.0] * len(timelines)
        due, active, now = 0, list[int](), 0.0
        while due < len(timelines) or active:
            while due < len(timelines) and timelines[due].arrival <= now:
                timelines[due].sent = now
                active.append(due)
                due += 1
            if not active:
                now = timelines[due].arrival
                continue
            b = len(active)
            if speculative:
                cost = source.load_step * (1 + source.load_draft)
                now += scale * (cost + source.load_per_token * (k + 1) * b)
            else:
                now += scale * (source.load_step + source.load_per_token * b)
            for i in list(active):
                credit[i] += per_step
                tokens = min(int(credit[i]), limit - timelines[i].tokens)
                credit[i] -= int(credit[i])
                timelines[i].chunk(now, tokens)
                if speculative:
                    accepted = tokens - 1
                    step = Counters(1, k, accepted, (1,) * accepted + (0,) * (k - accepted))
                    self._counters = self._counters + step
                if timelines[i].tokens >= limit:
                    timelines[i].ended = now
                    active.remove(i)
        return LoadRound(
            max((q.end for q in timelines), default=0.0), tuple(q.timed() for q in timelines)
        )

    def close(self) -> None:
        self.source.closed += 1


class FakeSource(SimulatedSource):
    """Simulated engines with a set speedup, acceptance and per-round noise."""

    def __init__(self) -> None:
        super().__init__(Device("cpu", "fake CPU"), random.Random(0))
        self.speedup = 2.0
        self.acceptance = 0.8
        self.noise = 0.02  # sd of a round's log time
        self.drift = 0.0  # added to a round's log time per round generated before it
        self.speedup_fn: Any = None  # (k, concurrency) -> speedup, for sweeps
        self.per_request = True  # speculative rounds report acceptance per request
        self.load_step = 0.010  # load rounds: a step's fixed cost, seconds
        self.load_per_token = 0.004  # load rounds: per token a step processes, seconds
        self.load_draft = 0.2  # load rounds: the draft's share on top of a step's fixed cost
        self.prompt_acceptance: Any = None  # prompt index -> its acceptance (default: all equal)
        self.rounds = 0  # speculative rounds generated, over all runs
        self.draft_cost = 0.1  # a draft model's time per draft token / a target decode step
        self.profiles = True  # rounds carry a step profile (off: like a served engine)
        #: with profiles off, why (as a local engine whose runner lacks a point says)
        self.profile_note = ""
        self.closed = 0
        self.plans: list[list[frozenset[str]]] = []  # every plan() the plugin gave
        self.events: list[tuple[str, str]] = []  # FakeWorker starts and stops, in order
        self.fail_start: set[str] = set()  # targets whose FakeWorker fails to start
        self.vllm_version = "fake"  # the engines' vLLM version, as the environment records it
        #: per side ("baseline", "speculative"): prompt tokens each request looks up in the
        #: prefix cache and finds there, or a function of the side and the prompt that gives
        #: them (None: no prefix-cache counters, as before vLLM's)
        self.cache: dict[str, tuple[int, int]] | Callable[[str, Any], tuple[int, int]] | None
        self.cache = None
        #: each engine simulates a prefix cache of the prompts it saw (``_simulate_cache``)
        self.prefix_cache = False
        self.sent: list[tuple[str, list[Any]]] = []  # (side, prompts) of every round, in order
        self._drafts: set[str] = set()

    def start(self, config: EngineConfig) -> SimulatedEngine:
        """A baseline engine of a target some speculative engine drafted with is a draft."""
        if config.draft:
            self._drafts.add(config.draft)
        draft = config.speculative_json is None and config.target in self._drafts
        return FakeEngine(config, self, draft)

    def plan(self, upcoming: Sequence[Collection[str]]) -> None:
        self.plans.append([frozenset(need) for need in upcoming])


class FakePlugin:
    """A pytest plugin object that puts a session's specdecode tests on ``source``."""

    def __init__(self, source: FakeSource) -> None:
        self.source = source

    def pytest_specdecode_engine_source(self, config: Any, settings: Any) -> EngineSource:
        return self.source


def use_fake(pytester: Any, monkeypatch: Any, source: FakeSource | None = None) -> FakeSource:
    """Every in-process pytester run of the calling test gets ``source`` as its engines."""
    import functools

    source = source or FakeSource()
    for name in ("runpytest_inprocess", "inline_run"):
        run = getattr(pytester, name)
        monkeypatch.setattr(pytester, name, functools.partial(run, plugins=[FakePlugin(source)]))
    return source


#: conftest.py text for subprocess runs: the engines are a FakeSource whose speedup comes
#: from $FAKE_SPEEDUP (default 2.0).
CONFTEST = """
import os, sys
sys.path.insert(0, {repo!r})
from tests.fakes import FakeSource

source = FakeSource()
source.speedup = float(os.environ.get("FAKE_SPEEDUP", "2.0"))

def pytest_specdecode_engine_source(config, settings):
    return source
"""


class FakeWorker(FakeEngine):
    """Stands in for :class:`~pytest_specdecode.engines.local.Engine` inside a real
    :class:`~pytest_specdecode.engines.pool.EnginePool` (its ``engine_factory``): no process
    starts; ``world.events`` records ``("spawn" | "ready" | "close", describe())`` in order."""

    def __init__(
        self,
        config: EngineConfig,
        placement: Placement,
        *,
        timeout: float,
        log_dir: str,
        on_start: Any = None,
        wait: bool = True,
        world: FakeSource,
    ) -> None:
        super().__init__(config, world, False)
        self.placement = placement
        self.timeout = timeout
        self.failed = False
        self.log_path = ""
        self.start_seconds = 0.0
        self._alive = True
        world.starts += 1
        world.events.append(("spawn", config.describe()))
        if on_start is not None:
            on_start(self)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float | None = None) -> None:
        from pytest_specdecode.errors import EngineStartError

        if self.config.target in self.source.fail_start:
            self.failed, self._alive = True, False
            raise EngineStartError(f"{self.config.describe()} failed to start: (fake)")
        self.source.events.append(("ready", self.config.describe()))

    @property
    def alive(self) -> bool:
        return self._alive

    def begin_close(self) -> None:
        self.source.events.append(("close", self.config.describe()))
        self._alive = False

    def close(self) -> None:
        if self._alive:
            self.begin_close()
        super().close()

    def kill(self) -> None:
        self._alive = False


def fake_pool(
    world: FakeSource, max_engines: int = 2, device: Device | None = None, **kwargs: Any
) -> Any:
    """A real EnginePool whose engines are :class:`FakeWorker`s simulated by ``world``."""
    import functools

    from pytest_specdecode.engines.pool import EnginePool

    return EnginePool(
        max_engines,
        device=device or Device("cpu", "fake CPU"),
        engine_factory=functools.partial(FakeWorker, world=world),
        **kwargs,
    )


class Collected:
    """A Bench sink that keeps every product it is handed, in order."""

    def __init__(self) -> None:
        self.products: list[Any] = []

    def take(self, product: Any, bench: Any) -> None:
        self.products.append(product)
