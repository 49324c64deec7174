"""A framework's start-up checks, kept as facts (``export/facts/<name>_checks.yaml``: the condition,
the file and line of the framework's source at a release), evaluated on an export.

An exporter writes its arguments (Megatron-LM's ``--flag value`` list) or its keys (NeMo's recipe
attributes, torchtitan's ``section.field``, DeepSpeed's dotted JSON paths), then :func:`failed_checks`
or :func:`failed_key_checks` tells which checks they break; the export is refused naming the first one
(:func:`refuse_failed`, :func:`refuse_failed_keys`), so a launch that would stop at start-up is never
written. The condition language is described at the top of each facts file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Mapping

from paraplan.export.common import FOLDER, ExportRefused, FrameworkArgs, check_names, framework_args
from paraplan.io.parsed_cache import packaged_yaml


@dataclass(frozen=True)
class Release:
    """The framework source a facts file was read from: repository, release tag, the tag's commit."""

    repo: str
    tag: str
    commit: str

    def at(self, check: dict) -> str:
        """``repo@tag`` of a check: this release, or the one the check names (a check read from
        another repository)."""
        return f"{check.get('repo', self.repo)}@{check.get('tag', self.tag)}"


@dataclass(frozen=True)
class StartupChecks:
    """A framework's start-up checks at one release: provenance, argument defaults, the checks."""

    release: Release
    defaults: dict[str, Any]
    checks: tuple[dict, ...]
    environment: dict[str, dict[str, str]]  # variable -> {check id: the value the check needs}
    # variables the framework's own launcher sets without a start-up check asserting them: each
    # {variable, value, if, file, line, says}, set where its `if` holds (launch_variables)
    settings: tuple[dict, ...] = ()

    def where(self, check: dict) -> str:
        """``repo@tag file:line`` of a check (``Release.at``)."""
        return f"{self.release.at(check)} {check['file']}:{check['line']}"


@lru_cache(maxsize=None)
def startup_checks(name: str) -> StartupChecks:
    """The kept checks ``export/facts/<name>_checks.yaml``."""
    text = (FOLDER / "facts" / f"{name}_checks.yaml").read_text()
    data = packaged_yaml(text)
    return StartupChecks(
        release=Release(data["repo"], data["tag"], data["commit"]),
        defaults={k: v["value"] for k, v in (data.get("defaults") or {}).items()},
        checks=tuple(data["checks"]),
        environment={k: dict(v) for k, v in (data.get("environment") or {}).items()},
        settings=tuple(data.get("settings") or ()),
    )


def argument_groups(args: list[str]) -> list[tuple[str, list[str]]]:
    """(flag, the values after it) of an argument list (flag, values..., flag, ...)."""
    out, i = [], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not str(args[j]).startswith("--"):
            j += 1
        out.append((args[i], list(args[i + 1 : j])))
        i = j
    return out


def argument_map(args: list[str]) -> dict[str, Any]:
    """{flag: value} of an argument list (argument_groups); a switch maps to True."""
    return {
        flag: True if not values else values[0] if len(values) == 1 else tuple(values)
        for flag, values in argument_groups(args)
    }


@lru_cache(maxsize=16)
def _given(args: tuple[str, ...]) -> Mapping[str, Any]:
    """argument_map, read once per argument list (an export asks for its environment and its checks)."""
    return MappingProxyType(argument_map(list(args)))


class _Env:
    """What a condition reads: the arguments or keys given, the framework's defaults, the environment,
    and the launch's context (values a launch has outside the checked keys: the world size, the
    model's layer count, a callback)."""

    def __init__(
        self,
        given: Mapping[str, Any],
        defaults: Mapping[str, Any],
        env: Mapping[str, str],
        context: Mapping[str, Any] | None = None,
    ):
        self.given, self.defaults, self.env = given, defaults, env
        self.context = context or {}

    def value(self, expr: Any) -> Any:
        """An integer, a flag's value (given or default; None when neither), {key: K} a key's value
        (the same), {context: C}, {present: F} (1 or 0), {add: [...]}, {mul: [...]} or
        {div_ceil: [a, b]}; numbers given as text are read as numbers."""
        if isinstance(expr, dict):
            if "present" in expr:
                return int(expr["present"] in self.given)
            if "key" in expr:
                return self._number(self.given.get(expr["key"], self.defaults.get(expr["key"])))
            if "context" in expr:
                return self._number(self.context.get(expr["context"]))
            op = next(k for k in ("add", "mul", "div_ceil") if k in expr)
            parts = [self.value(e) for e in expr[op]]
            if any(p is None for p in parts):
                return None
            if op == "div_ceil":
                return -(-int(parts[0]) // int(parts[1])) if int(parts[1]) else None
            out = 0 if op == "add" else 1
            for p in parts:
                out = out + int(p) if op == "add" else out * int(p)
            return out
        if isinstance(expr, str) and expr.startswith("--"):
            return self._number(self.given.get(expr, self.defaults.get(expr)))
        return expr

    @staticmethod
    def _number(raw: Any) -> Any:
        """Text that reads as an integer, as one; anything else as it is."""
        try:
            return int(raw) if isinstance(raw, str) else raw
        except ValueError:
            return raw

    def holds(self, cond: dict) -> bool:
        """Is the condition true for these arguments and environment?"""
        if "all" in cond:
            return all(self.holds(c) for c in cond["all"])
        if "any" in cond:
            return any(self.holds(c) for c in cond["any"])
        if "not" in cond:
            return not self.holds(cond["not"])
        if "env" in cond:
            have = self.env.get(cond["env"])
            return have == str(cond["eq"]) if "eq" in cond else have != str(cond["ne"])
        if "flag" in cond:
            return self.given.get(cond["flag"], False) not in (False, None)
        return _compare(self.value(cond["value"]), cond, self.value)


def _compare(left: Any, cond: dict, value) -> bool:
    """``left`` against the one comparison of ``cond`` (eq, ne, ge, gt, multiple_of); a missing number fails."""
    for op in ("eq", "ne", "ge", "gt", "multiple_of"):
        if op not in cond:
            continue
        right = value(cond[op])
        if op == "eq":
            return str(left) == str(right)
        if op == "ne":
            return str(left) != str(right)
        if not (_integer(left) and _integer(right)):  # a missing or non-numeric value ('auto')
            return False
        if op == "ge":
            return int(left) >= int(right)
        if op == "gt":
            return int(left) > int(right)
        return int(right) != 0 and int(left) % int(right) == 0
    raise ValueError(f"a start-up check condition without a comparison: {cond}")


def _integer(value: Any) -> bool:
    """Is ``value`` an integer (or text of one)?"""
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, float) or value == int(value)


def failed_checks(name: str, args: list[str], env: Mapping[str, str]) -> list[dict]:
    """The checks of framework ``name`` that ``args`` (a launch's arguments) with the environment
    ``env`` break, in the facts file's order."""
    return failed_key_checks(name, _given(tuple(args)), env)


def failed_key_checks(
    name: str,
    given: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    context: Mapping[str, Any] | None = None,
) -> list[dict]:
    """The checks of framework ``name`` that the keys ``given`` ({name: value}), the environment and
    the launch's ``context`` break, in the facts file's order."""
    facts = startup_checks(name)
    state = _Env(given, facts.defaults, env or {}, context)
    return [c for c in facts.checks if state.holds(c["if"]) and not state.holds(c["then"])]


def launch_environment(name: str, args: list[str]) -> dict[str, str]:
    """The environment a launch of ``args`` needs ({variable: value}, ``launch_variables``)."""
    return {v["variable"]: v["value"] for v in launch_variables(name, _given(tuple(args)))}


def launch_variables(
    name: str, given: Mapping[str, Any], context: Mapping[str, Any] | None = None
) -> list[dict]:
    """The environment variables a launch with the arguments or keys ``given`` needs, each
    {variable, value, where}: from the facts' ``environment``, the value of the first check
    listed under the variable whose condition (``if``) holds; then each of the facts' ``settings``
    (what the framework's own launcher sets) whose ``if`` holds, for a variable not set yet."""
    facts = startup_checks(name)
    state = _Env(given, facts.defaults, {}, context)
    checks = {c["id"]: c for c in facts.checks}
    out: dict[str, dict] = {}
    for variable, values in facts.environment.items():
        for check, value in values.items():
            if state.holds(checks[check]["if"]):
                c = checks[check]
                out[variable] = _variable(variable, value, facts.where(c))
                break
    for entry in facts.settings:
        if entry["variable"] not in out and state.holds(entry["if"]):
            out[entry["variable"]] = _variable(
                entry["variable"], entry["value"], facts.where(entry)
            )
    return list(out.values())


def _variable(variable: str, value: Any, where: str) -> dict:
    return {"variable": variable, "value": str(value), "where": where}


def refuse_failed(
    name: str, label: str, plan: Any, args: list[str], env: Mapping[str, str]
) -> None:
    """Refuse (one line) an export that breaks a start-up check: the plan knob and its value, the
    check's id, what it says and where."""
    _refuse(name, label, plan, failed_checks(name, args, env))


def refuse_failed_keys(
    name: str,
    label: str,
    plan: Any,
    given: Mapping[str, Any],
    context: Mapping[str, Any] | None = None,
) -> None:
    """refuse_failed for a framework configured by keys (NeMo, torchtitan, DeepSpeed)."""
    _refuse(name, label, plan, failed_key_checks(name, given, {}, context))


def _refuse(name: str, label: str, plan: Any, broken: list[dict]) -> None:
    """Refuse naming the first broken check, if any."""
    if broken:
        c = broken[0]
        knob = c["knob"]
        raise ExportRefused(
            f"plan.{knob}={getattr(plan, knob)!r} cannot start in {label}: check {c['id']!r} fails"
            f" ({' '.join(c['says'].split())}; {startup_checks(name).where(c)})"
        )


def checked_keys(
    name: str, plan: Any, pairs: list[tuple[str, Any]], context: Mapping[str, Any]
) -> FrameworkArgs:
    """A keyed export's pairs checked: every key in the kept list (common.check_names), then the
    start-up checks (refuse_failed_keys); the framework's kept list."""
    fw = framework_args(name)
    check_names(fw, [k for k, _ in pairs])
    refuse_failed_keys(name, fw.label, plan, dict(pairs), context)
    return fw
