"""Input errors as one line each: the field, the value and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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


def input_error_from_pydantic(exc: ValidationError, prefix: str) -> InputError:
    """Turn pydantic's multi-line report into one line per the project's error convention."""
    violations = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err.get("loc", ()))
        field = f"{prefix}.{loc}" if loc else prefix
        msg = err.get("msg", "invalid")
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        violations.append(Violation(field, err.get("input"), msg))
    return InputError.from_violations(violations)


class UnsupportedDtype(InputError, KeyError):
    """A datatype the accelerator has no peak rate for. An InputError (one line, exit 2 in the CLI)
    that callers which look the rate up may also catch as the KeyError of a missing table entry."""

    __str__ = BaseException.__str__  # KeyError would quote the message
