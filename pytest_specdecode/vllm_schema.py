"""What the installed vLLM accepts in ``speculative_config``, read without importing vLLM.

Importing vLLM takes seconds (it imports torch); reading the source of
``vllm/config/speculative.py`` with :mod:`ast` takes milliseconds, so config errors are reported
at collection time, before any engine starts.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class SpeculativeSchema:
    """Field names of vLLM's ``SpeculativeConfig`` and the values its ``method`` accepts."""

    fields: frozenset[str]
    methods: frozenset[str]
    source: str  # the file they were read from


def _literal_values(node: ast.expr, aliases: dict[str, ast.expr]) -> set[str]:
    """String values of a ``Literal[...]`` expression, following aliases to other Literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name) and node.id in aliases:
        return _literal_values(aliases[node.id], aliases)
    if isinstance(node, ast.Subscript):
        inner = node.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        values: set[str] = set()
        for item in items:
            values |= _literal_values(item, aliases)
        return values
    if isinstance(node, ast.BinOp):  # X | Y | None
        return _literal_values(node.left, aliases) | _literal_values(node.right, aliases)
    return set()


def parse_schema(source: str, origin: str = "<string>") -> SpeculativeSchema | None:
    """Read the schema from the text of ``vllm/config/speculative.py``."""
    tree = ast.parse(source)
    aliases: dict[str, ast.expr] = {}
    fields: set[str] = set()
    method_annotation: ast.expr | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                aliases[target.id] = node.value
        elif isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    fields.add(item.target.id)
                    if item.target.id == "method":
                        method_annotation = item.annotation
    if not fields:
        return None
    methods = _literal_values(method_annotation, aliases) if method_annotation else set()
    return SpeculativeSchema(frozenset(fields), frozenset(methods), origin)


@cache
def installed_schema() -> SpeculativeSchema | None:
    """The schema of the installed vLLM, or ``None`` when vLLM (or the file) is not there."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "config" / "speculative.py"
        if path.is_file():
            try:
                return parse_schema(path.read_text(encoding="utf-8"), str(path))
            except (SyntaxError, OSError, UnicodeDecodeError):
                return None
    return None


def closest(word: str, choices: frozenset[str] | set[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest choice, or an empty string."""
    match = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""
