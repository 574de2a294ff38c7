"""Typed rows of the study's JSON files: a dataclass read from its dict by its fields' names.

A row's field names are its JSON keys, in the file's order, so ``dataclasses.asdict`` writes
the same JSON back; ``from_json`` reads one at the boundary (a file, or a dict another module
returns), nested rows included, so that the code past it reads attributes, never keys.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class MissingField(KeyError):
    """A JSON object lacks a field its row has no default for; args[0] is the field's name."""

    @property
    def name(self) -> str:
        return str(self.args[0])


@functools.cache
def hints_of(cls: type) -> dict[str, Any]:
    """The resolved type of each field of a dataclass (its annotations are strings)."""
    return typing.get_type_hints(cls)


def from_json(cls: type[T], data: dict, strict: bool = False) -> T:
    """cls of a JSON object whose keys are its fields' names; a nested row, alone, in a list,
    as a dict's values or X | None, is read the same way. MissingField names the first field
    without a default that the object lacks; a key no field has is left out, or (strict: a row
    written back whole) a TypeError naming it."""
    hints = hints_of(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [key for key in data if key not in names]
    if strict and unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = value_of(data[f.name], hints[f.name], strict)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise MissingField(f.name)
    return cls(**values)


def value_of(value: Any, hint: Any, strict: bool = False) -> Any:
    """A JSON value as the type hint reads it: rows (alone, in lists, dict values, X | None)
    become dataclasses; anything else stays as JSON gave it."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return value_of(value, kinds[0], strict) if len(kinds) == 1 else value
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, strict)
    if origin is list and args:
        return [value_of(v, args[0], strict) for v in value]
    if origin is dict and len(args) == 2:
        return {k: value_of(v, args[1], strict) for k, v in value.items()}
    return value
