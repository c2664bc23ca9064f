"""A decoded request body checked against a wire's pydantic request model (pure logic, no I/O).

`validated` bounds the body's nesting, validates it strictly (no string-to-number coercion; unknown
keys ignored, since clients add keys faster than wires learn them) and turns the first useful
pydantic error into one `WireError` that names the field as the client spelled it
(`input[2].call_id`), never a traceback or a 500."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from environments.proxy.conversation import WireError

MAX_DEPTH = 64
"""Deepest nesting of objects and lists a request may have (JSON schemas included)."""
MAX_MESSAGE_CHARS = 300

Model = TypeVar("Model", bound=BaseModel)


def nesting_depth(value: Any) -> int:
    """How deep `value` nests dicts and lists (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


def field_path(body: Any, loc: tuple[Any, ...], missing: bool = False) -> list[str | int]:
    """The part of a pydantic error location that exists in the body: the union and tag labels
    pydantic puts into a location (`str`, `list[...]`, `function_call`) are left out; a `missing`
    field's own name (the location's last step) is kept."""
    path: list[str | int] = []
    current = body
    for index, step in enumerate(loc):
        inside = (isinstance(current, dict) and isinstance(step, str) and step in current) or (
            isinstance(current, list) and isinstance(step, int) and 0 <= step < len(current)
        )
        if inside:
            current = current[step]
        elif not (missing and index == len(loc) - 1 and isinstance(current, dict)):
            continue
        path.append(step)
    return path


def dotted(path: list[str | int]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def validated(model: type[Model], body: Any) -> Model:
    """`body` as `model`, or a WireError (400) naming the first field that is wrong."""
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    if nesting_depth(body) > MAX_DEPTH:
        raise WireError(f"the request nests deeper than {MAX_DEPTH} levels", code="too_deep")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _wire_error(body, exc) from None


def _wire_error(body: Any, exc: ValidationError) -> WireError:
    # A union reports one error per branch: the one that got deepest into the body says most.
    best: tuple[int, list[str | int], str] | None = None
    for error in exc.errors(include_url=False, include_input=False):
        path = field_path(body, tuple(error["loc"]), error["type"] == "missing")
        if best is None or len(path) > best[0]:
            best = (len(path), path, error["msg"])
    assert best is not None
    _, path, message = best
    param = dotted(path) or None
    text = f"{param}: {message}" if param else message
    return WireError(text[:MAX_MESSAGE_CHARS], param=param)
