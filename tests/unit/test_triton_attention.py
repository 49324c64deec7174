"""cost.attention's ``triton_flash`` kernel (llm-foundry's ``attn_impl: triton``): FlashAttention-2's curve
times FlashAttention v1's Figure 4 ratio (Dao 2023, A100 forward + backward), with the Hopper mma.sync carry;
never faster than FlashAttention-2 at the same shape."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost.attention import (
    HOPPER_MMA_SYNC_CARRY,
    RATIO_KERNELS,
    RatioKernel,
    architecture_carry,
    base_kernel,
    kernel_relative_speed,
    kernel_speed,
    triton_fa2_ratio,
)
from paraplan.cost.compute import attention_time_s
from paraplan.cost.frameworks import framework_system


def test_the_ratio_at_a_measured_shape_is_figure_4s():
    # Dao 2023 Fig. 4 (d) causal, head dim 128, 8k: FlashAttention 80, FlashAttention-2 182 TFLOP/s
    assert triton_fa2_ratio(8192, 128, True) == pytest.approx(80 / 182)
    # (a) non-causal, head dim 64, 2k: 104 / 162
    assert triton_fa2_ratio(2048, 64, False) == pytest.approx(104 / 162)


def test_the_ratio_interpolates_in_log_sequence_and_in_head_dim():
    mid = 4096 * math.sqrt(2)  # half-way between 4k and 8k in log2(s)
    assert triton_fa2_ratio(mid, 128, True) == pytest.approx((76 / 173 + 80 / 182) / 2)
    assert triton_fa2_ratio(8192, 96, True) == pytest.approx((92 / 165 + 80 / 182) / 2)
    # outside the measured lengths: the end values
    assert triton_fa2_ratio(65536, 128, True) == pytest.approx(83 / 189)
    assert triton_fa2_ratio(256, 64, True) == pytest.approx(58 / 88)


def test_the_hopper_rate_is_the_ampere_fraction_of_the_mma_sync_ceiling():
    # by hand: (2/3 · 989/312) / (308/182) = 2.11325 / 1.69231 = 1.24874
    assert HOPPER_MMA_SYNC_CARRY == pytest.approx(1.24874, rel=1e-4)
    assert kernel_relative_speed("triton_flash", "fa2", "ampere") == pytest.approx(80 / 182)
    assert kernel_relative_speed("triton_flash", "fa2", "hopper") == pytest.approx(
        80 / 182 * 1.24874, rel=1e-4
    )


@pytest.mark.parametrize("architecture", ["ampere", "hopper", "ada", "blackwell", None])
def test_the_triton_kernel_is_never_faster_than_flashattention2(architecture):
    for seq in (128, 512, 777, 2048, 3000, 8192, 16384, 65536, 262144):
        for head_dim in (32, 64, 80, 96, 128, 256):
            for causal in (True, False):
                fa2 = kernel_speed("fa2", seq, head_dim, causal, architecture)
                triton = kernel_speed("triton_flash", seq, head_dim, causal, architecture)
                assert 0 < triton < fa2, (seq, head_dim, causal)


def test_a_step_pays_the_ratio_in_attention_time_only():
    """On an A100 the llm-foundry profile's attention takes 1/ratio of FlashAttention-2's time at the
    same FLOPs (the fraction conversion and the shape scale compose to the ratio at that shape)."""
    system = load_system("dgx-a100-80gb")
    fa2 = framework_system(load_framework("torchtitan"), system).accelerator
    triton = framework_system(load_framework("llm-foundry"), system).accelerator
    assert fa2.efficiency.attention_kernel == "fa2"
    assert triton.efficiency.attention_kernel == "triton_flash"
    call = (2048, 2048, 128, True)
    t_fa2 = attention_time_s(1e15, 0.5, fa2, "bf16", call) - fa2.efficiency.kernel_overhead_s
    t_tri = attention_time_s(1e15, 0.5, triton, "bf16", call) - triton.efficiency.kernel_overhead_s
    assert t_tri / t_fa2 == pytest.approx(1 / triton_fa2_ratio(2048, 128, True), rel=1e-9)


def test_every_ratio_kernel_entry_carries_its_own_base_ratio_and_carry(monkeypatch):
    # a made-up entry on FlashAttention-3's curve at half its speed, 2x on Hopper: each of its three
    # fields prices it, none borrowed from triton_flash's
    half = RatioKernel("fa3", lambda seq, head_dim, causal: 0.5, 2.0)
    monkeypatch.setitem(RATIO_KERNELS, "half_fa3", half)
    shape = (8192, 128, True)
    assert base_kernel("half_fa3") == "fa3"
    assert architecture_carry("half_fa3", "hopper") == 2.0
    assert architecture_carry("half_fa3", "ampere") == 1.0
    assert kernel_speed("half_fa3", *shape, "hopper") == pytest.approx(
        kernel_speed("fa3", *shape, "hopper")
    )
    assert kernel_speed("half_fa3", *shape, "ampere") == pytest.approx(
        0.5 * kernel_speed("fa3", *shape, "ampere")
    )
