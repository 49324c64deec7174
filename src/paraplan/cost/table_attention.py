"""Fused attention from a measured table (cost.kernel_tables' attention files): the kernel's rate at a call.

Per kernel (fa2 / cudnn / fa3) and direction, at the nearest measured head dim (same mask first): the kernel's
analytical shape factor (cost.attention.attention_shape_factor, FlashAttention-3 paper Fig. 5: s/(s + s_half),
causal diagonal tiles s/(s + 128)) times the ratio measured / shape factor, interpolated linearly in log2 over log2
sequence length (``shape_prior``, cost.kernel_tables.Scatter); outside the measured lengths the ratio is held at
the nearest one and the shape factor follows the length. A head dim or mask the table lacks scales by the
kernel's shape-factor ratio. FLOPs are counted as
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


def shape_prior(kernel: str, head_dim: float, causal: bool):
    """The prior of ``kernel``'s rows at (head dim, mask) over (sequence length,): its analytical shape
    factor attention_shape_factor(kernel, s, head_dim, causal) (module docstring)."""
    return partial(_seq_factor, kernel, float(head_dim), causal)


def _seq_factor(kernel: str, head_dim: float, causal: bool, point: tuple[float, ...]) -> float:
    return attention_shape_factor(kernel, point[0], head_dim, causal)


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
        key: kt.scatter(*g, shape_prior(kernel, *key[:2])) for key, g in kt.groups(rows).items()
    }


def attention_rate(
    rates: dict, kernel: str, seq: float, head_dim: float, causal: bool, direction: str
) -> float | None:
    """FLOP/s (of FLOPs × causal share) of ``kernel`` at this shape from its ``curves``, or None if not
    measured in that direction."""
    keys = [key for key in rates if key[2] == direction]
    if not keys:
        return None
    d_tab, c_tab, _ = min(
        keys, key=lambda key: (key[1] != causal, abs(math.log2(key[0] / head_dim)))
    )
    rate = rates[(d_tab, c_tab, direction)].rate((seq,))
    scale = attention_shape_factor(kernel, seq, head_dim, causal) / attention_shape_factor(
        kernel, seq, d_tab, c_tab
    )
    return rate * scale


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
):
    """Measured time of fused attention doing ``work`` (FLOPs × causal share) on ``call``
    (q tokens, kv tokens, head dim, causal), or None where the kernel or dtype is not measured
    (fp8 and FP4 recipes run attention in bf16: specs.system.activation_dtype, as in cost.compute);
    ``leaf_rate``: the system's element-wise bytes/s for ``row_kernel_s`` (None: rows as measured)."""
    if kt._dtype(activation_dtype(dtype)) != "bf16":
        return None
    q, kv, head_dim, causal = call
    rates = curves(ref, l2, kernel, leaf_rate)
    rate = attention_rate(rates, kernel, min(q, kv), head_dim, causal, direction)
    if rate is None:
        return None
    return work / rate


kt.CACHES_ELSEWHERE += [curves, attention_time_s]
