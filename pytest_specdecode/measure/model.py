"""The report model's one JSON form, derived from its records: :func:`encode`, :func:`decode`
and :func:`schema`.

A record is a dataclass whose fields are the JSON keys, in their order; a field's metadata
(:func:`json`) says what differs from the plain form: its JSON name, when it is left out, a
conversion of its own (an infinite rate written ``"inf"``), the JSON Schema keywords beyond
its type, and its description. A record's ``JSON`` (:class:`Form`) names its schema
definition, describes it, and adds the keys written from properties (derived: read back, they
are recomputed, so :func:`decode` ignores them). Types come from ``typing.get_type_hints``:
numbers are finite in JSON (NaN and infinity written null; null read as NaN for a ``float``),
tuples and lists are arrays, an ``int``-keyed dict is an object with the numbers as keys.
Nothing here imports more than the standard library.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING
from typing import Any, ClassVar, Self

#: The JSON Schema draft of the generated schema.
DRAFT = "https://json-schema.org/draft/2020-12/schema"


class Key:
    """What a field's JSON key needs beyond its type: ``name`` (default: the field's),
    ``omit`` (``(value, record) -> bool``: left out of the JSON), ``write``/``read`` (a
    conversion of its own, replacing the plain one; ``read`` also gets None for an absent key
    of a field without a default), ``schema`` (keywords over the type's, or the whole schema
    with ``replace``), ``doc`` (its description), ``optional`` (a key the reader does not
    need: the schema leaves it optional; absent, it reads as null), ``after`` (the key it
    follows in the JSON, where that is not the field order), ``form`` (the type as written,
    where it is not the field's), ``hidden`` (not part of the JSON). A plain class, not a
    dataclass: the plugin's import makes a few hundred and creates the class once."""

    __slots__ = ("name", "omit", "write", "read", "schema", "replace", "doc", "optional",
                 "after", "form", "hidden")  # fmt: skip

    def __init__(
        self,
        *,
        name: str | None = None,
        omit: Callable[[Any, Any], bool] | None = None,
        write: Callable[[Any], Any] | None = None,
        read: Callable[[Any], Any] | None = None,
        schema: Mapping[str, Any] | None = None,
        replace: bool = False,
        doc: str = "",
        optional: bool = False,
        after: str | None = None,
        form: Any = None,
        hidden: bool = False,
    ) -> None:
        self.name, self.omit, self.write, self.read = name, omit, write, read
        self.schema: Mapping[str, Any] = schema or {}
        self.replace, self.doc, self.optional = replace, doc, optional
        self.after, self.form, self.hidden = after, form, hidden


class Derived:
    """A key written from a property or method ``attr`` of the record (dotted: of a field's
    value), its ``type`` for the schema (None: the type of the field ``attr`` names, looked up
    when the record is first encoded), after the key ``after`` (None: first); read back, it is
    recomputed. Its JSON name is the last part of ``attr`` unless ``key`` names it."""

    __slots__ = ("attr", "type", "after", "key")

    def __init__(self, attr: str, type: Any, after: str | None = None, key: Key | None = None):
        self.attr, self.type, self.after = attr, type, after
        self.key = key or Key()


class Form:
    """A record's JSON form: its schema definition's name and description, the keys written
    from properties, keys the schema requires although the reader has a default for them,
    schema keywords of the whole object, whether keys the record does not know are refused
    (passed on to its constructor) rather than ignored, and whether its schema is written
    where it is used (``inline``) rather than as a definition of its own."""

    __slots__ = ("name", "doc", "derived", "required", "schema", "strict", "inline")

    def __init__(
        self,
        name: str,
        doc: str = "",
        *,
        derived: tuple[Derived, ...] = (),
        required: tuple[str, ...] = (),
        schema: Mapping[str, Any] | None = None,
        strict: bool = False,
        inline: bool = False,
    ) -> None:
        self.name, self.doc, self.derived, self.required = name, doc, derived, required
        self.schema: Mapping[str, Any] = schema or {}
        self.strict, self.inline = strict, inline


def json(**options: Any) -> dict[str, Key]:
    """A field's metadata with its JSON :class:`Key`: ``field(metadata=json(name=...))``."""
    return {"json": Key(**options)}


# -- omit rules --------------------------------------------------------------------------
def if_none(value: Any, _record: Any) -> bool:
    return value is None


def optional(schema: Mapping[str, Any], doc: str) -> Any:
    """A field that defaults to None and is left out of the JSON while None: ``schema`` is its
    whole schema, ``doc`` its description (reports from before it was kept lack it)."""
    return dataclasses.field(
        default=None, metadata=json(omit=if_none, schema=schema, replace=True, doc=doc)
    )


def if_empty(value: Any, _record: Any) -> bool:
    return not value


def if_null(value: Any, _record: Any) -> bool:
    """Left out where it would be written null (None, NaN)."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def or_else(default: Any) -> Callable[[Any], Any]:
    """A ``read`` that takes ``default`` for an absent or null key."""
    return lambda value: default if value is None else value


def finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null (through dicts, lists and tuples)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


# -- the fields of a record --------------------------------------------------------------
class _Entry:
    """One key of a record's JSON: its name, the record's attribute, its type, its options
    and its field (None: derived)."""

    __slots__ = ("name", "attr", "type", "key", "field")

    def __init__(
        self, name: str, attr: str, type: Any, key: Key, field: dataclasses.Field[Any] | None
    ) -> None:
        self.name, self.attr, self.type, self.key, self.field = name, attr, type, key, field


def _form(cls: type) -> Form:
    form: Form | None = getattr(cls, "JSON", None)
    return form if form is not None else Form(cls.__name__.lower())


_ENTRIES: dict[type, tuple[_Entry, ...]] = {}


def _entries(cls: type) -> tuple[_Entry, ...]:
    """The record's keys in order (fields and derived), worked out once per type."""
    found = _ENTRIES.get(cls)
    if found is not None:
        return found
    hints = typing.get_type_hints(cls)
    entries: list[_Entry] = []
    placed: list[tuple[str | None, _Entry]] = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("json", Key())
        if meta.hidden:
            continue
        entry = _Entry(meta.name or f.name, f.name, meta.form or hints[f.name], meta, f)
        if meta.after is None:
            entries.append(entry)
        else:
            placed.append((meta.after, entry))
    placed += [(d.after, _Entry(d.key.name or d.attr.rpartition(".")[2], d.attr,
                                d.type if d.type is not None else _hint(cls, d.attr), d.key,
                                None))
               for d in _form(cls).derived]  # fmt: skip
    while placed:  # each after its anchor (which may itself be placed)
        names = [e.name for e in entries]
        after, entry = next((a, e) for a, e in placed if a is None or a in names)
        placed.remove((after, entry))
        entries.insert(0 if after is None else 1 + names.index(after), entry)
    _ENTRIES[cls] = tuple(entries)
    return _ENTRIES[cls]


def _hint(cls: type, attr: str) -> Any:
    """The type of the (dotted) field ``attr`` of ``cls``."""
    tp: Any = cls
    for part in attr.split("."):
        tp = typing.get_type_hints(tp)[part]
    return tp


# -- encode ------------------------------------------------------------------------------
def encode(record: Any) -> dict[str, Any]:
    """The record as JSON data (plain dicts, lists, finite numbers; derived keys included)."""
    data: dict[str, Any] = {}
    for entry in _entries(type(record)):
        value = record
        for part in entry.attr.split("."):
            value = getattr(value, part)
        if isinstance(value, types.MethodType):  # a derived key from a method (``summary()``)
            value = value()
        if entry.key.omit is not None and entry.key.omit(value, record):
            continue
        data[entry.name] = entry.key.write(value) if entry.key.write else plain(value)
    return data


def plain(value: Any) -> Any:
    """A value as JSON data: records encoded, enums as their values, tuples as lists, numbers
    finite, ``int`` keys as strings; everything copied."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, Mapping):
        return {str(k) if isinstance(k, int) else k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


# -- decode ------------------------------------------------------------------------------
def decode(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """The record of type ``cls`` that ``data`` (its :func:`encode`, or an older form)
    describes: keys it does not know and derived keys are ignored, an absent key takes the
    field's default, a null one too where the type has no None; a missing key without a
    default is a ``KeyError``."""
    values: dict[str, Any] = {}
    for entry in _entries(cls):
        f = entry.field
        if f is None or not f.init:
            continue
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        raw = data.get(entry.name)
        if raw is None and has_default and (entry.name not in data or not _admits_none(entry.type)):
            continue
        if entry.name not in data and not has_default and entry.key.read is None:
            if not entry.key.optional:
                raise KeyError(entry.name)
        values[f.name] = entry.key.read(raw) if entry.key.read else value_of(entry.type, raw)
    if _form(cls).strict:
        names = {e.name for e in _entries(cls)}
        values.update({k: v for k, v in data.items() if k not in names})
    return cls(**values)


def _admits_none(tp: Any) -> bool:
    return tp is Any or (_is_union(tp) and type(None) in typing.get_args(tp))


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def value_of(tp: Any, raw: Any) -> Any:
    """A JSON value read as type ``tp``: null is None where ``tp`` admits it (NaN for a
    ``float``); records decoded, arrays as the tuple or list ``tp`` names; scalars as read."""
    if raw is None:
        return math.nan if tp is float else None
    if _is_union(tp):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return value_of(inner[0], raw) if len(inner) == 1 else raw
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return decode(tp, raw)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(raw)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(value_of(args[0], v) for v in raw)
        return tuple(value_of(a, v) for a, v in zip(args, raw, strict=True))
    if origin is list:
        return [value_of(args[0], v) for v in raw]
    if origin is dict:
        kt, vt = args
        return {(int(k) if kt is int else k): value_of(vt, v) for k, v in raw.items()}
    return raw


class Record:
    """A report record's ``to_dict()``/``from_dict()``: :func:`encode` and :func:`decode`."""

    JSON: ClassVar[Form | None] = None

    def to_dict(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        record: Self = decode(cls, data)
        return record


# -- schema ------------------------------------------------------------------------------
_NULL = {"type": "null"}
_NUMBER_OR_NULL = {"type": ["number", "null"]}


def schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of record ``cls`` (a reference into ``defs``, where its definition and
    those of the records it holds are added)."""
    form = _form(cls)
    if form.inline:
        return _definition(cls, form, defs)
    if form.name not in defs:
        defs[form.name] = {}  # taken before the fields: a record may hold its own kind
        defs[form.name] = _definition(cls, form, defs)
    return {"$ref": f"#/$defs/{form.name}"}


def _definition(cls: type, form: Form, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of the object record ``cls`` writes."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for entry in _entries(cls):
        properties[entry.name] = _key_schema(entry, defs)
        f = entry.field
        if (
            f is not None
            and f.init
            and f.default is MISSING
            and f.default_factory is MISSING
            and not entry.key.optional
        ) or entry.name in form.required:
            required.append(entry.name)
    definition: dict[str, Any] = {}
    if form.doc:
        definition["description"] = form.doc
    definition["type"] = "object"
    if required:
        definition["required"] = required
    definition["properties"] = properties
    definition.update(form.schema)
    return definition


def _key_schema(entry: _Entry, defs: dict[str, Any]) -> dict[str, Any]:
    k = entry.key
    found = dict(k.schema) if k.replace else {**type_schema(entry.type, defs), **k.schema}
    if k.doc:
        found = {"description": k.doc, **found}
    return found


def type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a value of type ``tp`` as :func:`plain` writes it."""
    if tp is Any:
        return {}
    if _is_union(tp):
        kinds = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = type_schema(kinds[0], defs) if len(kinds) == 1 else {}
        if type(None) not in typing.get_args(tp):
            return inner
        ref = inner.get("$ref", "").rpartition("/")[2]
        if ref and "null" in defs.get(ref, {}).get("type", ()):  # the definition takes null
            return inner
        if set(inner) <= {"type", "minimum", "maximum", "exclusiveMinimum", "items",
                          "minItems", "maxItems", "additionalProperties", "prefixItems"} and (
            isinstance(inner.get("type"), str)
        ):  # fmt: skip
            return {**inner, "type": [inner["type"], "null"]}
        return {"anyOf": [inner, _NULL]}
    if tp is float:
        return {"type": "number"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is str:
        return {"type": "string"}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return schema(tp, defs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0], defs)}
        # an interval's ends may be unknown (NaN, written null)
        items = [_NUMBER_OR_NULL if a is float else type_schema(a, defs) for a in args]
        if all(i == items[0] for i in items):
            return {"type": "array", "items": items[0], "minItems": len(items),
                    "maxItems": len(items)}  # fmt: skip
        return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items)}
    if origin is list:
        return {"type": "array", "items": type_schema(args[0], defs)}
    if origin is dict:
        value = type_schema(args[1], defs)
        return {"type": "object"} if not value else {
            "type": "object", "additionalProperties": value
        }  # fmt: skip
    raise TypeError(f"no JSON Schema for {tp!r}")
