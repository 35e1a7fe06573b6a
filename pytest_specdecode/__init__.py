"""pytest-specdecode: measure and gate vLLM speculative decoding from pytest.

Importing this package imports neither vLLM nor torch.
"""

from __future__ import annotations

from .assertions import (
    assert_acceptance_length,
    assert_acceptance_rate,
    assert_extra_memory,
    assert_outputs_equivalent,
    assert_speedup,
)
from .backend import Counters, EngineBackend, EngineSource, RequestFigures, Round
from .engine import Engine, EnginePool
from .engine_config import EngineConfig
from .errors import (
    ConfigError,
    EngineCrashedError,
    EngineError,
    EngineStartError,
    EngineTimeoutError,
    GateError,
    InconclusiveError,
    NoSpeculationError,
    SpecDecodeError,
)
from .measure.bench import Bench
from .measure.equivalence import DistributionCheck
from .measure.sweep import Sweep
from .result import EngineFigures, Result

__version__ = "0.1.0.dev0"

__all__ = [
    "Bench",
    "ConfigError",
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
    "NoSpeculationError",
    "RequestFigures",
    "Result",
    "Round",
    "SpecDecodeError",
    "Sweep",
    "assert_acceptance_length",
    "assert_acceptance_rate",
    "assert_extra_memory",
    "assert_outputs_equivalent",
    "assert_speedup",
]
