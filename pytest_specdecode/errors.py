"""Exceptions raised by pytest-specdecode."""

from __future__ import annotations


class SpecDecodeError(Exception):
    """Base class for every error this package raises on purpose."""


class ConfigError(SpecDecodeError, ValueError):
    """A setting (marker, option, ini, file) is invalid; the message names where it came from."""


class EngineError(SpecDecodeError, RuntimeError):
    """A vLLM engine worker failed to start, crashed, or did not answer in time."""


class EngineStartError(EngineError):
    """The engine worker could not build its ``vllm.LLM``."""


class EngineCrashedError(EngineError):
    """The engine worker process died."""


class CounterResetError(EngineError):
    """An engine's cumulative speculative-decoding counters went down, or the process that
    counts them changed, between two readings of one measurement (a restarted server or
    engine): a before/after delta would mix two processes' traffic, so none is made."""


class EngineTimeoutError(EngineError):
    """The engine worker did not answer within the timeout and was killed."""


class GateError(SpecDecodeError, AssertionError):
    """A speedup, acceptance or equivalence gate failed (an ``AssertionError`` too, so pytest
    reports it as a failed assertion). ``key`` names the result it judged, when one did."""

    def __init__(self, message: str, key: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.key = key


class InconclusiveError(SpecDecodeError):
    """An adaptive measurement ran out of rounds with its interval still straddling a gate.

    The plugin reports the test as skipped with the reason "inconclusive: ..." rather than as a
    coin-flip pass or fail.
    """


class NoSpeculationError(SpecDecodeError):
    """The speculative engine proposed no draft at all: the configuration, not the figures,
    is wrong (e.g. n-gram lookup on prompts without repeated n-grams)."""


class SpecDecodeWarning(UserWarning):
    """Something works but is likely not what the user wants (e.g. a draft larger than its
    target); filter it with ``-W ignore::pytest_specdecode.errors.SpecDecodeWarning``."""


class UncheckedCompatibilityWarning(SpecDecodeWarning):
    """A draft could not be checked against its target before the engine starts (a hub model
    whose files are not in the Hugging Face cache yet)."""
