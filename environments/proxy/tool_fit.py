"""Whether a parsed tool call fits its tool's `parameters` schema, as far as the schema's top level
says (pure logic): every required argument present, no argument the schema closes out, and each
given argument of the declared JSON type. A call that does not fit is not a call: it stays in the
answer's content as the model wrote it."""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _of_type(value: Any, kind: Any) -> bool:
    kinds = kind if isinstance(kind, list) else [kind]
    for name in kinds:
        if not isinstance(name, str) or name not in _TYPES:
            return True  # a type this check does not know: not its to refuse
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if isinstance(value, _TYPES[name]):
            return True
    return False


def fits(arguments: dict[str, Any], parameters: Any) -> bool:
    if not isinstance(parameters, dict):
        return True
    required = parameters.get("required")
    if isinstance(required, list) and any(isinstance(k, str) and k not in arguments for k in required):
        return False
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    if parameters.get("additionalProperties") is False and any(k not in properties for k in arguments):
        return False
    for key, value in arguments.items():
        schema = properties.get(key)
        if isinstance(schema, dict) and "type" in schema and not _of_type(value, schema["type"]):
            return False
    return True
