"""Input errors as one line each: the field, the value and what is allowed."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal, Union, get_args, get_origin

if TYPE_CHECKING:  # an annotation only: the command line's start-up loads no pydantic (issue 31)
    from pydantic import ValidationError


@dataclass(frozen=True)
class Violation:
    """A rule an input or a plan breaks: which field, which value, and what is allowed."""

    field: str
    value: object
    rule: str

    def message(self) -> str:
        if isinstance(
            self.value, dict
        ):  # a rule between fields: the whole mapping would bury the rule
            return f"{self.field}: {self.rule}"
        return f"{self.field}: {_short(self.value)} is not allowed; {self.rule}"


def _short(value: object, limit: int = 80) -> str:
    """repr of a value, cut to ``limit`` characters and free of control characters (escape codes)."""
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


MAX_SHOWN_VIOLATIONS = 12  # fields an error line names; the rest are counted (issue 37)


class InputError(ValueError):
    """Bad input; ``str(err)`` is one line meant for the user."""

    def __init__(self, message: str, violations: tuple[Violation, ...] = ()):
        super().__init__(message)
        self.violations = violations

    @classmethod
    def from_violations(cls, violations: list[Violation]) -> "InputError":
        """All violations on one line; rules broken by one field and value are joined with "and"."""
        groups: dict[tuple[str, str], list[Violation]] = {}
        for v in violations:
            groups.setdefault((v.field, repr(v.value)), []).append(v)
        parts = []
        for group in list(groups.values())[:MAX_SHOWN_VIOLATIONS]:
            first = group[0]
            rules = " and ".join(dict.fromkeys(v.rule for v in group))
            parts.append(Violation(first.field, first.value, rules).message())
        if len(groups) > MAX_SHOWN_VIOLATIONS:  # a document of 20,000 unknown keys: one short line
            parts.append(f"and {len(groups) - MAX_SHOWN_VIOLATIONS:,} more")
        return cls("; ".join(parts), tuple(violations))


class UnknownNameError(InputError):
    """A catalog name the catalog does not have (paraplan validate reports such a case unsupported)."""


def input_error_from_pydantic(
    exc: ValidationError, prefix: str, schema: type | None = None
) -> InputError:
    """Turn pydantic's multi-line report into one line per the project's error convention. With the
    validated ``schema`` (a pydantic model), a union field's branch errors, which pydantic reports one per
    branch under a loc part of its own (``literal['none',...]``, ``tuple[...]``), are one violation: the
    field, the value given and every branch's allowed values (``union_allowed``)."""
    violations, unions = [], {}
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        at = _union_at(schema, loc) if schema is not None else None
        if at is not None:  # the branch errors of one union field: one violation, the whole value
            depth, union = at
            key = loc[:depth]
            if key not in unions or len(loc) < unions[key][0]:
                unions[key] = (len(loc), err.get("input"), union)
            continue
        field = ".".join([prefix, *map(str, loc)])
        msg = err.get("msg", "invalid")
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        violations.append(Violation(field, err.get("input"), msg))
    for key, (_, value, union) in unions.items():
        field = ".".join([prefix, *map(str, key)])
        violations.append(Violation(field, value, f"allowed: {union_allowed(union)}"))
    return InputError.from_violations(violations)


def _members(tp) -> tuple:
    """The types of a union annotation, None left out (pydantic reports ``X | None`` as X, no branch)."""
    if get_origin(tp) not in (Union, types.UnionType):
        return (tp,)
    return tuple(arg for arg in get_args(tp) if arg is not type(None))


def _union_at(schema, loc: tuple) -> tuple[int, object] | None:
    """(where in ``loc`` pydantic names a union's branch, the union) along ``loc`` from the model
    ``schema`` through model fields, mapping values and sequence items; None where ``loc`` meets no
    union before its end (an error of the union's own validator names the field alone) or the union has
    no words (union_allowed)."""
    tp = schema
    for depth, part in enumerate(loc):
        while get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        members = _members(tp)
        # a union: in words (union_allowed), or left to pydantic's own branch errors (a union of models)
        if len(members) > 1:
            return (depth, tp) if union_allowed(tp) is not None else None
        tp = members[0]
        fields = getattr(tp, "model_fields", None)
        if isinstance(fields, dict):
            if part not in fields:
                return None
            tp = fields[part].annotation
        elif get_origin(tp) in (dict, Mapping) and len(get_args(tp)) == 2:
            tp = get_args(tp)[1]
        elif get_origin(tp) in (tuple, list, Sequence) and get_args(tp):
            args = get_args(tp)
            tp = args[0] if len(args) == 2 and args[1] is Ellipsis or len(args) == 1 else None
            if tp is None and isinstance(part, int) and part < len(args):
                tp = args[part]
        else:
            return None
    return None


_SCALARS = {float: "a number", int: "a whole number", str: "a text", bool: "true or false"}


def _member_words(member) -> str | None:
    """A union member in words: a Literal's values, ``a list of`` a sequence of a Literal's values, a bare
    scalar type (_SCALARS); None for anything else (a model, a constrained number), whose own errors say
    more than its name would."""
    if get_origin(member) is Literal:
        return ", ".join(map(str, get_args(member)))
    if get_origin(member) in (tuple, list, Sequence) and get_args(member):
        item = get_args(member)[0]
        if get_origin(item) is Literal:
            return "a list of " + ", ".join(map(str, get_args(item)))
    return _SCALARS.get(member) if isinstance(member, type) else None


def union_allowed(union) -> str | None:
    """What a union annotation allows, in words (``none, attention, layer, full_iteration, or a list of
    attn, mlp, moe, moe_router, moe_preprocess``); None where a member has no words (_member_words)."""
    parts = [_member_words(member) for member in _members(union)]
    if None in parts:
        return None
    return ", ".join(parts[:-1]) + ", or " + parts[-1] if len(parts) > 1 else parts[0]


class UnsupportedDtype(InputError, KeyError):
    """A datatype the accelerator has no peak rate for. An InputError (one line, exit 2 in the CLI)
    that callers which look the rate up may also catch as the KeyError of a missing table entry."""

    __str__ = BaseException.__str__  # KeyError would quote the message
