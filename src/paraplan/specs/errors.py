"""Input errors as one line each: the field, the value and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True)
class Violation:
    """A rule an input or a plan breaks: which field, which value, and what is allowed."""

    field: str
    value: object
    rule: str

    def message(self) -> str:
        return f"{self.field}: {self.value!r} is not allowed; {self.rule}"


class InputError(ValueError):
    """Bad input; ``str(err)`` is one line meant for the user."""

    def __init__(self, message: str, violations: tuple[Violation, ...] = ()):
        super().__init__(message)
        self.violations = violations

    @classmethod
    def from_violations(cls, violations: list[Violation]) -> "InputError":
        first = violations[0].message()
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        return cls(first + more, tuple(violations))


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
