"""A small JSON Schema validator for the ``--json`` documents of ``flink-gpu``
(src/flink_gpu/cli/schema.json), so that the tests need no ``jsonschema`` (whose dependencies include a
compiled one).

It knows the keywords that schema uses, and refuses a schema with any other, so that a keyword added
there is never silently ignored: ``type``, ``const``, ``enum``, ``minLength``, ``pattern``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``anyOf``, ``allOf``, ``not``, ``if``/``then``/
``else``, ``$ref`` (to ``#/$defs/...``) and the annotations ``$schema``, ``$defs``, ``title``,
``description``. Strings must be valid Unicode (no lone surrogates), as a strict JSON parser requires.
"""

from __future__ import annotations

import re

_ANNOTATIONS = {"$schema", "$defs", "title", "description"}
_KEYWORDS = {
    "type",
    "const",
    "enum",
    "minLength",
    "pattern",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
} | _ANNOTATIONS
_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def errors(document: object, schema: dict) -> "list[str]":
    """What in ``document`` breaks ``schema``: one line per problem, naming where (``$.gpus[0].index``)."""
    out: "list[str]" = []
    _check(document, schema, schema, "$", out)
    return out


def _check(value: object, schema: "dict | bool", root: dict, where: str, out: "list[str]") -> None:
    if schema is True:
        return
    if schema is False:
        out.append(f"{where}: not allowed here")
        return
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"the schema at {where} uses keywords this validator does not know: {sorted(unknown)}")
    if "$ref" in schema:
        _check(value, _resolve(schema["$ref"], root), root, where, out)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            out.append(f"{where}: {value!r} is not of type {' or '.join(types)}")
            return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            out.append(f"{where}: {value!r} holds a lone surrogate, which strict JSON parsers reject")
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: {value!r} is shorter than {schema['minLength']}")
    if "const" in schema and not _same(value, schema["const"]):
        out.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and not any(_same(value, allowed) for allowed in schema["enum"]):
        out.append(f"{where}: {value!r} is not one of {schema['enum']!r}")
    if "pattern" in schema and isinstance(value, str) and re.search(schema["pattern"], value) is None:
        out.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                out.append(f"{where}: {key!r} is missing")
        for key, item in value.items():
            if key in properties:
                _check(item, properties[key], root, f"{where}.{key}", out)
            elif schema.get("additionalProperties") is False:
                out.append(f"{where}: {key!r} is not a documented field")
            elif "additionalProperties" in schema:
                _check(item, schema["additionalProperties"], root, f"{where}.{key}", out)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], root, f"{where}[{i}]", out)
    for part in schema.get("allOf", ()):
        _check(value, part, root, where, out)
    if "anyOf" in schema:
        tries = [errors_of(value, part, root, where) for part in schema["anyOf"]]
        if all(tries):
            out.append(f"{where}: matches none of anyOf: " + " | ".join("; ".join(t) for t in tries))
    if "not" in schema and not errors_of(value, schema["not"], root, where):
        out.append(f"{where}: must not match {schema['not']!r}")
    if "if" in schema:
        branch = "then" if not errors_of(value, schema["if"], root, where) else "else"
        if branch in schema:
            _check(value, schema[branch], root, where, out)


def errors_of(value: object, schema: "dict | bool", root: dict, where: str) -> "list[str]":
    out: "list[str]" = []
    _check(value, schema, root, where, out)
    return out


def _same(a: object, b: object) -> bool:
    """JSON equality: 1 is not true, 1 is 1.0."""
    return type(a) is type(b) and a == b or (_TYPES["number"](a) and _TYPES["number"](b) and a == b)


def _resolve(ref: str, root: dict) -> dict:
    if not ref.startswith("#/"):
        raise ValueError(f"only local references are supported, got {ref!r}")
    node: object = root
    for part in ref[2:].split("/"):
        node = node[part]  # type: ignore[index]
    return node  # type: ignore[return-value]
