"""AMPeD-style configurations (config.json + lookup_tables.json) -> paraplan model and plan.

Parameters are ``{"value": ..., "calculated": bool, "from_lookup_table": bool, "lookup_name": str}``
objects in four categories; a category's ``lookup_config`` names the lookup table and row
(seeds/amped-readme.txt). Names are mapped by ``amped_names.yaml`` (data). Refused: parameters
marked ``calculated`` (AMPeD computes them with its own functions, which paraplan does not have),
and any parallel layout paraplan cannot place. Stated: every parameter that is not mapped, and the
accelerator/system category, whose core-count x frequency model has no paraplan fields (the
system comes from ``--system``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from paraplan.specs.errors import InputError

PRECISION_BITS = {8: "fp8", 16: "bf16", 32: "fp32"}


@lru_cache(maxsize=1)
def names() -> dict:
    return yaml.safe_load((resources.files("paraplan.importers") / "amped_names.yaml").read_text())


def _number(value, name: str) -> float:
    """A number, or the number of a unit string such as "8 GB" (AMPeD: the unit is descriptive)."""
    if isinstance(value, bool):
        raise InputError(f"amped: parameter {name}={value!r} is not a number")
    try:
        return float(value if isinstance(value, (int, float)) else str(value).split()[0])
    except (ValueError, IndexError):
        raise InputError(f"amped: parameter {name}={value!r} is not a number") from None


def resolve(config: dict, tables: dict | None) -> tuple[dict[str, object], list[str]]:
    """Every parameter's value (looked up where asked); refuses 'calculated' parameters."""
    values: dict[str, object] = {}
    notes: list[str] = []
    for category, block in config.items():
        if not isinstance(block, dict):
            continue
        lookup = block.get("lookup_config") or {}
        for name, par in (block.get("parameters") or {}).items():
            if not isinstance(par, dict):
                values[name] = par
                continue
            if par.get("calculated"):
                raise InputError(f"amped: {category}.{name} is 'calculated' by AMPeD's own functions; give its value")
            if par.get("from_lookup_table"):
                table = (tables or {}).get(lookup.get("lookup_table_name", ""), {})
                row = table.get(lookup.get("lookup_table_row", ""), {})
                key = par.get("lookup_name") or name
                if key not in row:
                    raise InputError(f"amped: {category}.{name}: {key!r} not found in lookup table "
                                     f"{lookup.get('lookup_table_name')!r} row {lookup.get('lookup_table_row')!r}")
                values[name] = row[key]
            else:
                values[name] = par.get("value")
    return values, notes


def convert(config_path: Path, tables_path: Path | None = None) -> tuple[dict, dict, list[str]]:
    """(ModelSpec fields, PlanSpec fields, notes) from an AMPeD-style config."""
    def read(path: Path) -> dict:
        try:
            return json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"amped: cannot read {str(path)!r}: {exc}") from None

    config = read(config_path)
    tables = read(tables_path) if tables_path else None
    values, notes = resolve(config, tables)
    mapping = names()
    model: dict[str, object] = {"name": Path(config_path).stem, "source": f"AMPeD-style config {Path(config_path).name}"}
    raw: dict[str, float] = {}
    used = set()
    for name, spec in mapping["model"].items():
        if name in values and values[name] is not None:
            model[spec["field"]] = int(_number(values[name], name))
            used.add(name)
    for name, spec in mapping["plan"].items():
        if name in values and values[name] is not None:
            used.add(name)
            if spec["field"] == "dtype":
                bits = int(_number(values[name], name))
                if bits not in PRECISION_BITS:
                    raise InputError(f"amped: {name}={bits} bits is not allowed; allowed: 8, 16, 32")
                raw.setdefault("dtype_bits", bits)
                if raw["dtype_bits"] != bits:
                    raise InputError("amped: weight_precision and activation_precision differ; paraplan has one training dtype")
            else:
                raw[spec["field"]] = _number(values[name], name)
    for key in ("layers", "hidden", "heads"):
        if key not in model:
            raise InputError(f"amped: no parameter maps to model.{key} (see importers/amped_names.yaml)")
    model.setdefault("ffn_hidden", 4 * int(model["hidden"]))
    if "vocab" not in model:
        model["vocab"] = 50257
        notes.append("model: no vocabulary parameter; vocab=50257 (GPT-2) assumed")
    degree = {g: int(raw.get(f"{g}_intra", 1)) * int(raw.get(f"{g}_inter", 1)) for g in ("dp", "tp", "pp")}
    intra = {g: int(raw.get(f"{g}_intra", 1)) for g in ("tp", "dp", "pp")}
    inter = {g: int(raw.get(f"{g}_inter", 1)) for g in ("tp", "dp", "pp")}
    mixed = [g for g in intra if intra[g] > 1 and inter[g] > 1]
    if len(mixed) > 1:
        raise InputError(f"amped: {' and '.join(mixed)} both span inside and across nodes; paraplan's rank order "
                         "can split at most one group over the node boundary")
    # innermost first: groups wholly inside a node, then the one split over the boundary, then the rest
    rank = {g: (0 if inter[g] == 1 and intra[g] > 1 else 1 if g in mixed else 2) for g in ("tp", "dp", "pp")}
    order = sorted(("tp", "dp", "pp"), key=lambda g: (rank[g], ("tp", "dp", "pp").index(g)))
    placement = "-".join(order[:1] + ["cp"] + order[1:])
    micro = int(raw.get("micro_batch", 1))
    n_micro = int(raw.get("microbatches", 1))
    plan = {
        "gpus": degree["dp"] * degree["tp"] * degree["pp"], "tp": degree["tp"], "pp": degree["pp"], "dp": degree["dp"],
        "micro_batch": micro, "global_batch": micro * n_micro * degree["dp"],
        "seq_length": int(raw.get("seq_length", 2048)),
        "dtype": PRECISION_BITS[int(raw.get("dtype_bits", 16))],
        "placement": placement,
    }
    notes.append(f"plan: intra-node degrees {intra} placed innermost (placement {placement}); the system's NVLink "
                 "domain should hold their product")
    if raw.get("dtype_bits", 16) == 16:
        notes.append("plan: 16-bit precision taken as bf16")
    unmapped = sorted(set(values) - used)
    if unmapped:
        notes.append(f"not mapped (AMPeD's accelerator/system model has no paraplan fields; give --system): {', '.join(unmapped)}")
    assumed = sorted(n for sec in ("model", "plan") for n, s in mapping[sec].items() if n in used and s["origin"] == "assumed")
    if assumed:
        notes.append(f"names read as assumed in amped_names.yaml (not in AMPeD's README): {', '.join(assumed)}")
    return model, plan, notes
