"""Costs of 2D tensor parallelism (specs/tp_layout.py, graph/summa.py) on the two network tiers.

The grid's groups: the tp ranks are laid out row by row, so a grid row (the c GPUs sharing a token
block; SUMMA's activation broadcasts and dX reduces) is c consecutive members of the tp group, and a
grid column (the r GPUs sharing a weight block; weight broadcasts, dW reduces, K/V all-gathers) is r
members c apart. Which of them share an NVLink domain follows from the tp group's own span: the
first a = tp_span.per_domain tp members share rank 0's domain (cost.comm.group_span), hence a row
has min(c, a) members per domain and a column min(r, ⌈a/c⌉) — the NERSC model's ``topology``
(GPUs of each grid dimension inside the fast domain; Subramanian et al. 2024, arXiv:2410.00273).
"""

from __future__ import annotations

import math

from paraplan.cost.comm import GroupSpan, collective_time_and_price_s, priced_exposure_s
from paraplan.cost.overlap import chunked_overlap_exposed_s
from paraplan.graph.ops import LayerGraph
from paraplan.specs.system import SystemSpec


def grid_spans(tp_span: GroupSpan, rows: int) -> tuple[GroupSpan, GroupSpan]:
    """(row span: c members, 1 tp-stride apart; column span: r members, c apart) of an r × c grid laid
    row by row over a tp group with ``tp_span`` (module docstring)."""
    cols = tp_span.size // rows
    a = tp_span.per_domain
    row_in = max(1, min(cols, a))
    col_in = max(1, min(rows, math.ceil(a / cols)))
    return GroupSpan(cols, row_in, math.ceil(cols / row_in)), GroupSpan(
        rows, col_in, math.ceil(rows / col_in)
    )


def summa_exposed_s(comm_s, gemm_s, panels):
    """Exposed time of SUMMA's panel traffic beside its GEMMs: the broadcast of panel k+1 overlaps
    the update with panel k (van de Geijn & Watts 1997, §3, pipelined SUMMA), so one panel's
    communication stays exposed and the slower stream sets the pace — the NERSC model's
    t_comm = t_panel + max(nb·t_panel − t_compute, 0), written with the comm-GEMM pipeline rule of
    the rest of the model (cost.overlap.chunked_overlap_exposed_s with nb chunks, no SM slowdown:
    the hidden part pays its tiers' overlap price, summa_exposure_s): comm/nb + max(0, (nb−1)/nb·(comm − gemm))."""
    return chunked_overlap_exposed_s(comm_s, gemm_s, panels, 0.0)


def summa_exposure_s(comm_s: float, gemm_s: float, panels: int, price_s: float) -> float:
    """Exposed SUMMA time of one direction: summa_exposed_s plus the hidden part's share of ``price_s``, the
    price of hiding all of it (each tier's overlap cost: cost.comm.priced_exposure_s)."""
    return float(priced_exposure_s(comm_s, summa_exposed_s(comm_s, gemm_s, panels), price_s))


def summa_traffic_s(
    block: LayerGraph, system: SystemSpec, tp_span: GroupSpan, rows: int
) -> tuple[float, float, float, float]:
    """(forward seconds, backward seconds, forward hidden price, backward hidden price) of a block's SUMMA
    panel collectives (``overlaps_with="panels"``) on the grid's row and column spans, calls × time per call."""
    spans = dict(zip(("tp_row", "tp_col"), grid_spans(tp_span, rows)))
    fwd = bwd = fwd_price = bwd_price = 0.0
    for c in block.collectives:
        if c.overlaps_with != "panels":
            continue
        time, price = collective_time_and_price_s(c.kind, c.bytes, spans[c.group], system)
        fwd, bwd = fwd + c.count_fwd * time, bwd + c.count_bwd * time
        fwd_price, bwd_price = fwd_price + c.count_fwd * price, bwd_price + c.count_bwd * price
    return fwd, bwd, fwd_price, bwd_price


def with_summa_exposure(
    comm, compute, block: LayerGraph, system: SystemSpec, tp_span: GroupSpan, shape
):
    """``comm`` (a step.build.BlockComm) with a 2D block's SUMMA panel traffic (summa_traffic_s) as exposed TP time: per
    direction the pipelined-panel exposure beside the block's GEMMs (``compute``: its step.build.BlockCompute) plus the
    price of the hidden part (summa_exposure_s); the block's other collectives are already in ``comm``."""
    fwd, bwd, fwd_price, bwd_price = summa_traffic_s(block, system, tp_span, shape.tp_rows)
    if fwd == bwd == 0.0:
        return comm
    return comm._replace(
        tp_forward=comm.tp_forward
        + summa_exposure_s(fwd, compute.gemm_forward, shape.summa_panels, fwd_price),
        tp_backward=comm.tp_backward
        + summa_exposure_s(bwd, compute.gemm_backward, shape.summa_panels, bwd_price),
    )
