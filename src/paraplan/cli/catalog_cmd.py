"""``paraplan models`` and ``paraplan systems``: the catalogs; ``paraplan schema``: the input file schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable

import typer

from paraplan.cli.app import WidthOption, _stdout, app
from paraplan.cli.declare import optional, switch
from paraplan.cli.options import JsonOption
from paraplan.specs.errors import InputError
from paraplan.units import GiB

if TYPE_CHECKING:
    from paraplan.specs.system import AcceleratorSpec


def _model_row(name: str, model=None) -> dict:
    from paraplan.catalog import load_model
    from paraplan.graph.params import parameter_counts

    m = model if model is not None else load_model(name)
    counts = parameter_counts(m)
    return {
        "name": m.name,
        "params_b": counts.total / 1e9,
        "active_params_b": counts.active / 1e9,
        "parameters": counts.to_dict(),
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.n_kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "vocab": m.vocab,
        "mlp": m.mlp,
        "source": m.source,
    }


# effective values of the fields whose default depends on others (ModelSpec's rules)
_DERIVED = {
    "kv_heads": ("n_kv_heads", "= heads"),
    "head_dim": ("d_head", "= hidden / heads"),
    "bias": ("has_bias", "gelu models: yes, swiglu: no"),
    "dropout": ("has_dropout", "gelu models: yes, swiglu: no"),
    "position_embedding": ("learned_positions", "gelu models: learned, swiglu: rope"),
}


def _read_as(ref: str, model) -> str:
    from paraplan.catalog import model_names

    if ref in model_names():
        return f"catalog entry {ref!r} (paraplan's model schema)"
    if model.source.startswith("Hugging Face"):
        return f"{model.source}, from {ref!r}"
    return f"paraplan model file {ref!r} (paraplan's model schema)"


def _model_fields_table(ref: str, model):
    from paraplan.graph.params import format_parameters, parameter_counts
    from paraplan.report.text_table import simple_table

    table = simple_table(
        f"How {ref} was read: {_read_as(ref, model)}",
        "field",
        "value",
        "from",
        numeric_from=3,
        foldable=(1, 2),
    )
    given = model.model_fields_set
    hf = model.source.startswith("Hugging Face")
    for name in type(model).model_fields:
        value = getattr(model, name)
        how = (
            ("config.json, mapped by paraplan.catalog.hf" if hf else "the file")
            if name in given
            else "default"
        )
        if name == "name" and hf:
            how = "the directory (or file) name"
        if name in _DERIVED and value is None:
            attr, rule = _DERIVED[name]
            effective = getattr(model, attr)
            if name == "position_embedding":
                effective = "learned" if effective else "rope"
            value, how = effective, f"default ({rule})"
        table.add_row(name, str(value).lower() if isinstance(value, bool) else str(value), how)
    counts = parameter_counts(model)
    params = simple_table(
        f"Parameters of {model.name} (graph.params.parameter_counts)",
        "part",
        "parameters",
        numeric_from=1,
    )
    params.add_row(f"{model.layers} decoder layers", format_parameters(counts.layers))
    params.add_row(
        "embedding" + (" (+ learned positions)" if model.learned_positions else ""),
        format_parameters(counts.embedding),
    )
    params.add_row(
        "LM head" + (" (tied: final norm only)" if model.tie_embeddings else ""),
        format_parameters(counts.head),
    )
    params.add_section()
    params.add_row("total", f"{format_parameters(counts.total)} ({counts.total:,.0f})")
    params.add_row("active per token", f"{format_parameters(counts.active)} ({counts.active:,.0f})")
    return [table, "", params]


@app.command()
def models(
    as_json: JsonOption = False,
    model: optional(
        str,
        "--model",
        "-m",
        help="show how this catalog name or file (YAML/JSON, Hugging Face config.json) is "
        "read: every field, given or default, and the parameter counts",
    ) = None,
    width: WidthOption = None,
) -> None:
    """List the model catalog (parameters, total and active, and shape), or show how one model is read."""
    from paraplan.catalog import load_model, model_names

    if model is not None:
        spec = load_model(model, field="model")
        if as_json:
            row = _model_row(spec.name, spec)
            row["read_as"] = _read_as(model, spec)
            row["fields"] = spec.model_dump()
            row["given"] = sorted(spec.model_fields_set)
            print(json.dumps(row, indent=2))
            return
        _stdout(width).print(*_model_fields_table(model, spec))
        return
    _print_catalog(
        [_model_row(n) for n in model_names()],
        as_json,
        width,
        "Models (paraplan estimate --model NAME); parameters in billions",
        MODEL_COLUMNS,
    )


def _system_row(name: str) -> dict:
    from paraplan.catalog import load_system

    s = load_system(name)
    acc = s.accelerator
    try:
        bf16 = acc.peak_matrix_flops("bf16")
    except KeyError:
        bf16 = None
    return {
        "name": name,
        "gpu": acc.name,
        "hbm_gib": acc.hbm_capacity / GiB,
        "hbm_tb_per_s": acc.hbm_bandwidth / 1e12,
        "peak_bf16_tflops": None if bf16 is None else bf16 / 1e12,
        "domain_size": s.node.gpus_per_domain,
        "nvlink_gb_per_s": s.node.nvlink_bandwidth / 1e9,
        "nic_gb_per_s": s.network.nic_bandwidth / 1e9,
        "price_per_gpu_hour": s.price_per_gpu_hour,
        "source": s.source,
    }


def _tables_row(name: str, acc: AcceleratorSpec) -> dict:
    """A catalog system's kernel tables (``acc``: its accelerator): the one it prices with, and the shipped ones
    measured on its GPU."""
    from paraplan.cost.kernel_tables import tables_measured_on

    measured = tables_measured_on(acc.name)
    if acc.kernel_tables:
        use = f"table {acc.kernel_tables}"
    elif measured:
        use = "analytical (table opt-in: accelerator.kernel_tables or paraplan calibrate)"
    else:
        use = "analytical fallback"
    return {"name": name, "gpu": acc.name, "kernel_tables": measured, "prices_with": use}


TABLE_COLUMNS = (
    ("name", lambda row: row["name"]),
    ("gpu", lambda row: row["gpu"]),
    ("measured kernel tables", lambda row: ", ".join(row["kernel_tables"]) or "-"),
    ("kernels priced by", lambda row: row["prices_with"]),
)


def _shipped_table_row(name: str, systems: list[dict], attached: dict[str, str | None]) -> dict:
    """A shipped kernel table: the catalog GPUs it was measured on, the catalog systems that attach it by
    default (``attached``: each system's accelerator.kernel_tables) and those it is opt-in on (rows of
    _tables_row), or none: attached to no catalog system."""
    from paraplan.cost.kernel_tables import table_provenance

    gpus = table_provenance(name).get("accelerators", [])
    default = [r["name"] for r in systems if attached[r["name"]] == name]
    opt_in = [r["name"] for r in systems if r["gpu"] in gpus and r["name"] not in default]
    if default:
        status = "attached by default: " + ", ".join(default)
        status += "; opt-in: " + ", ".join(opt_in) if opt_in else ""
    elif opt_in:
        status = "opt-in: " + ", ".join(opt_in)
    else:
        status = "not attached to any catalog system (opt-in by name: accelerator.kernel_tables)"
    return {
        "table": name,
        "measured_on": gpus,
        "attached_by_default": default,
        "opt_in": opt_in,
        "status": status,
    }


SHIPPED_TABLE_COLUMNS = (
    ("table", lambda row: row["table"]),
    ("measured on", lambda row: ", ".join(row["measured_on"]) or "no catalog GPU"),
    ("catalog systems", lambda row: row["status"]),
)


def _print_tables(width, as_json: bool) -> None:
    """``systems --tables``: every catalog system with what prices its kernels (_tables_row), then every
    shipped kernel table with the catalog systems it is attached to (_shipped_table_row); as JSON
    {"systems": [...], "tables": [...]}."""
    from paraplan.catalog import load_system, system_names
    from paraplan.cost.kernel_tables import shipped_tables

    accelerators = {n: load_system(n).accelerator for n in system_names()}  # each system read once
    systems = [_tables_row(n, acc) for n, acc in accelerators.items()]
    attached = {n: acc.kernel_tables for n, acc in accelerators.items()}
    tables = [_shipped_table_row(t, systems, attached) for t in shipped_tables()]
    if as_json:
        print(json.dumps({"systems": systems, "tables": tables}, indent=2))
        return
    title = "Kernel tables (cost.kernel_tables; provenance: docs/validation.md)"
    _print_catalog(systems, False, width, title, TABLE_COLUMNS, numeric_from=4)
    print()
    title = "Shipped kernel tables (catalog/kernels; accelerator.kernel_tables NAME attaches one)"
    _print_catalog(tables, False, width, title, SHIPPED_TABLE_COLUMNS, numeric_from=3)


@app.command()
def systems(
    as_json: JsonOption = False,
    width: WidthOption = None,
    tables: switch(
        "--tables",
        help="list each system's measured kernel tables (catalog/kernels) or 'analytical fallback', "
        "and every shipped table with the catalog systems it is attached to",
    ) = False,
) -> None:
    """List the system catalog (GPU, HBM, peak bf16, NVLink domain, network)."""
    from paraplan.catalog import system_names

    if tables:
        _print_tables(width, as_json)
        return
    title = "Systems (paraplan estimate --system NAME); bandwidths per GPU per direction"
    rows = [_system_row(n) for n in system_names()]
    _print_catalog(rows, as_json, width, title, SYSTEM_COLUMNS, numeric_from=2)


def _text(key: str) -> Callable[[dict], str]:
    return lambda row: str(row[key])


def _fixed(key: str, digits: int) -> Callable[[dict], str]:
    """A number with ``digits`` decimals, "-" where the catalog has none."""
    return lambda row: "-" if row[key] is None else f"{row[key]:.{digits}f}"


# the columns of the catalog listings: (header, the cell of a row of _model_row / _system_row)
MODEL_COLUMNS = (
    ("name", _text("name")),
    ("params (B)", _fixed("params_b", 2)),
    ("active (B)", _fixed("active_params_b", 2)),
    *(
        (header, _text(key))
        for header, key in (
            ("layers", "layers"),
            ("hidden", "hidden"),
            ("heads", "heads"),
            ("kv heads", "kv_heads"),
            ("ffn", "ffn_hidden"),
            ("vocab", "vocab"),
            ("mlp", "mlp"),
        )
    ),
)
SYSTEM_COLUMNS = (
    ("name", _text("name")),
    ("gpu", _text("gpu")),
    ("HBM GiB", _fixed("hbm_gib", 0)),
    ("HBM TB/s", _fixed("hbm_tb_per_s", 2)),
    ("bf16 TFLOP/s", _fixed("peak_bf16_tflops", 0)),
    ("domain", _text("domain_size")),
    ("NVLink GB/s", _fixed("nvlink_gb_per_s", 0)),
    ("NIC GB/s", _fixed("nic_gb_per_s", 0)),
    ("$/GPU-h", _fixed("price_per_gpu_hour", 2)),
)


def _print_catalog(
    rows: list[dict], as_json: bool, width, title: str, columns, numeric_from: int = 1
) -> None:
    """The catalog's rows as JSON, or as a table of ``columns`` ((header, cell) pairs)."""
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from paraplan.report.text_table import simple_table

    table = simple_table(title, *(header for header, _ in columns), numeric_from=numeric_from)
    for row in rows:
        table.add_row(*(cell(row) for _, cell in columns))
    _stdout(width).print(table)


@app.command()
def schema(
    name: Annotated[
        str, typer.Argument(help="model | system | plan | validation-case (| cluster)")
    ],
    out: optional(Path, "--out", help="write the schema to FILE instead of printing it") = None,
) -> None:
    """Print the JSON Schema of an input file (model, system, plan, validation-case; cluster when defined),
    for editors and validators; quantities accept unit strings such as "80 GiB"."""
    from paraplan.io.schemas import json_schema, schema_models
    from paraplan.report.search_csv import AtomicText

    names = list(schema_models())
    if name not in names:
        import difflib

        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"schema: unknown schema {name!r}{hint}; allowed: {', '.join(names)}")
    text = json.dumps(json_schema(name), indent=2) + "\n"
    if out is None:
        print(text, end="")
        return
    sink = AtomicText(out, "--out")
    sink.handle.write(text)
    sink.close()
    print(f"wrote {out}")
