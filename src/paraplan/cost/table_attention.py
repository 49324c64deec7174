"""Fused attention from a measured table (cost.kernel_tables' attention files): the kernel's rate at a call.

Per kernel (fa2 / cudnn / fa3) and direction, at the nearest measured head dim (same mask first): the kernel's
analytical shape factor (cost.attention.attention_shape_factor, FlashAttention-3 paper Fig. 5: s/(s + s_half),
causal diagonal tiles s/(s + 128)) times the ratio measured / shape factor, interpolated linearly in log2 over log2
sequence length (``shape_prior``, cost.kernel_tables.Scatter); outside the measured lengths the ratio is held at
the nearest one and the shape factor follows the length. A head dim or mask the table lacks scales by the
kernel's shape-factor ratio. Windows: rows with a ``window`` column (a causal window of w keys) price windowed
calls and rows without one full calls; a kind the table lacks is read from the other kind scaled by the ratio of
their analytical factors, which for a window includes cost.attention.window_tile_factor (the key tiles the
kernel visits), as for a head dim. FLOPs are counted as
the graph counts them (cost.kernel_tables.attention_work). A bwd row of a file the table.yaml lists in
``leaf_gradients`` is read less the accumulation of its leaf inputs' gradients (cost.leaf_grads: a step's q, k, v
are no leaves) at the system's HBM rate: ``row_kernel_s``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache, partial

from paraplan.cost import kernel_tables as kt
from paraplan.cost.attention import attention_shape_factor
from paraplan.cost.leaf_grads import LEAF_FIELD, attention_leaf_bytes
from paraplan.specs.errors import InputError
from paraplan.specs.system import activation_dtype


def row_kernel_s(table: kt.KernelTable, kind: str, leaf_rate: float | None) -> list[float]:
    """Each row's kernel time of the attention file ``kind`` (its rows as the table parsed them,
    ``table.attention[kind]``): the measured time, less its leaf inputs' gradient accumulation
    (cost.leaf_grads.attention_leaf_bytes / ``leaf_rate``) for a bwd row of a file listed in the table's
    ``leaf_gradients``; InputError where that leaves no time."""
    measured = table.attention[kind]
    if leaf_rate is None or kind not in (table.provenance.get(LEAF_FIELD) or ()):
        return [r.time_s for r in measured]
    out = []
    for i, m in enumerate(measured):
        if m.group[2] != "bwd":
            out.append(m.time_s)
            continue
        kernel_s = m.time_s - attention_leaf_bytes(*m.shape) / leaf_rate
        if kernel_s <= 0:
            raise InputError(
                f"{kt.FIELD}: {table.name}/{table.files[kind]} row {i + 1}: its time does not exceed its leaf inputs' "
                f"gradient accumulation ({LEAF_FIELD}, cost.leaf_grads)"
            )
        out.append(kernel_s)
    return out


def shape_prior(kernel: str, head_dim: float, causal: bool, window: int | None = None):
    """The prior of ``kernel``'s rows at (head dim, mask, window) over (sequence length,): its analytical
    shape factor attention_shape_factor(kernel, s, head_dim, causal, window), the window's tile factor
    included for a causal window (module docstring)."""
    return partial(_seq_factor, kernel, float(head_dim), causal, window)


def _seq_factor(kernel: str, head_dim: float, causal: bool, window, point: tuple[float, ...]):
    return attention_shape_factor(kernel, point[0], head_dim, causal, window)


@lru_cache(maxsize=256)
def curves(
    ref: str, l2: float | None, kernel: str, leaf_rate: float | None
) -> dict[tuple[int, bool, str], kt.Scatter]:
    """(head dim, causal, direction) -> rate Scatter of ``kernel``'s rows at their kernel times
    (``row_kernel_s``) over the kernel's ``shape_prior``; {} where the table has no such file."""
    table = kt.load_table(ref, l2)
    kind = f"attention_{kernel}"
    if kind not in table.attention:
        return {}
    timed = zip(table.attention[kind], row_kernel_s(table, kind, leaf_rate))
    rows = [replace(m, time_s=t) for m, t in timed]
    return {
        key: kt.scatter(*g, shape_prior(kernel, key[0], key[1], key[3]))
        for key, g in kt.groups(rows).items()
    }


def attention_rate(
    rates: dict,
    kernel: str,
    seq: float,
    head_dim: float,
    causal: bool,
    direction: str,
    window: int | None = None,
) -> float | None:
    """FLOP/s (of the scores computed) of ``kernel`` at this shape from its ``curves``, or None if not
    measured in that direction. Rows of the call's kind come first: windowed rows (a causal window shorter
    than the sequence) for a windowed call, rows without a window for a full one; then the mask, the
    nearest head dim and window in log2; the rate scales by the ratio of the two calls'
    cost.attention.attention_shape_factor, window included (module docstring)."""
    keys = [key for key in rates if key[2] == direction]
    if not keys:
        return None
    window = window if causal and window is not None and window < seq else None

    def distance(key):
        w_tab = key[3]
        kind = (w_tab is None) != (window is None)
        w_gap = abs(math.log2(w_tab / window)) if w_tab and window else 0.0
        return (kind, key[1] != causal, abs(math.log2(key[0] / head_dim)), w_gap)

    d_tab, c_tab, _, w_tab = min(keys, key=distance)
    rate = rates[(d_tab, c_tab, direction, w_tab)].rate((seq,))
    return (
        rate
        * attention_shape_factor(kernel, seq, head_dim, causal, window)
        / attention_shape_factor(kernel, seq, d_tab, c_tab, w_tab)
    )


@lru_cache(maxsize=65536)
def attention_time_s(
    ref: str,
    l2: float | None,
    kernel: str,
    work: float,
    call: tuple[int, int, int, bool],
    direction: str,
    dtype: str,
    leaf_rate: float | None = None,
    window: int | None = None,
):
    """Measured time of fused attention doing ``work`` (FLOPs × causal share) on ``call``
    (q tokens, kv tokens, head dim, causal), or None where the kernel or dtype is not measured
    (fp8 and FP4 recipes run attention in bf16: specs.system.activation_dtype, as in cost.compute);
    ``leaf_rate``: the system's element-wise bytes/s for ``row_kernel_s`` (None: rows as measured);
    ``window``: a causal window of that many keys (``attention_rate``)."""
    if kt._dtype(activation_dtype(dtype)) != "bf16":
        return None
    q, kv, head_dim, causal = call
    rates = curves(ref, l2, kernel, leaf_rate)
    rate = attention_rate(rates, kernel, min(q, kv), head_dim, causal, direction, window)
    if rate is None:
        return None
    return work / rate


kt.CACHES_ELSEWHERE += [curves, attention_time_s]
