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

from functools import lru_cache
from importlib import resources
from pathlib import Path

from paraplan.io.documents import read_document
from paraplan.io.parsed_cache import packaged_yaml
from paraplan.io.fields import Doc, as_integer, as_number, refuse
from paraplan.specs.errors import InputError

PRECISION_BITS = {8: "fp8", 16: "bf16", 32: "fp32"}


@lru_cache(maxsize=1)
def names() -> dict:
    return packaged_yaml((resources.files("paraplan.importers") / "amped_names.yaml").read_text())


def _number(value, name: str) -> float:
    """A finite number, or the number of a unit string such as "8 GB" (AMPeD: the unit is descriptive)."""
    where = f"amped: parameter {name}"
    if isinstance(value, str):
        head = value.split()[0] if value.split() else ""
        try:
            value = float(head)
        except ValueError:
            raise refuse(
                where, value, 'must be a number (optionally followed by a unit, e.g. "300 GB")'
            ) from None
    return as_number(value, where)


def _integer(value, name: str) -> int:
    """A parameter that counts something (layers, degrees, batch sizes): a whole number >= 1."""
    return as_integer(_number(value, name), f"amped: parameter {name}", minimum=1)


def resolve(config: dict, tables: dict | None) -> tuple[dict[str, object], list[str]]:
    """Every parameter's value (looked up where asked); refuses 'calculated' parameters."""
    values: dict[str, object] = {}
    notes: list[str] = []
    config_doc = Doc(config, "amped config")
    tables_doc = Doc(tables if tables is not None else {}, "amped lookup tables")
    for category in config_doc.keys():
        block = config_doc.get(category, None)
        if not isinstance(block, dict):
            continue
        block = config_doc.doc(category)
        lookup = block.doc("lookup_config", {})
        for name, par in block.doc("parameters", {}).data.items():
            if not isinstance(par, dict):
                values[name] = par
                continue
            par = Doc(par, block.at(f"parameters.{name}"))
            if par.get("calculated", False):
                raise InputError(
                    f"amped: {category}.{name} is 'calculated' by AMPeD's own functions; give its value"
                )
            if par.get("from_lookup_table", False):
                table_name, row_name = (
                    lookup.text("lookup_table_name", ""),
                    lookup.text("lookup_table_row", ""),
                )
                table = (
                    tables_doc.doc(table_name, {})
                    if table_name in tables_doc
                    else Doc({}, tables_doc.at(table_name))
                )
                row = table.doc(row_name, {}) if row_name in table else Doc({}, table.at(row_name))
                key = par.text("lookup_name", name)
                if key not in row:
                    raise InputError(
                        f"amped: {category}.{name}: {key!r} not found in lookup table "
                        f"{table_name!r} row {row_name!r}"
                    )
                values[name] = row.get(key, None)
            else:
                values[name] = par.get("value", None)
    return values, notes


def convert(config_path: Path, tables_path: Path | None = None) -> tuple[dict, dict, list[str]]:
    """(ModelSpec fields, PlanSpec fields, notes) from an AMPeD-style config."""
    config = read_document(config_path, "amped config")
    tables = read_document(tables_path, "amped lookup tables") if tables_path else None
    values, notes = resolve(config, tables)
    mapping = names()
    used: set[str] = set()
    model: dict[str, object] = {
        "name": Path(config_path).stem,
        "source": f"AMPeD-style config {Path(config_path).name}",
        **_model_fields(values, mapping, used),
    }
    raw = _plan_values(values, mapping, used)
    for key in ("layers", "hidden", "heads"):
        if key not in model:
            raise InputError(
                f"amped: no parameter maps to model.{key} (see importers/amped_names.yaml)"
            )
    model.setdefault("ffn_hidden", 4 * int(model["hidden"]))
    if "vocab" not in model:
        model["vocab"] = 50257
        notes.append("model: no vocabulary parameter; vocab=50257 (GPT-2) assumed")
    degree, intra, placement = _layout(raw)
    micro = int(raw.get("micro_batch", 1))
    n_micro = int(raw.get("microbatches", 1))
    plan = {
        "gpus": degree["dp"] * degree["tp"] * degree["pp"],
        "tp": degree["tp"],
        "pp": degree["pp"],
        "dp": degree["dp"],
        "micro_batch": micro,
        "global_batch": micro * n_micro * degree["dp"],
        "seq_length": int(raw.get("seq_length", 2048)),
        "dtype": PRECISION_BITS[int(raw.get("dtype_bits", 16))],
        "placement": placement,
    }
    notes.append(
        f"plan: intra-node degrees {intra} placed innermost (placement {placement}); the system's NVLink "
        "domain should hold their product"
    )
    if raw.get("dtype_bits", 16) == 16:
        notes.append("plan: 16-bit precision taken as bf16")
    unmapped = sorted(set(values) - used)
    if unmapped:
        notes.append(
            f"not mapped (AMPeD's accelerator/system model has no paraplan fields; give --system): {', '.join(unmapped)}"
        )
    assumed = sorted(
        n
        for sec in ("model", "plan")
        for n, s in mapping[sec].items()
        if n in used and s["origin"] == "assumed"
    )
    if assumed:
        notes.append(
            f"names read as assumed in amped_names.yaml (not in AMPeD's README): {', '.join(assumed)}"
        )
    return model, plan, notes


def _model_fields(values: dict, mapping: dict, used: set[str]) -> dict[str, object]:
    """The ModelSpec fields the mapped model parameters give (each name read goes into ``used``)."""
    model: dict[str, object] = {}
    for name, spec in mapping["model"].items():
        if name in values and values[name] is not None:
            model[spec["field"]] = _integer(values[name], name)
            used.add(name)
    return model


def _plan_values(values: dict, mapping: dict, used: set[str]) -> dict[str, float]:
    """The plan parameters by their amped_names.yaml field (degrees inside and across nodes, batch
    sizes, the sequence) and ``dtype_bits``, one precision for weights and activations."""
    raw: dict[str, float] = {}
    for name, spec in mapping["plan"].items():
        if name in values and values[name] is not None:
            used.add(name)
            if spec["field"] == "dtype":
                bits = _integer(values[name], name)
                if bits not in PRECISION_BITS:
                    raise InputError(
                        f"amped: {name}={bits} bits is not allowed; allowed: 8, 16, 32"
                    )
                raw.setdefault("dtype_bits", bits)
                if raw["dtype_bits"] != bits:
                    raise InputError(
                        "amped: weight_precision and activation_precision differ; paraplan has one training dtype"
                    )
            else:
                raw[spec["field"]] = _integer(values[name], name)
    return raw


def _layout(raw: dict) -> tuple[dict[str, int], dict[str, int], str]:
    """(degree of dp, tp and pp, their intra-node parts, the placement): the groups wholly inside a
    node innermost, then the one split over the node boundary (at most one), then the rest."""
    degree = {
        g: int(raw.get(f"{g}_intra", 1)) * int(raw.get(f"{g}_inter", 1)) for g in ("dp", "tp", "pp")
    }
    intra = {g: int(raw.get(f"{g}_intra", 1)) for g in ("tp", "dp", "pp")}
    inter = {g: int(raw.get(f"{g}_inter", 1)) for g in ("tp", "dp", "pp")}
    mixed = [g for g in intra if intra[g] > 1 and inter[g] > 1]
    if len(mixed) > 1:
        raise InputError(
            f"amped: {' and '.join(mixed)} both span inside and across nodes; paraplan's rank order "
            "can split at most one group over the node boundary"
        )
    rank = {
        g: (0 if inter[g] == 1 and intra[g] > 1 else 1 if g in mixed else 2)
        for g in ("tp", "dp", "pp")
    }
    order = sorted(("tp", "dp", "pp"), key=lambda g: (rank[g], ("tp", "dp", "pp").index(g)))
    return degree, intra, "-".join(order[:1] + ["cp"] + order[1:])
