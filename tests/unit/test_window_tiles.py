"""Causal-window attention priced by the key tiles its kernel visits (cost.attention.window_tile_factor)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.cost.attention import attention_shape_factor, visited_key_tiles, window_tile_factor
from paraplan.cost.compute import attention_efficiency


def test_visited_key_tiles_by_hand():
    # 4096 tokens = 32 query tiles of 128; window 128: m = ceil(127/128) = 1, tile 0 meets 1 key tile, the
    # 31 others 2: (2·3/2 + 30·2)/32 = 63/32
    assert visited_key_tiles(4096, 128) == pytest.approx(63 / 32)
    # no window: the causal triangle's (T + 1)/2 = 16.5 tiles a query tile
    assert visited_key_tiles(4096, None) == pytest.approx(16.5)
    # 8192 tokens (64 tiles), window 1024: m = ceil(1023/128) = 8: (9·10/2 + 55·9)/64 = 540/64
    assert visited_key_tiles(8192, 1024) == pytest.approx(8.4375)


def test_window_tile_factor_by_hand():
    # cuDNN (s_half 134), 4096 tokens, window 128: useful keys a query 128 − 128·127/8192 = 126.015625, visited
    # 128 · 63/32 = 252: 0.500062; over the full layer's 4096/4224; the loop spans k = 256 keys:
    # (256/390) / (4096/4230) = 0.677883; 0.500062 / 0.969697 · 0.677883 = 0.349578
    assert window_tile_factor("cudnn", 4096, 128) == pytest.approx(0.349578, rel=1e-5)
    # a window as long as the sequence is the full causal layer
    assert window_tile_factor("cudnn", 4096, 4096) == 1.0
    assert window_tile_factor("cudnn", 4096, None) == 1.0


def test_the_shape_factor_takes_the_window_when_causal():
    # the one place a window scales a call's analytical rate (the catalog's efficiency and a table's rows)
    for kernel in ("cudnn", "fa2", "triton_flash"):
        full = attention_shape_factor(kernel, 4096, 64, True)
        win = attention_shape_factor(kernel, 4096, 64, True, 128)
        assert win == pytest.approx(full * window_tile_factor(kernel, 4096, 128), rel=1e-15)
        assert attention_shape_factor(kernel, 4096, 64, False, 128) == attention_shape_factor(
            kernel, 4096, 64, False
        )
    # cuDNN at 4096 tokens, head dim 64, window 128: s/(s + 134) · d-term · 4096/4224 · 0.349578 (above)
    assert attention_shape_factor("cudnn", 4096, 64, True, 128) == pytest.approx(
        attention_shape_factor("cudnn", 4096, 64, True) * 0.349578, rel=1e-5
    )


def test_a_window_slows_the_rate_by_its_tile_factor_only_when_causal():
    acc = load_system("gb200-nvl72").accelerator
    call = (4096, 4096, 64, True)
    full, win = attention_efficiency(acc, call), attention_efficiency(acc, call, 128)
    assert win / full == pytest.approx(window_tile_factor("cudnn", 4096, 128), rel=1e-12)
    # a longer window visits a smaller share of wasted tile area: the rate grows with the window
    rates = [attention_efficiency(acc, call, w) for w in (128, 256, 1024, 2048)]
    assert rates == sorted(rates)
    noncausal = (4096, 4096, 64, False)
    assert attention_efficiency(acc, noncausal, 128) == attention_efficiency(acc, noncausal)


def test_a_window_on_every_layer_of_a_dense_model_is_priced_by_its_tiles():
    # a dense model with a 128-key window on every layer (the dense builder, graph.transformer): its fused
    # attention is the windowed layers' time alone, at the window's score share and tile factor
    from paraplan.catalog import load_model
    from paraplan.cost.compute import attention_time_s, op_times_s
    from paraplan.cost.flops import softmax_exponentials
    from paraplan.graph.transformer import LayerShape, attention_ops

    shape = LayerShape(
        tp=1,
        cp=1,
        micro_batch=1,
        seq_length=4096,
        sequence_parallel=False,
        attention="flash",
        dtype="bf16",
    )
    model = load_model("llama3-8b").model_copy(update={"sliding_window": 128})
    (op,) = [o for o in attention_ops(model, shape) if o.kind == "attention"]
    # mean keys a query sees: (128·129/2 + (4096 − 128)·128)/4096 = 126.015625 of 4096
    share = (128 * 129 / 2 + (4096 - 128) * 128) / 4096 / 4096
    assert op.causal_fraction == pytest.approx(share, rel=1e-12)
    assert op.attention_window == (128, 1.0, op.causal_fraction)
    acc = load_system("gb200-nvl72").accelerator
    exps = softmax_exponentials(op.fwd_flops, share, 128)
    call = op.attention_call
    fwd = attention_time_s(op.fwd_flops, share, acc, "bf16", call, "fwd", exps, 128)
    assert op_times_s(op, acc, "bf16")[0] == pytest.approx(fwd, rel=1e-12)
    # no window, or a window as long as the sequence: no attention_window
    full = load_model("llama3-8b")
    (op_full,) = [o for o in attention_ops(full, shape) if o.kind == "attention"]
    assert op_full.attention_window is None


def test_a_window_pattern_block_prices_its_full_layers_at_the_ring_chunks_causal_share():
    # a layer block of which half the layers have a 128-key window, context-parallel ring c = 2 over 4096 tokens:
    # its windowed layers at window_fraction(128), its full ones at (1 + c/s)/2 = (1 + 2/4096)/2, the full share
    # read off the call's 2048-key chunk, (1 + 1/2048)/2
    from paraplan.catalog import load_model
    from paraplan.cost.compute import attention_time_s, op_times_s
    from paraplan.cost.flops import softmax_exponentials
    from paraplan.graph.mla import core_attention_ops, window_fraction
    from paraplan.graph.transformer import LayerShape

    shape = LayerShape(
        tp=1,
        cp=2,
        micro_batch=1,
        seq_length=4096,
        sequence_parallel=False,
        attention="flash",
        dtype="bf16",
    )
    model = load_model("llama3-8b")
    (op,) = [o for o in core_attention_ops(model, shape, 128, 0.5) if o.kind == "attention"]
    windowed, full = window_fraction(128, 4096, 2), 0.5 * (1 + 2 / 4096)
    assert op.attention_window == (128, 0.5, windowed)
    assert op.causal_fraction == 0.5 * windowed + 0.5 * full
    acc, call = load_system("gb200-nvl72").accelerator, op.attention_call
    assert call[1] == 2048
    fwd = sum(
        0.5 * attention_time_s(op.fwd_flops, cf, acc, "bf16", call, "fwd", exps, w)
        for cf, w, exps in (
            (windowed, 128, softmax_exponentials(op.fwd_flops, windowed, call[2])),
            (full, None, softmax_exponentials(op.fwd_flops, full, call[2])),
        )
    )
    assert op_times_s(op, acc, "bf16")[0] == pytest.approx(fwd, rel=1e-12)
