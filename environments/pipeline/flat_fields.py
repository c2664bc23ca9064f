"""Flat views of nested config models, derived from their declarations.

Atropos reaches an env's knobs as flat `--env.<name>` flags, while the OPD pipeline is configured by
nested models (`OPDConfig` with its `JudgeConfig` and `TeacherConfig`). Each knob is declared once,
in the nested model, with its default, bounds and description; `flat_fields` copies those
declarations under flat names, and `nest_values` turns flat values back into the nested models. No
knob is declared twice and nothing is converted on the way (no unit bridges). Pure functions.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class FlatGroup:
    """One nested model exposed flat: every field except `exclude`, named `prefix + field`, or as
    `renames` says. `path` is where the model sits inside the root model (() for the root)."""

    model: type[BaseModel]
    path: tuple[str, ...] = ()
    prefix: str = ""
    renames: Mapping[str, str] | None = None
    exclude: frozenset[str] = frozenset()

    def flat_name(self, field: str) -> str:
        return (self.renames or {}).get(field, self.prefix + field)

    def fields(self) -> list[str]:
        return [
            name
            for name, info in self.model.model_fields.items()
            if name not in self.exclude and not _is_model(info.annotation)
        ]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def flat_fields(groups: list[FlatGroup]) -> dict[str, tuple[Any, FieldInfo]]:
    """`{flat name: (annotation, FieldInfo)}` for `pydantic.create_model`, copied from the nested
    declarations (default, bounds, description). Refuses two knobs with one flat name."""
    out: dict[str, tuple[Any, FieldInfo]] = {}
    for group in groups:
        for field in group.fields():
            name = group.flat_name(field)
            if name in out:
                raise ValueError(f"flat config name {name!r} is declared twice")
            info = group.model.model_fields[field]
            out[name] = (info.annotation, copy.deepcopy(info))
    return out


def nest_values(root: type[BaseModel], groups: list[FlatGroup], flat: Mapping[str, Any]) -> BaseModel:
    """The root model built from flat values (every flat name of `groups` must be in `flat`)."""
    tree: dict[str, Any] = {}
    for group in groups:
        node = tree
        for key in group.path:
            node = node.setdefault(key, {})
        for field in group.fields():
            node[field] = flat[group.flat_name(field)]
    return root.model_validate(tree)


def flatten_values(groups: list[FlatGroup], nested: Mapping[str, Any], where: str = "opd") -> dict[str, Any]:
    """The flat values that the nested mapping `nested` sets (the shape of the root model, e.g. the
    proxy's `opd:` block), keyed by flat name; only the keys it names. Raises ValueError for a key
    that no group exposes flat (a typo, or a secret such as `api_key` that the flat view excludes)."""
    by_path = {group.path: group for group in groups}
    out: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        group = by_path.get(path)
        for key, value in node.items():
            if isinstance(value, Mapping) and (*path, key) in by_path:
                walk(value, (*path, key))
            elif group is not None and key in group.fields():
                out[group.flat_name(key)] = value
            else:
                name = ".".join((where, *path, str(key)))
                hint = "; keep keys out of config files: name an environment variable in api_key_env"
                raise ValueError(f"{name} is not a setting here" + (hint if key == "api_key" else ""))

    walk(nested, ())
    return out
