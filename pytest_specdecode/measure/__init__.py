"""The measurement layer: paired rounds, figures, statistics, theory, verdicts, equivalence,
sweeps and the :class:`~pytest_specdecode.measure.bench.Bench` that chains them. Knows engines
only through :mod:`pytest_specdecode.engines.protocol`; imports nothing from pytest."""
