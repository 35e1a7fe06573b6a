"""pytest-specdecode: measure and gate vLLM speculative decoding from pytest.

Importing this package imports neither vLLM nor torch.
"""

from __future__ import annotations

from .engines.config import EngineConfig
from .engines.local import Engine
from .engines.pool import EnginePool
from .engines.protocol import (
    Counters,
    EngineBackend,
    EngineSource,
    LoadRound,
    RequestFigures,
    Round,
    TimedRequest,
)
from .errors import (
    ConfigError,
    CounterResetError,
    EngineCrashedError,
    EngineError,
    EngineStartError,
    EngineTimeoutError,
    GateError,
    InconclusiveError,
    NoSpeculationError,
    SpecDecodeError,
)
from .measure.assertions import (
    assert_acceptance_length,
    assert_acceptance_rate,
    assert_extra_memory,
    assert_goodput,
    assert_latency_gain,
    assert_outputs_equivalent,
    assert_schedule_holds,
    assert_speedup,
)
from .measure.bench import Bench
from .measure.choice import Candidate, Ranking
from .measure.equivalence import DistributionCheck
from .measure.kschedule import KChoice, KSchedule, ScheduleCheck, ScheduleRow
from .measure.load import LoadPoint, LoadResult, LoadSummary
from .measure.result import EngineFigures, Result
from .measure.sweep import Sweep
from .run.record import RunRecord

#: The package version (pyproject.toml reads it from here).
__version__ = "0.1.0"

__all__ = [
    "Bench",
    "Candidate",
    "ConfigError",
    "CounterResetError",
    "Counters",
    "DistributionCheck",
    "EngineBackend",
    "EngineSource",
    "Engine",
    "EngineConfig",
    "EngineCrashedError",
    "EngineError",
    "EngineFigures",
    "EnginePool",
    "EngineStartError",
    "EngineTimeoutError",
    "GateError",
    "InconclusiveError",
    "KChoice",
    "KSchedule",
    "LoadPoint",
    "LoadResult",
    "LoadRound",
    "LoadSummary",
    "NoSpeculationError",
    "Ranking",
    "RequestFigures",
    "Result",
    "Round",
    "RunRecord",
    "ScheduleCheck",
    "ScheduleRow",
    "SpecDecodeError",
    "Sweep",
    "TimedRequest",
    "assert_acceptance_length",
    "assert_acceptance_rate",
    "assert_extra_memory",
    "assert_goodput",
    "assert_latency_gain",
    "assert_outputs_equivalent",
    "assert_schedule_holds",
    "assert_speedup",
]
