"""The pytest plugin: hooks only (``hooks``, the entry point), the hooks it offers
(``hookspecs``), the marker, the session state, the fixtures (adapters over
:class:`~pytest_specdecode.measure.bench.Bench`) and pytest-xdist support (``xdist``)."""
