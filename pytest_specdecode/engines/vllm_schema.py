"""What the installed vLLM accepts, read without importing vLLM.

Importing vLLM takes seconds (it imports torch); reading the source of
``vllm/config/speculative.py`` (``speculative_config`` keys), ``vllm/engine/arg_utils.py`` and
``vllm/entrypoints/llm.py`` (``vllm.LLM`` keyword arguments) with :mod:`ast` takes milliseconds,
so config errors are reported at collection time, before any engine starts.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class SpeculativeSchema:
    """Field names of vLLM's ``SpeculativeConfig``, the values its ``method`` accepts, and
    which of those run without a ``model`` (``None`` when that rule could not be read)."""

    fields: frozenset[str]
    methods: frozenset[str]
    source: str  # the file they were read from
    model_free: frozenset[str] | None = None

    def needs_model(self, method: str) -> bool:
        """Whether the installed vLLM refuses ``method`` without a ``model``; ``False`` when
        the rule could not be read (better no check than a false refusal)."""
        if self.model_free is None or method not in self.methods:
            return False
        return method not in self.model_free


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


def _is_self_attr(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _assigns_self(statements: list[ast.stmt], name: str) -> ast.expr | None:
    """The value of the first top-level ``self.<name> = ...`` among ``statements``."""
    for stmt in statements:
        if isinstance(stmt, ast.Assign) and any(_is_self_attr(t, name) for t in stmt.targets):
            return stmt.value
    return None


def _compared_methods(test: ast.expr) -> set[str] | None:
    """The methods a branch test ``self.method == "x"`` / ``self.method in ("x", "y")``
    selects; ``None`` for any other test."""
    if (
        isinstance(test, ast.Compare)
        and _is_self_attr(test.left, "method")
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq | ast.In)
    ):
        right = test.comparators[0]
        items = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right]
        values = {i.value for i in items if isinstance(i, ast.Constant)}
        if values and all(isinstance(v, str) for v in values):
            return {str(v) for v in values}
    return None


def _model_free_methods(
    post_init: ast.FunctionDef, methods: set[str], aliases: dict[str, ast.expr]
) -> frozenset[str] | None:
    """The methods ``SpeculativeConfig.__post_init__`` runs without a ``model``: in its
    chain ``if self.model is None and self.num_speculative_tokens is not None:``, the
    branches (``elif self.method == ...``) that set ``self.model`` themselves (ngram, suffix,
    mtp from the target ...); every other method reaches a branch that raises. Methods that
    ``__post_init__`` renames first (``if self.method in get_args(MTPModelTypes) ...:
    self.method = "mtp"``) follow the rule of their new name. ``None`` when the chain is not
    found."""
    renamed: dict[str, str] = {}
    chain: ast.If | None = None
    for stmt in post_init.body:
        if not isinstance(stmt, ast.If):
            continue
        text = ast.unparse(stmt.test)
        if "self.model is None" in text and "num_speculative_tokens" in text:
            chain = stmt
            break
        new = _assigns_self(stmt.body, "method")
        if isinstance(new, ast.Constant) and isinstance(new.value, str):
            for call in ast.walk(stmt.test):
                if isinstance(call, ast.Call) and call.args:
                    for old in _literal_values(call.args[0], aliases):
                        renamed.setdefault(old, new.value)
    if chain is None or len(chain.body) != 1 or not isinstance(chain.body[0], ast.If):
        return None
    free: set[str] = set()
    branch: ast.stmt | None = chain.body[0]
    while isinstance(branch, ast.If):
        selected = _compared_methods(branch.test)
        if selected is None:
            return None
        if _assigns_self(branch.body, "model") is not None:
            free |= selected
        branch = branch.orelse[0] if len(branch.orelse) == 1 else None
    return frozenset(m for m in methods if renamed.get(m, m) in free)


def parse_schema(source: str, origin: str = "<string>") -> SpeculativeSchema | None:
    """Read the schema from the text of ``vllm/config/speculative.py``."""
    tree = ast.parse(source)
    aliases: dict[str, ast.expr] = {}
    fields: set[str] = set()
    method_annotation: ast.expr | None = None
    post_init: ast.FunctionDef | None = None
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
                elif isinstance(item, ast.FunctionDef) and item.name == "__post_init__":
                    post_init = item
    if not fields:
        return None
    methods = _literal_values(method_annotation, aliases) if method_annotation else set()
    free = _model_free_methods(post_init, methods, aliases) if post_init else None
    return SpeculativeSchema(frozenset(fields), frozenset(methods), origin, free)


@dataclass(frozen=True)
class EngineArgsSchema:
    """The keyword arguments ``vllm.LLM(model, **kwargs)`` accepts: its own named parameters
    plus the fields of ``EngineArgs`` (where its ``**kwargs`` go)."""

    names: frozenset[str]
    source: str  # the files they were read from


def _class_fields(tree: ast.Module, name: str) -> set[str] | None:
    """Annotated class-level names of class ``name`` and of its bases defined in the same
    module; ``None`` when the class is missing or has a base defined elsewhere."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    node = classes.get(name)
    if node is None:
        return None
    fields = {
        item.target.id
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }
    for base in node.bases:
        if not isinstance(base, ast.Name) or base.id not in classes:
            return None  # fields we cannot see: better no check than a false refusal
        inherited = _class_fields(tree, base.id)
        if inherited is None:
            return None
        fields |= inherited
    return fields


def _init_parameters(tree: ast.Module, name: str) -> set[str] | None:
    """Parameter names of ``name.__init__`` (without ``self``), or ``None`` if not found."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    params = args.posonlyargs + args.args + args.kwonlyargs
                    return {a.arg for a in params} - {"self"}
    return None


def parse_engine_args(
    arg_utils: str, llm: str, origin: str = "<string>"
) -> EngineArgsSchema | None:
    """Read the accepted names from the texts of ``arg_utils.py`` and ``llm.py``."""
    fields = _class_fields(ast.parse(arg_utils), "EngineArgs")
    params = _init_parameters(ast.parse(llm), "LLM")
    if not fields or params is None:
        return None
    return EngineArgsSchema(frozenset(fields | params), origin)


def _vllm_file(*parts: str) -> Path | None:
    """A file of the installed vLLM package, found without importing it."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location).joinpath(*parts)
        if path.is_file():
            return path
    return None


@cache
def installed_schema() -> SpeculativeSchema | None:
    """The schema of the installed vLLM, or ``None`` when vLLM (or the file) is not there."""
    path = _vllm_file("config", "speculative.py")
    if path is None:
        return None
    try:
        return parse_schema(path.read_text(encoding="utf-8"), str(path))
    except (SyntaxError, OSError, UnicodeDecodeError):
        return None


@cache
def installed_engine_args() -> EngineArgsSchema | None:
    """What the installed vLLM's ``LLM()`` accepts, or ``None`` when it cannot be read."""
    arg_utils = _vllm_file("engine", "arg_utils.py")
    llm = _vllm_file("entrypoints", "llm.py")
    if arg_utils is None or llm is None:
        return None
    try:
        return parse_engine_args(
            arg_utils.read_text(encoding="utf-8"),
            llm.read_text(encoding="utf-8"),
            f"{arg_utils} and {llm}",
        )
    except (SyntaxError, OSError, UnicodeDecodeError):
        return None


def closest(word: str, choices: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest choice, or an empty string."""
    match = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""
