"""Sweep axes from the command line: ``--set PATH=V1,V2,...`` and ``--gpus 512,1024 | 256..16384x2``.

A ``--set`` path names a numeric leaf of the system schema relative to the system
(``accelerator.hbm_bandwidth``, ``node.gpus_per_domain``, ``accelerator.matrix_flops.bf16``) or of the
model schema under ``model.`` (``model.hidden``). Values are written as in the YAML files: unit
strings for quantities (``2TB/s``, ``80 GiB``, ``989 TFLOPS``, ``5 us``) or plain numbers (SI).
Every value is checked by re-building the spec with ``model_validate`` on a modified
``model_dump()``, so the rules of the schemas (units, ranges, model shape) apply unchanged.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from paraplan.specs.errors import InputError
from paraplan.specs.fields import get_in, set_in
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import MODULE_IMPLS, ModuleRole, SystemSpec
from paraplan.units import UnitError

MODEL_PREFIX = "model."
MAX_GPU_POINTS = 64


# ---- the numeric leaves of a schema ------------------------------------------------------------
def _strip(annotation):
    """Remove Annotated[...] and Optional[...] wrappers."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _is_number(annotation) -> bool:
    return annotation in (int, float)


def _walk(schema: type[BaseModel], leaf, prefix: str = "") -> dict:
    """Dotted path -> what ``leaf(path, annotation)`` makes of every leaf of ``schema`` (nested models walked)."""
    out: dict = {}
    for name, info in schema.model_fields.items():
        annotation = _strip(info.annotation)
        path = f"{prefix}{name}"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.update(_walk(annotation, leaf, path + "."))
        else:
            out.update(leaf(path, annotation))
    return out


def _numeric_leaf(path: str, annotation) -> dict[str, type]:
    """int or float for a numeric leaf (a dict keyed by a Literal expands per key)."""
    if _is_number(annotation):
        return {path: annotation}
    if get_origin(annotation) is dict:
        key, value = get_args(annotation)
        value = _strip(value)
        if get_origin(key) is Literal and _is_number(value):
            return {f"{path}.{k}": value for k in get_args(key)}
    return {}


@functools.cache
def numeric_fields() -> Mapping[str, type]:
    """Every numeric path ``--set`` accepts: system leaves, then ``model.`` leaves (walked once, read-only)."""
    fields = _walk(SystemSpec, _numeric_leaf)
    fields.update(_walk(ModelSpec, _numeric_leaf, MODEL_PREFIX))
    return types.MappingProxyType(fields)


# system choices ``--set`` leaves alone, and why: what the part is (its kernels and generation), and the kernel the
# catalog's attention fraction was measured with (a framework profile's attention_kernel converts the fraction with
# it, cost.frameworks.framework_system; setting the name alone would keep the old kernel's fraction)
FIXED_CHOICES = {
    "accelerator.architecture": "the part's generation; give the --system of that part",
    "accelerator.efficiency.attention_kernel": "the attention fraction is this kernel's; give a --framework "
    "profile whose attention_kernel names the kernel (the fraction is converted to it)",
}


@dataclass(frozen=True)
class Names:
    """The allowed names of a leaf that holds a tuple of them (``efficiency.cuda_graph_scope``'s Megatron-Core
    regions): one ``--set`` value joins them with '+' (a comma separates a sweep's values)."""

    names: tuple[str, ...]

    def __str__(self) -> str:
        return f"NAME+NAME+... of {', '.join(self.names)}"


def _names_of(annotation) -> tuple | None:
    """The allowed values of a choice leaf: a Literal's values; a union of a Literal and a tuple of another Literal
    (a word, or a list of names: ``efficiency.cuda_graph_scope``): the words and the Names; else None."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if get_origin(annotation) not in (Union, types.UnionType):
        return None
    out: tuple = ()
    for arg in get_args(annotation):
        if get_origin(arg) is Literal:
            out += get_args(arg)
        elif get_origin(arg) is tuple and get_origin(get_args(arg)[0]) is Literal:
            out += (Names(get_args(get_args(arg)[0])),)
        else:
            return None
    return out


def _choice_leaf(path: str, annotation) -> dict[str, tuple]:
    """The allowed values of a switch (bool: false, true) or choice (_names_of) leaf."""
    if annotation is bool:
        return {path: (False, True)}
    if (names := _names_of(annotation)) is not None:
        return {path: names}
    if annotation == dict[ModuleRole, str]:  # module_impl: its roles' names, MODULE_IMPLS
        return {f"{path}.{role}": impls for role, impls in MODULE_IMPLS.items()}
    return {}


@functools.cache
def choice_fields() -> Mapping[str, tuple]:
    """The system's switch and choice leaves ``estimate --set`` and ``search --set`` take, one value each (the
    run-wide mechanisms a framework profile writes into ``accelerator.efficiency.runtime``, NCCL's
    ``network.collnet_enabled``, ...): path -> allowed values, less FIXED_CHOICES (walked once, read-only). A
    sweep's axes stay numeric."""
    leaves = _walk(SystemSpec, _choice_leaf)
    return types.MappingProxyType({p: v for p, v in leaves.items() if p not in FIXED_CHOICES})


def _choice_text(values: tuple) -> str:
    return ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)


def _choice_value(path: str, text: str, allowed: tuple):
    """A switch's or choice's value as typed -> the schema's value (true/false -> bool); InputError otherwise."""
    if allowed == (False, True) and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if allowed != (False, True) and text in allowed:
        return text
    for names in (a for a in allowed if isinstance(a, Names)):
        parts = tuple(text.split("+"))
        if all(part in names.names for part in parts) and len(set(parts)) == len(parts):
            return parts
    raise InputError(f"--set {path}: {text!r} is not allowed; allowed: {_choice_text(allowed)}")


def _allowed_text() -> str:
    return ", ".join(numeric_fields())


# ---- applying values ------------------------------------------------------------------------
def _literal(text: str):
    """'8' -> 8, '2e12' -> 2e12 (SI, as a plain YAML number); anything else stays a string."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def _error_text(exc: ValidationError) -> str:
    err = exc.errors()[0]
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    loc = [str(part) for part in err.get("loc", ())]
    if loc and msg.startswith(f"{loc[-1]}: "):  # unit errors name the field already
        msg = msg[len(loc[-1]) + 2 :]
    return msg


def apply_overrides(
    model: ModelSpec, system: SystemSpec, overrides: dict[str, object]
) -> tuple[ModelSpec, SystemSpec]:
    """The model and system with ``overrides`` (path -> value as typed) applied and re-validated.

    Raises InputError naming ``--set PATH``, the value and the rule it breaks."""
    model_data = model.model_dump() if any(p.startswith(MODEL_PREFIX) for p in overrides) else None
    system_data = (
        system.model_dump() if any(not p.startswith(MODEL_PREFIX) for p in overrides) else None
    )
    for path, value in overrides.items():
        if path.startswith(MODEL_PREFIX):
            set_in(model_data, path[len(MODEL_PREFIX) :].split("."), value)
        else:
            set_in(system_data, path.split("."), value)
    try:
        new_model = ModelSpec.model_validate(model_data) if model_data is not None else model
    except ValidationError as exc:
        raise _value_error(
            [p for p in overrides if p.startswith(MODEL_PREFIX)],
            overrides,
            _error_text(exc),
            model.name,
        ) from None
    try:
        new_system = SystemSpec.model_validate(system_data) if system_data is not None else system
    except (ValidationError, UnitError) as exc:
        text = _error_text(exc) if isinstance(exc, ValidationError) else str(exc)
        raise _value_error(
            [p for p in overrides if not p.startswith(MODEL_PREFIX)], overrides, text, system.name
        ) from None
    return new_model, new_system


def _value_error(paths: list[str], overrides: dict, message: str, spec_name: str) -> InputError:
    if len(paths) == 1:
        return InputError(
            f"--set {paths[0]}: {overrides[paths[0]]!r} is not allowed for {spec_name}; {message}"
        )
    shown = ", ".join(f"{p}={overrides[p]!r}" for p in paths)
    return InputError(
        f"--set {' + '.join(paths)}: {shown} together are not allowed for {spec_name}; {message}"
    )


# ---- parsing the options -------------------------------------------------------------------
@dataclass(frozen=True)
class SetAxis:
    """One ``--set`` axis: a numeric field path and its values as typed (strings) and in SI units."""

    path: str
    values: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"path": self.path, "values": list(self.values)}


def parse_set(text: str, choices: bool = False) -> SetAxis:
    """``PATH=V1,V2,...`` -> SetAxis; the path must be a numeric leaf of the schemas, or with ``choices`` (estimate,
    search) also a switch or choice of the system (choice_fields), its values checked here."""
    if "=" not in text:
        raise InputError(
            f"--set: {text!r} is not PATH=VALUE[,VALUE...]; e.g. accelerator.hbm_bandwidth=2TB/s,4TB/s"
        )
    path, _, raw = text.partition("=")
    path = path.strip()
    fields = numeric_fields()
    if choices and path in FIXED_CHOICES:
        raise InputError(f"--set {path}: not settable; {FIXED_CHOICES[path]}")
    if choices and path in (switches := choice_fields()):
        values = tuple(v.strip() for v in raw.split(",") if v.strip())
        for value in values:
            _choice_value(path, value, switches[path])
        if not values:
            raise InputError(
                f"--set {path}: no value given; allowed: {_choice_text(switches[path])}"
            )
        return SetAxis(path, values)
    if path not in fields:
        known = _is_known_path(path)
        names = list(fields) + (list(choice_fields()) if choices else [])
        close = [] if known else difflib.get_close_matches(path, names, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        kind = "not a numeric field" if known else "unknown field"
        more = f"; switches and choices: {', '.join(choice_fields())}" if choices else ""
        raise InputError(
            f"--set {path}: {kind}{hint}; allowed (numeric fields): {_allowed_text()}{more}"
        )
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not values:
        raise InputError(f"--set {path}: no values given; write {path}=VALUE[,VALUE...]")
    if len(set(values)) != len(values):
        raise InputError(f"--set {path}: {raw!r} repeats a value; list each value once")
    return SetAxis(path, values)


def _is_known_path(path: str) -> bool:
    """True when ``path`` names a field of the schemas that is not numeric (a name, a flag, ...)."""
    schema: type[BaseModel] = SystemSpec
    keys = path.split(".")
    if keys[0] == "model":
        schema, keys = ModelSpec, keys[1:]
    for i, key in enumerate(keys):
        info = schema.model_fields.get(key)
        if info is None:
            return False
        annotation = _strip(info.annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            schema = annotation
            continue
        return i == len(keys) - 1 or get_origin(annotation) in (dict, tuple)
    return True


def parse_sets(texts: list[str], choices: bool = False) -> list[SetAxis]:
    axes = [parse_set(t, choices) for t in texts]
    seen: set[str] = set()
    for axis in axes:
        if axis.path in seen:
            raise InputError(f"--set {axis.path}: given twice; list all its values in one --set")
        seen.add(axis.path)
    return axes


def check_axes(model: ModelSpec, systems: list[SystemSpec], axes: list[SetAxis]) -> None:
    """Apply every value of every axis on its own to every system (and the model): one bad value,
    one clear line, before anything runs."""
    for axis in axes:
        for value in axis.values:
            for system in systems:
                apply_overrides(model, system, {axis.path: _literal(value)})
    if len(axes) > 1:  # values may also break a rule together (model.hidden with model.heads, ...)
        for system in systems:
            for combo in itertools.product(*(a.values for a in axes)):
                apply_overrides(model, system, override_values(axes, combo))


def override_values(axes: list[SetAxis], combo: tuple[str, ...]) -> dict[str, object]:
    """Path -> value ready for model_validate (plain numbers as numbers, unit strings as strings, a switch's
    true / false as a bool)."""
    switches = choice_fields() if any(a.path not in numeric_fields() for a in axes) else {}
    return {
        axis.path: _choice_value(axis.path, value, switches[axis.path])
        if axis.path in switches
        else _literal(value)
        for axis, value in zip(axes, combo)
    }


def si_value(model: ModelSpec, system: SystemSpec, path: str):
    """The value of ``path`` in the (already overridden) specs, in SI units."""
    if path.startswith(MODEL_PREFIX):
        return get_in(model.model_dump(), path[len(MODEL_PREFIX) :].split("."))
    return get_in(system.model_dump(), path.split("."))


def parse_gpus(text: str) -> tuple[int, ...]:
    """``512,1024,2048`` or ``256..16384x2`` (geometric: 256, 512, ..., 16384), items may be mixed."""
    out: list[int] = []
    form = "a comma list (512,1024,2048) or a geometric range START..STOPxFACTOR (256..16384x2)"
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if ".." in item:
            start_text, _, rest = item.partition("..")
            stop_text, sep, factor_text = rest.partition("x")
            try:
                start, stop = int(start_text), int(stop_text)
                factor = int(factor_text) if sep else None
            except ValueError:
                raise InputError(f"--gpus: {item!r} is not allowed; give {form}") from None
            if factor is None:
                raise InputError(f"--gpus: {item!r} has no factor; give {form}")
            if start < 1 or stop < start or factor < 2:
                raise InputError(
                    f"--gpus: {item!r} is not allowed; need 1 <= START <= STOP and FACTOR >= 2"
                )
            value = start
            while value <= stop:
                out.append(value)
                value *= factor
        else:
            try:
                value = int(item)
            except ValueError:
                raise InputError(f"--gpus: {item!r} is not allowed; give {form}") from None
            if value < 1:
                raise InputError(f"--gpus: {item!r} is not allowed; GPU counts must be positive")
            out.append(value)
    if not out:
        raise InputError(f"--gpus: {text!r} lists no GPU count; give {form}")
    if len(set(out)) != len(out):
        raise InputError(f"--gpus: {text!r} repeats a GPU count; list each once")
    if len(out) > MAX_GPU_POINTS:
        raise InputError(f"--gpus: {text!r} gives {len(out)} GPU counts; at most {MAX_GPU_POINTS}")
    return tuple(out)


__all__ = [
    "SetAxis",
    "apply_overrides",
    "check_axes",
    "choice_fields",
    "numeric_fields",
    "override_values",
    "parse_gpus",
    "parse_set",
    "parse_sets",
    "si_value",
]
