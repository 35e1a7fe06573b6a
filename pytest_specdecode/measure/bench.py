"""``Bench``: the whole measurement pipeline, usable without pytest.

::

    with Bench(target, speculative_config, engine_kwargs) as bench:   # starts nothing yet
        result = bench.run(prompts, max_tokens=64)

The ``specdecode`` fixture is a thin adapter over a ``Bench`` per test.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from ..engines.config import EngineConfig, check_on_device, engine_pair, lossy
from ..engines.dynamic_sd import SCHEDULE_KEY
from ..engines.methods import draft_model, has_model
from ..engines.protocol import Counters, EngineBackend, EngineSource, Sampling
from ..errors import ConfigError
from ..settings import BY_NAME, GlobalSettings, check_served_pair, parse_keywords
from .cache import cache_note, cache_warning
from .choice import Ranking, candidate_configs
from .detectable import SavePlan
from .equivalence import (
    DEFAULT_ALPHA,
    DEFAULT_SAMPLES,
    DEFAULT_TOKENS,
    DistributionCheck,
    compare_distributions,
)
from .figures import build_result, proposer, with_notes, with_theory, with_verdict
from .inputs import (
    check_axes,
    check_lengths,
    check_run_args,
    check_sampling_temperature,
    cycled,
    label_prefix,
    structured_outputs,
    validate_prompts,
)
from .kschedule import (
    KSchedule,
    ScheduleCheck,
    check_concurrencies,
    check_plan,
    check_row,
    check_tolerance,
)
from .load import (
    DEFAULT_ROUNDS,
    LoadResult,
    build_point,
    check_load_args,
    rate_text,
    round_schedules,
)
from .load_rounds import run_load
from .paired import PairedRounds, adaptive_stop, run_paired
from .phases import cost_ratio
from .result import Result
from .sequential import Reference, decide
from .sweep import Sweep
from .timing import TimeSpent

#: Settings a Bench takes, by the plugin option's name (same parsing and validation).
BENCH_SETTINGS = (
    "trials",
    "max_trials",
    "precision",
    "max_engines",
    "engine_mode",
    "timeout",
    "cost_ratio",
    "baseline_url",
    "speculative_url",
    "api_key_env",
)

Progress = Callable[[str], None]

#: Everything a Bench makes: run results (those of sweeps, schedule checks and draft choices
#: too), loads, sweeps, schedule checks, draft rankings and distribution checks.
Product = Result | LoadResult | Sweep | ScheduleCheck | Ranking | DistributionCheck


class Sink(Protocol):
    """Where a Bench hands each product as it is made (a
    :class:`~pytest_specdecode.run.record.RunRecord`, which reports, saves and compares
    them): ``bench`` is the Bench that made it (its engine facts and time spent). A sink that
    takes the products of several Benches may also have ``held(name, call) -> set[str]``: the
    labels of the results (``call="load"``: loads) it holds under that name, which a Bench of
    that name then refuses as it refuses its own (two workloads under one key)."""

    def take(self, product: Product, bench: Bench) -> None: ...


def _stderr(message: str) -> None:
    print(f"[specdecode] {message}", file=sys.stderr, flush=True)


def bench_settings(values: Mapping[str, Any], call: str = "Bench") -> GlobalSettings:
    """Parse keyword settings with the plugin options' parsers; errors name the keyword."""
    settings = parse_keywords(values, call, BENCH_SETTINGS)
    check_served_pair(settings, f"{call}: baseline_url", "speculative_url")
    return settings


def make_source(settings: GlobalSettings, progress: Progress) -> EngineSource:
    """The engines a setting chooses: two running servers, or local vLLM workers."""
    if settings.served:
        from ..engines.served import ServedPool

        baseline, speculative = settings.baseline_url, settings.speculative_url
        assert baseline is not None and speculative is not None  # check_served_pair
        return ServedPool(baseline, speculative, settings.api_key_env, timeout=settings.timeout)
    from ..engines.pool import EnginePool

    return EnginePool(
        settings.max_engines,
        timeout=settings.timeout,
        progress=progress,
        mode=settings.engine_mode,
    )


class _Shared:
    """The process's local engine pool, shared by every ``Bench`` on local engines that brings
    none: closed when the last open one closes, and at interpreter exit."""

    def __init__(self) -> None:
        self.source: EngineSource | None = None
        self.users = 0
        atexit.register(self.close)

    def take(self, settings: GlobalSettings, progress: Progress) -> EngineSource:
        if self.source is None:
            self.source = make_source(settings, progress)
        self.users += 1
        return self.source

    def give_back(self) -> None:
        self.users -= 1
        if self.users <= 0:
            self.close()

    def close(self) -> None:
        source, self.source, self.users = self.source, None, 0
        if source is not None:
            source.close()


_shared = _Shared()


@dataclass(frozen=True)
class _Prepared:
    """A run's inputs, checked (:meth:`Bench._prepare`)."""

    prompts: list[Any]
    sampling: Sampling
    label: str
    concurrency: int | None
    #: what the call's own checks gave
    checked: Any = None


class Bench:
    """Measure speculative decoding on one target: ``run``, ``sweep``, ``choose_draft``,
    ``sample_equivalence``.

    Nothing starts until the first call. Settings take the plugin options' names
    (:data:`BENCH_SETTINGS`: ``trials``, ``max_engines``, ``timeout``, ``cost_ratio``,
    ``baseline_url`` and ``speculative_url`` for served engines, ...). Local engines are shared
    by every ``Bench`` of the process; leaving the ``with`` block of the last one (or the
    interpreter) shuts them down. ``source`` brings engines of one's own (the plugin's pool,
    a test fake); ``gates`` (the marker's thresholds) are what adaptive trials decide against;
    ``reference`` gives a label's stored speedup and its relative tolerance (the run then
    goes on until the regression rule decides, at most the rounds it plans); ``plan`` sizes a
    saving run by its noise (:class:`~.detectable.SavePlan`); ``sink`` (a :class:`Sink`, e.g. a
    :class:`~pytest_specdecode.run.record.RunRecord`) takes every product as it is made.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | None = None,
        speculative_config: Mapping[str, Any] | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        *,
        name: str = "bench",
        category: str = "bench",
        source: EngineSource | None = None,
        gates: Mapping[str, float] | None = None,
        reference: Callable[[str], tuple[Reference, float] | None] | None = None,
        plan: SavePlan | None = None,
        sink: Sink | None = None,
        progress: Progress | None = _stderr,
        **settings: Any,
    ) -> None:
        parsed = bench_settings(settings)
        if not isinstance(engine_kwargs, Mapping | None):
            raise ConfigError(f"Bench(engine_kwargs=...): expected a dict, got {engine_kwargs!r}")
        pair = engine_pair(
            target, speculative_config, engine_kwargs or {},
            served=parsed.served,
            where=lambda n: f"Bench({n}=...)", hint="to Bench",
        )  # fmt: skip
        self.baseline, self.speculative = pair
        self.settings = parsed
        self.name, self.category = name, category
        self.gates = dict(gates or {})
        self._reference = reference
        self._plan = plan
        self._sink = sink
        self.progress: Progress = progress or (lambda _: None)
        self._source, self._owns_source = source, source is None
        self.results: list[Result] = []
        #: the call that stored each result label other than run() (named in a clash)
        self._origin: dict[str, str] = {}
        #: what :meth:`load` measured
        self.loads: list[LoadResult] = []
        self.engine_info: dict[str, Any] = {}
        #: wall time this Bench spent on warm-up, rounds, the cost ratio and sampling
        self.time = TimeSpent()

    # -- engines ------------------------------------------------------------------------
    @property
    def served(self) -> bool:
        """Measure two running servers (the settings name them) instead of local engines."""
        return self.settings.served

    @property
    def source(self) -> EngineSource:
        """The engines: the ones given, the two servers the settings name (this Bench's own),
        or the process's shared local pool."""
        if self._source is None:
            self._source = (
                make_source(self.settings, self.progress)
                if self.served
                else _shared.take(self.settings, self.progress)
            )
        return self._source

    def engine(self, which: str) -> EngineBackend:
        """The resident ``"baseline"`` or ``"speculative"`` engine (started if needed)."""
        configs = {"baseline": self.baseline, "speculative": self.speculative}
        if which not in configs:
            raise ValueError(f"which must be 'baseline' or 'speculative', got {which!r}")
        self._check_device([self.speculative], "engine")
        other = configs["speculative" if which == "baseline" else "baseline"]
        return self.source.acquire(configs[which], keep=[other], timeout=self._timeout)

    @property
    def _timeout(self) -> float:
        return self.settings.timeout

    def close(self) -> None:
        """Give the engines back: the last open Bench on the shared pool shuts them down."""
        if self._owns_source and self._source is not None:
            source, self._source = self._source, None
            if self.served:
                source.close()
            else:
                _shared.give_back()

    def __enter__(self) -> Bench:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------
    def run(
        self,
        prompts: Sequence[Any],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        trials: int | str | None = None,
        warmup: int = 1,
        concurrency: int | None = None,
        seed: int = 0,
        json_schema: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        label: str | None = None,
        **sampling: Any,
    ) -> Result:
        """Generate ``prompts`` on both engines, ``warmup`` + ``trials`` paired rounds, and
        return the complete result (figures, theory, verdict).

        Every round uses the same sampling parameters with ``ignore_eos=True``, so both engines
        generate ``max_tokens`` tokens per prompt. ``concurrency`` splits the prompts into
        batches of that size, sent one after the other (default: all at once). ``json_schema``
        (one JSON Schema, or one per prompt) turns on vLLM structured outputs. Other keywords
        go to ``vllm.SamplingParams`` (``ignore_eos=False`` lets generation stop early).
        """
        __tracebackhide__ = True
        return self._run(
            self.speculative, prompts, max_tokens=max_tokens, temperature=temperature,
            trials=trials, warmup=warmup, concurrency=concurrency, seed=seed,
            json_schema=json_schema, label=label, **sampling,
        )  # fmt: skip

    def conversation(
        self,
        conversations: Sequence[Sequence[str]],
        *,
        max_tokens: int,
        turns: int | None = None,
        system: str | None = None,
        tokenizer: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        label: str | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        concurrency: int | None = None,
        json_schema: Any = None,
        **run_kwargs: Any,
    ) -> list[Result]:
        """Run multi-turn ``conversations`` (each a list of user messages, e.g.
        ``prompts.standard_conversations("mt-bench", n=8)``) turn by turn: one paired result
        per turn, labelled ``turn 1``, ``turn 2``, ... (``label`` goes before: ``mt turn 1``).

        Turn n's prompt is the model's chat template (of ``tokenizer``, default the target's;
        ``system`` and ``chat_template_kwargs`` go to it) over the conversation so far: the
        earlier user messages, each followed by the answer the **baseline** engine gave to it
        in its last measured round, then turn n's message. Both engines get that same history,
        so every turn is a paired comparison of the same prompts; the baseline's is the
        reference output (the speculative engine's is the same where speculation is lossless).
        Answers run to ``max_tokens`` (``ignore_eos``, as in :meth:`run`).

        Each turn is first sent once to each engine, unmeasured (its warm-up round): the
        result's note ``first-send cache hit`` is each side's prefix-cache hit rate over that
        sending, what the earlier turns left in the cache (the history). The measured rounds
        resend prompts the cache already holds, so the result's own hit rates are the share of
        each prompt the cache serves on a resend (its whole blocks). On a pool of one engine
        (rounds one engine after the other) the first sending is the ordinary warm-up and the
        note is left out. Other keywords are :meth:`run`'s (``trials``, sampling parameters).
        """
        __tracebackhide__ = True
        from .conversation import (
            FIRST_SEND_NOTE,
            check_conversations,
            first_send,
            first_send_note,
            render,
            template_model,
        )

        convs, n_turns = check_conversations(conversations, turns, run_kwargs)
        check_run_args(max_tokens, temperature, concurrency)
        prefix = label_prefix("conversation", label)
        labels = [f"{prefix}turn {t}" for t in range(1, n_turns + 1)]
        self._claim_all(
            "conversation", labels,
            'give each conversation() of a test a distinct label, e.g. conversation(..., '
            'label="mt-bench")',
        )  # fmt: skip
        model = template_model(tokenizer, self.baseline, self.served)
        self._check_device([self.speculative], "conversation")
        answers: list[list[str]] = [[] for _ in convs]
        results: list[Result] = []
        trials = run_kwargs.pop("trials", None)
        for turn, turn_label in enumerate(labels, start=1):
            prompts = render(
                model, convs, answers, turn, system=system, tokenize=True,
                template_kwargs=chat_template_kwargs or {},
            )  # fmt: skip
            prep = self._prepare(
                "run", prompts, turn_label, [self.speculative], run_kwargs,
                max_tokens=max_tokens, temperature=temperature, concurrency=concurrency,
                seed=seed, json_schema=json_schema,
            )  # fmt: skip
            notes: dict[str, Any] = {}
            warmup = 1
            if self.source.max_engines >= 2:
                base, spec = self.engine("baseline"), self.engine("speculative")
                self._say(f"{turn_label}: sending each conversation's turn once (first send)")
                with self._spending("warmup_seconds"):
                    seen = first_send(base, spec, prep.prompts, prep.sampling, concurrency)
                notes[FIRST_SEND_NOTE] = first_send_note(seen)
                warmup = 0
            result = self._measure(self.speculative, prep, trials, warmup, notes)
            self._origin[turn_label] = f"conversation({_label_arg(label)})"
            results.append(result)
            texts = result.baseline.texts
            if len(texts) != len(convs):
                raise ConfigError(
                    f"{self.name}: conversation(): the baseline engine returned "
                    f"{len(texts)} answers for {len(convs)} conversations in {turn_label}: "
                    "no answer to carry into the next turn"
                )
            for carried, text in zip(answers, texts, strict=True):
                carried.append(text)
        return results

    def _run(
        self,
        speculative: EngineConfig,
        prompts: Sequence[Any],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        trials: int | str | None = None,
        warmup: int = 1,
        concurrency: int | None = None,
        seed: int = 0,
        json_schema: Any = None,
        label: str | None = None,
        **sampling: Any,
    ) -> Result:
        """:meth:`run` with the speculative engine of ``speculative``."""
        __tracebackhide__ = True
        prep = self._prepare(
            "run", prompts, label, [speculative], sampling, max_tokens=max_tokens,
            temperature=temperature, concurrency=concurrency, seed=seed, json_schema=json_schema,
        )  # fmt: skip
        return self._measure(speculative, prep, trials, warmup)

    def _prepare(
        self,
        call: str,
        prompts: Sequence[Any],
        label: str | None,
        configs: Sequence[EngineConfig],
        extra: Mapping[str, Any],
        *,
        max_tokens: int,
        temperature: float,
        concurrency: int | None = None,
        seed: int,
        json_schema: Any = None,
        checks: Callable[[], Any] = lambda: None,
    ) -> _Prepared:
        """What a ``run`` or ``load`` checks before any engine starts, in this order: the
        prompts, the run's arguments, ``checks`` (the call's own; what they give is kept), the
        label (:meth:`_claim_label`), ``json_schema``, the prompts' lengths against a local
        target's context, the device for ``configs``; then every request's :class:`Sampling`
        (``extra``: the caller's other keywords for ``vllm.SamplingParams``)."""
        __tracebackhide__ = True
        prompts = validate_prompts(prompts, call)
        check_run_args(max_tokens, temperature, concurrency)
        checked = checks()
        label = self._claim_label(label, call=call)
        structured = structured_outputs(json_schema, len(prompts))
        if not self.served:
            check_lengths(prompts, max_tokens, self.baseline, self.name)
        self._check_device(configs, call)
        sampling = Sampling.of(
            max_tokens, temperature, extra, seed=seed, structured_outputs=structured
        )
        return _Prepared(prompts, sampling, label, concurrency, checked)

    def _measure(
        self,
        speculative: EngineConfig,
        prep: _Prepared,
        trials: int | str | None,
        warmup: int,
        notes: Mapping[str, Any] | None = None,
    ) -> Result:
        """Paired rounds of ``prep`` on the baseline and ``speculative``: the whole result
        (figures, theory, verdict, notes), stored and handed to the sink."""
        __tracebackhide__ = True
        n_trials, stop, thresholds = self._trials(trials, prep.label)
        raw = run_paired(
            self.source, self.baseline, speculative, prep.prompts, prep.sampling,
            trials=n_trials, warmup=warmup, concurrency=prep.concurrency,
            timeout=self._timeout, progress=self._say, stop=stop,
        )  # fmt: skip
        self._seen(raw.engine_info)
        self.time += TimeSpent(warmup_seconds=raw.warmup_seconds, round_seconds=raw.round_seconds)
        result = build_result(
            raw, nodeid=self.name, category=self.category, speculative=speculative,
            num_prompts=len(prep.prompts), sampling=prep.sampling,
            concurrency=prep.concurrency, label=prep.label,
        )  # fmt: skip
        cost = self._cost_ratio(speculative, result)
        result = with_verdict(with_theory(result, cost), self.gates.get("max_extra_memory_gib"))
        result = self._judge_adaptive(result, stop is not None, thresholds)
        result = self._notes(result, raw)
        if notes:
            result = with_notes(result, **notes)
        self.results.append(result)
        self._emit(result)
        return result

    def _seen(self, engine_info: Mapping[str, Any]) -> None:
        """Keep the engines' facts of this Bench's first measurement (:attr:`engine_info`)."""
        if not self.engine_info:
            self.engine_info.update(engine_info)

    def _emit(self, product: Product) -> None:
        if self._sink is not None:
            self._sink.take(product, self)

    def _say(self, message: str) -> None:
        self.progress(f"{self.name.rsplit('::', 1)[-1]}: {message}")

    def _trials(
        self, trials: int | str | None, label: str
    ) -> tuple[int, Callable[[list[float]], bool] | None, list[float]]:
        """Rounds to run (the most, with a stopping rule), the stopping rule (None: fixed)
        and the gate thresholds adaptive trials decide against.

        Against a stored baseline the run goes on until the regression rule decides (and, with
        ``trials="auto"``, until the gates are decisive too); a pool of one engine runs its
        rounds one engine after the other and cannot stop early, so it runs ``trials``.
        """
        wanted = (
            self.settings.trials
            if trials is None
            else BY_NAME["trials"].parse(trials, "run(trials=...)")
        )
        most = self.settings.max_trials
        stops: list[Callable[[list[float]], bool]] = []
        thresholds: list[float] = []
        if wanted == "auto":
            thresholds = [t for t in (self.gates.get("min_speedup"),) if t is not None]
            stops.append(adaptive_stop(thresholds, self.settings.precision, most))
        fixed = int(wanted) if wanted != "auto" else most
        plan = self._plan
        if plan is not None:  # a saving run sized by its noise
            if self.source.max_engines < 2:  # cannot stop early
                return max(plan.fixed, fixed), None, []
            sized = plan.stop()
            return max(plan.most, fixed), lambda r: len(r) >= fixed and sized(r), []
        stored = self._reference(label) if self._reference is not None else None
        if stored is not None and self.source.max_engines >= 2:
            reference, tolerance = stored
            most = reference.compared or most
            stops.append(lambda r: decide(reference, r, tolerance, final=False).decided)
        if not stops:
            return fixed, None, []
        if self.source.max_engines < 2:
            return fixed, None, thresholds
        return most, lambda r: all(stop(r) for stop in stops), thresholds

    def _claim_label(self, label: str | None, call: str = "run") -> str:
        """The key suffix of the next result of ``call`` (``run``, or ``load`` with a key space
        of its own): ``label``, or automatically ``""`` for the first and ``#n`` (the next free
        n) after it. A key this Bench stored already, or that the sink holds from another
        Bench of the same name, is refused: two workloads under one key would be merged and
        compared as one."""
        __tracebackhide__ = True
        made: Sequence[Result | LoadResult] = self.loads if call == "load" else self.results
        taken = {r.label for r in made}
        if label is None:
            n = len(made) + 1
            while f"#{n}" in taken:
                n += 1
            label = f"#{n}" if made else ""
        elif not isinstance(label, str):
            raise ConfigError(f"{call}(label=...): expected a string, got {label!r:.80}")
        elif label in taken:
            key = f"{self.name}[{label}]" if label else self.name
            raise ConfigError(
                f"{self.name}: {call}(label={label!r}): this test already stored a "
                f"{'load' if call == 'load' else 'result'} under the key {key!r}; "
                + _distinct(call)
            )
        self._claim_all(call, [label], f"or give each {call}() a distinct label")
        return label

    def _held(self, call: str) -> set[str]:
        """The labels of the results (``call="load"``: loads) that the sink holds under this
        Bench's name (:class:`Sink`): another Bench of the same name made them."""
        held = getattr(self._sink, "held", None)
        return set() if held is None else set(held(self.name, call))

    def _claim_all(self, call: str, labels: Sequence[str], fix: str | None = None) -> None:
        """Refuse, before any engine starts, a ``call`` whose results would be stored under
        keys this test holds already (two workloads under one key would be merged and
        compared as one); ``fix`` says what to change (default: :func:`_distinct`)."""
        __tracebackhide__ = True
        fix = fix or _distinct(call)
        own = set() if call == "load" else {r.label for r in self.results}
        held = self._held("load" if call == "load" else "run")
        for name in labels:
            key = f"{self.name}[{name}]" if name else self.name
            if name in own:
                by = self._origin.get(name, f"run(label={name!r})")
                raise ConfigError(
                    f"{self.name}: {call}(): its result {name!r} would be stored under the key "
                    f"{key!r}, which this test's earlier {by} holds; {fix}"
                )
            if name in held:
                what = "load" if call == "load" else "result"
                raise ConfigError(
                    f"{self.name}: {call}(): its {what} would be stored under the key {key!r}, "
                    f"which another Bench named {self.name!r} holds in the same record (two "
                    "workloads under one key would be saved and compared as one); give each "
                    f'Bench its own name, e.g. record.bench(..., name="ngram"); {fix}'
                )

    def _cost_ratio(self, spec: EngineConfig, result: Result) -> float | None:
        """Draft/target step-time ratio: 0 for proposers without a model (n-gram, suffix),
        from inside the speculative engine otherwise (its draft proposal per drafted token
        over the baseline's decode step, :func:`~.phases.cost_ratio`); None where the rounds
        carry no step profile (served engines) or the setting is off."""
        if not has_model(spec.method):
            return 0.0
        if self.settings.cost_ratio == "off":
            return None
        return cost_ratio(result.phases, result.num_drafts, result.num_draft_tokens)

    def _check_device(self, configs: Sequence[EngineConfig], call: str) -> None:
        """Refuse, before any engine starts, a speculative config the engines' device cannot
        run (synthetic acceptance on CPU); a served pair's device is its servers' business."""
        __tracebackhide__ = True
        if self.served:
            return
        device = self.source.device
        for config in configs:
            check_on_device(config, device, f"{self.name}: {call}(): speculative_config")

    @contextmanager
    def _spending(self, kind: str) -> Iterator[None]:
        """Add the block's wall time, less the engine starts it waited for (the source counts
        those), to :attr:`time` under the ``TimeSpent`` field ``kind``."""
        began, starting = time.perf_counter(), self.source.start_seconds
        try:
            yield
        finally:
            spent: dict[str, Any] = {
                kind: time.perf_counter() - began - (self.source.start_seconds - starting)
            }
            self.time += TimeSpent(**spent)

    @staticmethod
    def _judge_adaptive(result: Result, adaptive: bool, thresholds: list[float]) -> Result:
        if not adaptive:
            return result
        from dataclasses import replace

        low, high = result.speedup_ci
        open_gates = [t for t in thresholds if low < t <= high]
        why = ""
        if open_gates:
            why = (
                f"after {result.trials} rounds the speedup's 95% interval "
                f"{low:.2f}x-{high:.2f}x still contains {open_gates[0]:.2f}x"
            )
        return replace(result, adaptive=True, inconclusive=why)

    def _notes(self, result: Result, raw: PairedRounds) -> Result:
        """Say what skews the figures: fewer tokens than asked for, a speculative side that
        lost prefix-cache hits, other traffic."""
        requested = result.max_tokens * result.num_prompts
        generated = result.baseline.generated_tokens
        if generated < requested:
            result = with_notes(result, generated=f"{generated}/{requested} tokens")
            self._say(
                f"WARNING: the baseline generated {generated} of the {requested} tokens asked "
                f"for (max_tokens={result.max_tokens} x {result.num_prompts} prompts); the "
                "figures count the generated tokens. A stop condition or the engine's "
                "max_model_len cut them short."
            )
        warning = cache_warning(
            result.baseline.prefix_cache_hit_rate, result.speculative.prefix_cache_hit_rate,
            result.prefix_cache_gap, result.prefix_cache_gap_ci,
        )  # fmt: skip
        if warning is not None:
            note = cache_note(
                result.baseline.prefix_cache_hit_rate, result.speculative.prefix_cache_hit_rate
            )
            result = with_notes(result, prefix_cache=note)
            self._say(f"WARNING: {warning}")
        if raw.other_requests:
            result = with_notes(result, other_traffic=f"{raw.other_requests} requests")
            self._say(
                f"WARNING: the servers answered {raw.other_requests} requests that were not "
                "ours during the measurement; figures may be skewed"
            )
        return result

    # -- traffic ----------------------------------------------------------------------------
    def load(
        self,
        prompts: Sequence[Any],
        *,
        max_tokens: int,
        rates: Sequence[float],
        requests: int | None = None,
        duration: float | None = None,
        burstiness: float = 1.0,
        slo: Mapping[str, float] | None = None,
        seed: int = 0,
        rounds: int = DEFAULT_ROUNDS,
        temperature: float = 0.0,
        label: str | None = None,
        **sampling: Any,
    ) -> LoadResult:
        """Send the same requests at the same arrival times to both engines, at each of
        ``rates`` (requests per second; ``float("inf")``: all at once), and measure TTFT, TPOT,
        ITL and end-to-end latency per request.

        Arrivals are offered as ``vllm bench serve`` offers them: exponential gaps (a Poisson
        process) at ``burstiness`` 1, gamma gaps of shape ``burstiness`` otherwise, scaled so
        that N requests span N / rate (the offered rate is the rate asked for); each round draws
        its own schedule (seeded from ``seed`` and the round; both engines get the same one in
        a round), so the interval sees the draw too; request i carries
        ``prompts[i % len(prompts)]``. ``requests`` (per rate) or ``duration`` (seconds per
        rate: ``round(rate * duration)`` requests) sets each rate's size. ``slo`` (milliseconds:
        ``ttft_ms``, ``tpot_ms``, ``e2e_ms``) turns on goodput, the requests per second that
        meet every bound. Each rate's schedule goes to each engine ``rounds`` times (2 to 100:
        the gain's interval comes from how much the rounds differ). Out-of-range arguments
        (:func:`~.load.check_load_args`: a rate above 10**6 req/s, a round's arrivals
        spanning over an hour, ``burstiness`` outside 0.01-100, a count that is not an
        integer, an infinite SLO bound) are refused before any engine starts.
        Other keywords go to ``vllm.SamplingParams`` as in :meth:`run`.
        """
        __tracebackhide__ = True

        def checks() -> tuple[list[float], dict[str, float]]:
            limits = check_load_args(rates, requests, duration, burstiness, slo, rounds, seed)
            self._check_device([self.speculative], "load")
            return limits

        prep = self._prepare(
            "load", prompts, label, (), sampling, max_tokens=max_tokens, temperature=temperature,
            seed=seed, checks=checks,
        )  # fmt: skip
        (rate_list, checked_slo), label = prep.checked, prep.label
        schedules = round_schedules(
            rate_list, requests=requests, duration=duration, burstiness=burstiness, seed=seed,
            rounds=rounds,
        )  # fmt: skip
        self._say(
            f"load at {len(rate_list)} rate{'s' if len(rate_list) != 1 else ''} "
            f"({', '.join(rate_text(r) for r in rate_list)}), "
            f"{', '.join(str(len(schedules[r][0])) for r in rate_list)} requests"
        )
        with self._spending("load_seconds"):
            raw = run_load(
                self.source, self.baseline, self.speculative, prep.prompts, prep.sampling,
                schedules, rounds=rounds, timeout=self._timeout, progress=self._say,
            )  # fmt: skip
        self._seen(raw.engine_info)
        if raw.other_requests:
            self._say(
                f"WARNING: the servers answered {raw.other_requests} requests that were not "
                "ours during the load rounds; latencies may be skewed"
            )
        spec = self.speculative
        counters = sum((r.counters for r in raw.rates), Counters())
        target, method, k = proposer(raw.engine_info, counters, spec)
        result = LoadResult(
            nodeid=self.name, label=label, target=target, method=method,
            num_speculative_tokens=k, max_tokens=max_tokens, burstiness=float(burstiness),
            seed=seed, slo=checked_slo,
            points=tuple(
                build_point(r.rate, r.baseline, r.speculative, r.counters, checked_slo,
                            first=r.first,
                            cache=(r.baseline_round_counters, r.speculative_round_counters))
                for r in raw.rates
            ),
            speculative_config=dict(spec.speculative_config or {}),
        )  # fmt: skip
        self.loads.append(result)
        for point in result.points:
            warning = cache_warning(
                point.baseline_prefix_cache_hit_rate, point.speculative_prefix_cache_hit_rate,
                point.prefix_cache_gap, point.prefix_cache_gap_ci,
            )  # fmt: skip
            if warning is not None:
                self._say(f"WARNING: {rate_text(point.rate)}: {warning}")
        self._say(result.traffic_line())
        self._emit(result)
        return result

    # -- sweeps and distributions -----------------------------------------------------------
    def sweep(
        self,
        prompts: Sequence[Any],
        *,
        max_tokens: int,
        num_speculative_tokens: Sequence[int] | None = None,
        concurrency: Sequence[int] | None = None,
        label: str | None = None,
        **run_kwargs: Any,
    ) -> Sweep:
        """Run the grid of ``num_speculative_tokens`` x ``concurrency``: one result per point.

        Each k is its own speculative engine (started once for all concurrencies); each
        concurrency sends ``max(len(prompts), c)`` prompts (cycled), ``c`` at a time. The sweep
        names the best k per concurrency and the crossover: the lowest concurrency at which the
        best k's 95% interval lies wholly below 1.0. Each point's result is labelled
        ``k=2 c=8``; ``label`` goes before it (``long k=2 c=8``): a second sweep of a test
        needs one.
        """
        __tracebackhide__ = True
        prompts = validate_prompts(prompts, "sweep")
        ks = list(num_speculative_tokens or [self.speculative.num_speculative_tokens])
        cs = list(concurrency or [len(prompts)])
        check_axes("sweep", num_speculative_tokens=ks, concurrency=cs)
        prefix = label_prefix("sweep", label)
        self._claim_all("sweep", [f"{prefix}k={k} c={c}" for k in ks for c in cs])
        self._check_device([self.speculative], "sweep")
        # each point runs one fixed k: a batch-size schedule in the config is left out
        base_config = {
            key: value
            for key, value in (self.speculative.speculative_config or {}).items()
            if key != SCHEDULE_KEY
        }
        sweep = Sweep(self.name, base_config=base_config, label=prefix.strip())
        for k in ks:
            config = self._with_k(base_config, k)
            for c in cs:
                batch = cycled(prompts, max(len(prompts), c))
                result = self._run(
                    config, batch, max_tokens=max_tokens, concurrency=c,
                    label=f"{prefix}k={k} c={c}", **run_kwargs,
                )  # fmt: skip
                self._origin[result.label] = f"sweep({_label_arg(label)})"
                sweep.add(k, c, result)
        self._emit(sweep)
        return sweep

    def _with_k(self, base_config: Mapping[str, Any], k: int) -> EngineConfig:
        """The speculative engine of ``base_config`` with a fixed ``k``."""
        return EngineConfig.create(
            self.speculative.target, {**base_config, "num_speculative_tokens": k},
            self.speculative.engine_kwargs,
        )  # fmt: skip

    def check_schedule(
        self,
        schedule: KSchedule,
        prompts: Sequence[Any],
        *,
        max_tokens: int,
        concurrency: Sequence[int] | None = None,
        tolerance: float | None = None,
        label: str | None = None,
        **run_kwargs: Any,
    ) -> ScheduleCheck:
        """Verify a :class:`~pytest_specdecode.measure.kschedule.KSchedule` (from
        ``sweep.schedule()``): at each concurrency (default: the ones the sweep measured) run
        the engine with the schedule (label ``schedule c=8``) and the best fixed k there
        (label ``fixed k=4 c=8``), each against the baseline, on ``max(len(prompts), c)``
        prompts (cycled), ``c`` at a time, as :meth:`sweep` does; ``label`` goes before those
        labels (``long schedule c=8``): a second check of a test needs one.

        A row fails only where the schedule is shown slower: the upper end of the 95% interval
        of its speedup over the fixed k's (both runs' rounds) below ``1 - tolerance`` (default
        tolerance: the schedule's). A uniform schedule of the best k is that fixed k's engine:
        it runs once and its row holds, not compared. Where the schedule switches speculation
        off (k = 0) nothing runs: the row takes the sweep's figure for the best k, which was
        slower than the target alone. Gate it with
        :func:`~pytest_specdecode.assert_schedule_holds`.
        """
        __tracebackhide__ = True
        prompts = validate_prompts(prompts, "check_schedule")
        if not isinstance(schedule, KSchedule):
            raise ConfigError(
                f"check_schedule(schedule=...): expected the KSchedule of sweep.schedule(), got "
                f"{type(schedule).__name__}"
            )
        prefix = label_prefix("check_schedule", label)
        if self.served:
            raise ConfigError(
                "check_schedule: needs local engines (it starts an engine with the schedule and "
                "one per fixed k); against servers, start the speculative server with "
                "--speculative-config '<schedule.speculative_config as JSON>' and run() it"
            )
        cs = check_concurrencies(concurrency, schedule)
        tol = schedule.tolerance if tolerance is None else check_tolerance(tolerance)
        scheduled = EngineConfig.create(
            self.speculative.target, schedule.speculative_config, self.speculative.engine_kwargs
        )
        scheduled.check_speculative_config("check_schedule(schedule=...).speculative_config")
        plan = check_plan(schedule, cs)
        self._check_device([scheduled], "check_schedule")
        labels = [name for p in plan for name in p.runs]
        self._claim_all("check_schedule", [prefix + name for name in labels])
        self._say(f"checking the schedule {schedule.summary()}")
        measured: dict[str, Result] = {}

        def run(config: EngineConfig, c: int, name: str) -> None:
            batch = cycled(prompts, max(len(prompts), c))
            measured[name] = self._run(
                config, batch, max_tokens=max_tokens, concurrency=c, label=prefix + name,
                **run_kwargs,
            )  # fmt: skip
            self._origin[prefix + name] = f"check_schedule({_label_arg(label)})"

        groups = [(scheduled, [(p.concurrency, p.runs[0]) for p in plan if p.runs])]
        for k in sorted({p.fixed_k for p in plan if len(p.runs) > 1}):
            fixed = self._with_k(schedule.base_config, k)
            runs = [(p.concurrency, p.runs[1]) for p in plan
                    if len(p.runs) > 1 and p.fixed_k == k]  # fmt: skip
            groups.append((fixed, runs))
        # one engine's runs together, the engines still running from the sweep first
        for config, runs in sorted(groups, key=lambda g: not self.source.is_running(g[0])):
            for c, name in runs:
                run(config, c, name)
        with_draft = draft_model(schedule.base_config) is not None
        rows = tuple(check_row(p, measured, tol, with_draft) for p in plan)
        check = ScheduleCheck(self.name, schedule, tol, rows, label=prefix.strip())
        self._say(check.summary())
        self._emit(check)
        return check

    def choose_draft(
        self,
        prompts: Sequence[Any],
        candidates: Mapping[str, Mapping[str, Any]],
        *,
        max_tokens: int,
        **run_kwargs: Any,
    ) -> Ranking:
        """Measure each candidate ``speculative_config`` (name -> config: draft models,
        n-gram, EAGLE heads, ...) against the one shared baseline engine and rank them.

        Every candidate is checked before any engine starts; each then runs like
        :meth:`run` (same prompts and keywords) under the label of its name, so its result's
        key is ``name[candidate]`` (those whose engine is running first). The
        :class:`~pytest_specdecode.measure.choice.Ranking` orders them by speedup, marks those
        whose 95% interval overlaps the fastest one's as tied, and names the best one worth it
        (``.best``, None when none is).
        """
        __tracebackhide__ = True
        prompts = validate_prompts(prompts, "choose_draft")
        if "label" in run_kwargs:
            raise ConfigError(
                "choose_draft(label=...): each candidate's result is labelled with its name; "
                "rename the candidates instead"
            )
        configs = candidate_configs(candidates, self.speculative, served=self.served)
        self._check_device(list(configs.values()), "choose_draft")
        self._claim_all("choose_draft", list(configs), "rename the candidates")
        # an engine already running goes first (it may have to make room for the next ones);
        # the ranking does not depend on the order
        order = sorted(configs, key=lambda name: not self.source.is_running(configs[name]))
        results = {}
        for name in order:
            results[name] = self._run(
                configs[name], prompts, max_tokens=max_tokens, label=name, **run_kwargs
            )
            self._origin[name] = "choose_draft()"
        ranking = Ranking.of(self.name, {name: results[name] for name in configs})
        self._emit(ranking)
        return ranking

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
        why = lossy(self.speculative.speculative_config)
        if why is not None:
            raise ConfigError(
                f"{self.name}: sample_equivalence() on a speculative engine that is {why}; "
                "leave the equivalence check out for this config"
            )
        check_sampling_temperature(temperature)
        self._say(
            f"sampling {samples} continuations of {tokens} tokens per engine at temperature "
            f"{temperature:g}"
        )
        with self._spending("sampling_seconds"):
            check = compare_distributions(
                self.engine("baseline"), self.engine("speculative"), prompts,
                temperature=temperature, samples=samples, tokens=tokens, alpha=alpha,
                nodeid=self.name, **sampling,
            )  # fmt: skip
        self._emit(check)
        return check


def _distinct(call: str) -> str:
    """What a clash of ``call``'s result keys asks for."""
    return (
        f'give each {call}() of a test a distinct label, e.g. {call}(..., label="short") and '
        f'{call}(..., label="long")'
    )


def _label_arg(label: str | None) -> str:
    """How a call's ``label`` argument reads in a message (nothing without one)."""
    return "" if label is None else f"label={label!r}"
