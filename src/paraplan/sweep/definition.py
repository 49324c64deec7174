"""A sweep's definition as a document, and a sweep run in memory.

The document is the ``sweep`` object ``paraplan sweep`` writes into ``config.json`` and
``sweep.json`` (:meth:`SweepConfig.to_dict`): model, systems, gpus, sets, seq_length, global_batch
or max_global_batch, top, dtype, attention, objective, no_offload, default_overlap,
default_placement, vary_split, restrictions, tokens, framework, goodput. A whole ``config.json`` or
``sweep.json`` (the definition under ``sweep``) is read too. Here each field's type is checked; the
rules of the values are SweepConfig.check's, the same as for the options of the same name (one-line
InputError naming ``sweep.<field>``).

``run_in_memory`` searches every point in this process (``sweep.point.run_point``, the records of
``sweep.json``) and returns the sweep.json document without writing a file.
"""

from __future__ import annotations

from collections.abc import Callable

from paraplan.specs.errors import InputError
from paraplan.sweep.params import parse_gpus, parse_set
from paraplan.sweep.point import run_point
from paraplan.sweep.run import SweepConfig, prepare, results_document

TEXT_FIELDS = ("model", "dtype", "attention", "objective")
INT_FIELDS = ("seq_length", "global_batch", "max_global_batch", "top")
SWITCH_FIELDS = ("no_offload", "default_overlap", "default_placement", "vary_split")
OTHER_FIELDS = ("systems", "gpus", "sets", "restrictions", "tokens", "framework", "goodput")
FIELDS = TEXT_FIELDS + INT_FIELDS + SWITCH_FIELDS + OTHER_FIELDS


def _error(name: str, message: str) -> InputError:
    return InputError(f"sweep.{name}: {message}")


def _int(data: dict, name: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _error(name, f"{value!r} is not an integer")
    return value


def _gpus(value) -> tuple[int, ...]:
    if isinstance(value, str):
        return parse_gpus(value)
    if not isinstance(value, list) or not value:
        raise _error("gpus", f"{value!r} is not a list of GPU counts (or text such as 64..512x2)")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise _error("gpus", f"{value!r} must list positive integers")
    return tuple(value)


def _sets(value) -> tuple:
    if not isinstance(value, list):
        raise _error("sets", f"{value!r} is not a list of {{path, values}} objects")
    axes = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"path", "values"}:
            raise _error("sets", f"{item!r} is not an object with path and values")
        values = item["values"]
        if not isinstance(values, list):
            raise _error("sets", f"{item['path']!r}: values {values!r} are not a list")
        axes.append(parse_set(f"{item['path']}={','.join(str(v) for v in values)}"))
    return tuple(axes)


def _restrictions(value) -> dict:
    if not isinstance(value, dict):
        raise _error("restrictions", f"{value!r} is not an object of axis -> list of values")
    out = {}
    for axis, values in value.items():
        if not isinstance(values, list) or not values:
            raise _error("restrictions", f"{axis}: {values!r} is not a non-empty list")
        out[axis] = tuple(values)
    return out


def _catalog_only(data: dict, names: dict) -> None:
    """Model, systems and framework must be catalog names (``names``: api.catalog_names) where the
    definition came from a request: a file name in it is never read."""
    systems = data["systems"] if isinstance(data["systems"], list) else [data["systems"]]
    given = [("model", "models", [data["model"]]), ("systems", "systems", systems)]
    given.append(("framework", "frameworks", [data["framework"]] if data.get("framework") else []))
    for name, kind, values in given:
        for value in values:
            if value not in names[kind]:
                raise _error(name, f"{value!r} is not in the catalog; name a catalog {kind[:-1]}")


def sweep_config(data, names: dict | None = None) -> SweepConfig:
    """The SweepConfig of a sweep definition document (module doc); InputError naming the field.
    With ``names`` (the catalog's, api.catalog_names) only catalog names are accepted."""
    if isinstance(data, dict) and isinstance(data.get("sweep"), dict):
        data = data["sweep"]
    if not isinstance(data, dict):
        raise InputError("sweep: the file is not a mapping of the sweep's fields")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise _error(unknown[0], f"is not a field of a sweep; allowed: {', '.join(FIELDS)}")
    for name in ("model", "systems", "gpus"):
        if data.get(name) in (None, "", []):
            raise _error(name, "missing")
    for name in TEXT_FIELDS + ("framework",):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise _error(name, f"{data[name]!r} is not text")
    for name in SWITCH_FIELDS:
        if not isinstance(data.get(name, False), bool):
            raise _error(name, f"{data[name]!r} is not true or false")
    if names is not None:
        _catalog_only(data, names)
    systems = data["systems"]
    systems = [systems] if isinstance(systems, str) else systems
    if not isinstance(systems, list) or not all(isinstance(s, str) for s in systems):
        raise _error("systems", f"{systems!r} is not a list of system names")
    tokens = data.get("tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, (int, float))):
        raise _error("tokens", f"{tokens!r} is not a number of tokens")
    if data.get("goodput") is not None and not isinstance(data["goodput"], dict):
        raise _error("goodput", f"{data['goodput']!r} is not an object of goodput inputs")
    defaults = SweepConfig("", (), (), 0)
    config = SweepConfig(
        model=data["model"],
        systems=tuple(systems),
        gpus=_gpus(data["gpus"]),
        seq_length=_int(data, "seq_length") or 2048,
        sets=_sets(data.get("sets", [])),
        global_batch=_int(data, "global_batch"),
        max_global_batch=_int(data, "max_global_batch"),
        top=_int(data, "top") or defaults.top,
        **{name: data.get(name) or getattr(defaults, name) for name in TEXT_FIELDS[1:]},
        **{name: data.get(name, False) for name in SWITCH_FIELDS},
        restrictions=_restrictions(data.get("restrictions", {})),
        tokens=None if tokens is None else float(tokens),
        framework=data.get("framework"),
        goodput=data.get("goodput"),
    )
    config.check(name=lambda field_name: f"sweep.{field_name}")  # the rules: SweepConfig.check
    return config


def run_in_memory(config: SweepConfig, progress: Callable | None = None) -> dict:
    """The sweep.json document of ``config`` (every point searched here, in cartesian order), no
    file written; ``progress(done, total, phase)`` after each point."""
    prepared = prepare(config)
    total = len(prepared.tasks)
    records = []
    for done, task in enumerate(prepared.tasks):
        if progress is not None:
            progress(done, total, "sweep points")
        records.append(run_point(task))
    if progress is not None:
        progress(total, total, "sweep points")
    return results_document(config, records)
