"""Ring attention's partial-output merges (graph.cp_ring): bytes against a hand count, and where the op appears."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.graph.cp_ring import ring_merge_bytes
from paraplan.graph.transformer import LayerShape, attention_ops


def test_merge_bytes_of_llama3_8b_at_cp2_by_hand():
    # Llama 3 8B, b 1, s 8192, c 2, t 1: E_o = 4096 x 32 x 128, E_kv = 2 x 4096 x 8 x 128, rows = 4096 x 32
    e_o, e_kv, rows = 4096 * 32 * 128, 2 * 4096 * 8 * 128, 4096 * 32
    forward, backward = ring_merge_bytes(2, e_o, e_kv, rows, 2)
    # forward: zero-fill 2 E_o + 2 merges x 3 x 2 E_o; LSE: 1 update (20 B) + casts (24 B) + 2 x 8 B per row
    assert forward == 2 * e_o * 7 + rows * 60 == 242_745_344
    # backward: dq and dk/dv, one copy (2 passes) + one add (3 passes) each
    assert backward == 2 * (e_o + e_kv) * 5 == 251_658_240
    assert ring_merge_bytes(1, e_o, e_kv, rows, 2) == (0.0, 0.0)


def _merge(shape: LayerShape):
    ops = [
        op
        for op in attention_ops(load_model("llama3-8b"), shape)
        if op.name == "ring_attention_merge"
    ]
    return ops[0] if ops else None


def test_the_merge_op_follows_the_ring():
    ring = _merge(LayerShape(1, 2, 1, 8192, False, "flash", "bf16"))
    assert ring is not None and ring.kind == "memory" and ring.selective_recompute
    assert (ring.fwd_bytes, ring.bwd_bytes) == pytest.approx((242_745_344, 251_658_240))
    # fp8 recipes keep the attention output in bf16: the same bytes
    fp8 = _merge(LayerShape(1, 2, 1, 8192, False, "flash", "fp8"))
    assert (fp8.fwd_bytes, fp8.bwd_bytes) == (ring.fwd_bytes, ring.bwd_bytes)
    assert _merge(LayerShape(1, 1, 1, 8192, False, "flash", "bf16")) is None
    ulysses = LayerShape(1, 2, 1, 8192, False, "flash", "bf16", cp_algorithm="all-to-all")
    assert _merge(ulysses) is None
    # more ring steps, more merges per output element: c = 4 on the same local tokens costs more per token
    c4 = _merge(LayerShape(1, 4, 1, 16384, False, "flash", "bf16"))
    assert c4.fwd_bytes > ring.fwd_bytes and c4.bwd_bytes > ring.bwd_bytes


def test_no_merge_where_the_keys_and_values_are_all_gathered():
    """2d-seq (Megatron-Core's cp_comm_type all_gather, TE's KV all-gather attention) and the SUMMA grid's
    attention (K/V all-gathered over each column) run no ring, so no partial-output merges."""
    from paraplan.graph.summa import attention_shape_2d

    seq = LayerShape(1, 2, 1, 8192, False, "flash", "bf16", tp_layout="2d-seq")
    assert _merge(seq) is None
    grid = LayerShape(8, 1, 1, 32768, True, "flash", "bf16", tp_layout="2d", tp_rows=4)
    assert attention_shape_2d(grid).cp == 4 and _merge(attention_shape_2d(grid)) is None
