"""Megatron-Core's precision-aware optimizer as an optimizer_state (cost.memory.PRECISION_AWARE_STATES): bytes
per parameter of the state and of the optimizer step, by hand."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.cost.memory import StateBytes, precision_aware_step_bytes, state_bytes_per_param
from paraplan.step.constants import state_bytes


def test_state_bytes_by_hand():
    """bf16 weights 2 + fp32 main gradients 4 + fp32 master 4 + bf16 exp_avg 2 + bf16 exp_avg_sq 2 = 14 B; with
    the master's 16-bit remainders 2 + 4 + 2 + 2 + 2 = 12 B (against 18 B); bf16 gradients 2 B less."""
    assert state_bytes_per_param("bf16", "fp32", "bf16_moments") == StateBytes(2.0, 4.0, 8.0)
    assert state_bytes_per_param("bf16", "fp32", "bf16_moments_remainders") == StateBytes(
        2.0, 4.0, 6.0
    )
    assert state_bytes_per_param("fp8", "bf16", "bf16_moments_remainders") == StateBytes(
        2.0, 2.0, 6.0
    )
    assert state_bytes_per_param("bf16", "fp32", "fp32_master") == StateBytes(2.0, 4.0, 12.0)


def test_step_bytes_by_hand():
    """Zero, unscale, norm 16 B; FusedAdam reads gradient 4 + master value 4, writes master + bf16 parameter
    (4 + 2, or 2 + 2 as remainders); bf16 moments 2 + 2 each in the kernel (TE v2.13+), or 24 each through fp32
    copies (TE v2.1-v2.12)."""
    assert precision_aware_step_bytes("bf16_moments") == 16 + 8 + 6 + 8 == 38
    assert precision_aware_step_bytes("bf16_moments_remainders") == 16 + 8 + 4 + 8 == 36
    assert precision_aware_step_bytes("bf16_moments", fused_moments=False) == 16 + 8 + 6 + 48
    assert precision_aware_step_bytes("bf16_moments_remainders", fused_moments=False) == 76


def test_a_profile_stating_it_reaches_the_step():
    """A Megatron-Core profile with optimizer_state bf16_moments_remainders: the system's optimizer traffic is 36 B
    per owned parameter and its state 2 + 4 + 6 B (the profile keeps fp32 main gradients); the stock profile
    keeps 54 B and 12 B."""
    base = load_framework("megatron-core")
    aware = base.model_copy(update={"optimizer_state": "bf16_moments_remainders"})
    h100 = load_system("dgx-h100-80gb")
    stock, system = framework_system(base, h100), framework_system(aware, h100)
    assert system.accelerator.efficiency.optimizer_step_bytes == 36.0
    assert stock.accelerator.efficiency.optimizer_step_bytes == pytest.approx(54.0)
    assert state_bytes(system, "bf16").optimizer == 6.0
    assert state_bytes(stock, "bf16").optimizer == 12.0
