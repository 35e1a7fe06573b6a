"""Renderers that work outside pytest: the terminal table (``table``) and the self-contained
HTML report (``html``), both from report entries (plain dicts)."""
