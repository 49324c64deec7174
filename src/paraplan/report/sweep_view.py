"""Text view of a sweep: the best plan of every point (``paraplan sweep``'s summary table)."""

from __future__ import annotations

from paraplan.report.text_table import SimpleTable, simple_table
from paraplan.units import si_prefixed


def _rate(tokens_per_s: float) -> str:
    """219104 -> '219k' (three significant digits)."""
    return si_prefixed(tokens_per_s, ".3g")


def sweep_table(document: dict) -> SimpleTable:
    """One row per point: the swept values, the global batch the search chose (with
    --max-global-batch it may be below the maximum), the best plan (on its own line under the row
    when the table is too wide), step time, tokens/s, MFU and peak memory; a point where nothing
    fits names its nearest miss."""
    set_paths = [s["path"] for s in document["sweep"]["sets"]]
    plan_column = 2 + len(set_paths)
    table = simple_table(
        "Best plan per point",
        "system",
        "GPUs",
        *(p.split(".")[-1] for p in set_paths),
        "best plan",
        "global batch",
        "step s",
        "tokens/s",
        "MFU",
        "peak GiB",
        numeric_from=plan_column + 1,
        foldable=[plan_column],
        detach=plan_column,
    )
    for p in document["points"]:
        cells = [p["system"], f"{p['gpus']:,}", *(str(p[k]) for k in set_paths)]
        if p["feasible"]:
            cells += [
                p["plan_label"],
                f"{p['global_batch']:,}",
                f"{p['step_time_s']:.3f}",
                _rate(p["tokens_per_s"]),
                f"{100 * p['mfu']:.1f}%",
                f"{p['memory']['peak_gib']:.1f}",
            ]
        else:
            miss = p.get("nearest_miss")
            text = (
                f"nothing fits: nearest miss {miss['memory']['peak_gib']:.0f} of {miss['memory']['capacity_gib']:.0f} GiB"
                if miss
                else (p.get("reason") or "no plan")
            )
            cells += [text, "-", "-", "-", "-", "-"]
        table.add_row(*cells)
    return table
