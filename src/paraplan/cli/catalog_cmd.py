"""``paraplan models`` and ``paraplan systems``: the catalogs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from paraplan.catalog import load_model, load_system, model_names, system_names
from paraplan.cli.app import (
    _stdout,
    app,
)
from paraplan.report.render import simple_table
from paraplan.units import GiB


def _model_row(name: str) -> dict:
    from paraplan.graph.transformer import (
        embedding_weight_params,
        layer_weight_params,
        lm_head_weight_params,
    )

    m = load_model(name)
    params = m.layers * layer_weight_params(m, 1) + embedding_weight_params(m, 1) + lm_head_weight_params(m, 1, True)
    return {
        "name": name,
        "params_b": params / 1e9,
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.n_kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "vocab": m.vocab,
        "mlp": m.mlp,
        "source": m.source,
    }


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False) -> None:
    """List the model catalog (parameters in billions and shape)."""
    rows = [_model_row(n) for n in model_names()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = simple_table("Models (paraplan estimate --model NAME)", "name", "params (B)", "layers", "hidden", "heads", "kv heads", "ffn", "vocab", "mlp")
    for r in rows:
        table.add_row(r["name"], f"{r['params_b']:.2f}", *(str(r[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp")))
    _stdout().print(table)


def _system_row(name: str) -> dict:
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


@app.command()
def systems(as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False) -> None:
    """List the system catalog (GPU, HBM, peak bf16, NVLink domain, network)."""
    rows = [_system_row(n) for n in system_names()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = simple_table(
        "Systems (paraplan estimate --system NAME); bandwidths per GPU per direction",
        "name", "gpu", "HBM GiB", "HBM TB/s", "bf16 TFLOP/s", "domain", "NVLink GB/s", "NIC GB/s", "$/GPU-h",
        numeric_from=2,
    )
    for r in rows:
        table.add_row(
            r["name"],
            r["gpu"],
            f"{r['hbm_gib']:.0f}",
            f"{r['hbm_tb_per_s']:.2f}",
            "-" if r["peak_bf16_tflops"] is None else f"{r['peak_bf16_tflops']:.0f}",
            str(r["domain_size"]),
            f"{r['nvlink_gb_per_s']:.0f}",
            f"{r['nic_gb_per_s']:.0f}",
            "-" if r["price_per_gpu_hour"] is None else f"{r['price_per_gpu_hour']:.2f}",
        )
    _stdout().print(table)


