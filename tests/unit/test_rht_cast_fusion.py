"""NVFP4's Hadamard-transform cast fusion (Transformer Engine pull request #2555, cost.quantisation.cast_passes):
one kernel writes the rowwise cast and the transformed columnwise cast from one read of the bf16 operand, by hand;
the profile of the 26.04-26.06 containers states it, the 26.02 one does not."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost import quantisation as qz
from paraplan.cost.frameworks import framework_system
from paraplan.specs.fields import with_fields

Q = 0.5 + 1 / 16  # E2M1 + one E4M3 scale per 16 elements


def with_runtime(system, **runtime):
    return with_fields(
        system, {f"accelerator.efficiency.runtime.{k}": v for k, v in runtime.items()}
    )


def _gb300_nvfp4():
    """(accelerator without the fusion, with it, B_HBM x eta_HBM, kernel overhead) of a GB300 under NVFP4 + RHT."""
    system = with_runtime(load_system("gb300-nvl72"), fp8_recipe="nvfp4", nvfp4_rht=True)
    acc = system.accelerator
    fused = with_runtime(system, nvfp4_rht_cast_fusion=True).accelerator
    return acc, fused, acc.hbm_bandwidth * acc.efficiency.hbm, acc.efficiency.kernel_overhead_s


def test_fused_rht_cast_bytes_by_hand():
    # TE 71bbefbf quantize_impl: nvte_hadamard_transform_amax (read 2), then one
    # nvte_quantize_with_hadamard_transform (read 2, write rowwise q and RHT columnwise q)
    assert qz.cast_passes("nvfp4", "nvfp4", rht=True, rht_fused=True) == pytest.approx((2 + 2 * Q,))
    assert qz.operand_bytes("nvfp4", "nvfp4", rht=True, rht_fused=True) == pytest.approx(5.125)
    # TE 2.12: the rowwise cast and the RHT columnwise cast each read the operand: 2 B more
    assert qz.operand_bytes("nvfp4", "nvfp4", rht=True) == pytest.approx(7.125)
    # the fusion only concerns NVFP4 under the transform
    for recipe, dtype in (("mxfp8", "fp8"), ("current", "fp8"), ("nvfp4", "nvfp4")):
        assert qz.cast_passes(recipe, dtype, False, True) == qz.cast_passes(recipe, dtype, False)


def test_fused_rht_cast_time_on_the_hbm_roofline():
    acc, fused, rate, over = _gb300_nvfp4()
    elems, rows, width = 8192.0 * 8192, 8192.0, 8192.0
    t = qz.operand_quantisation_s(fused, elems, rows, width, "nvfp4")
    # two kernels: amax 2 B, the fused cast 2 + 2q, each with the kernel overhead
    assert t == pytest.approx((2 + 2 + 2 * Q) * elems / rate + 2 * over)
    unfused = qz.operand_quantisation_s(acc, elems, rows, width, "nvfp4")
    assert unfused - t == pytest.approx(2 * elems / rate + over)


def test_an_ineligible_operand_takes_the_two_kernel_path():
    # TE #2555's eligibility: rows % 64 == 0 and columns % 128 == 0; GPT-OSS's hidden 2880 = 22.5 x 128
    assert qz.rht_fusion_eligible(8192, 8192) and not qz.rht_fusion_eligible(8192, 2880)
    assert not qz.rht_fusion_eligible(4100, 8192)
    acc, fused, rate, over = _gb300_nvfp4()
    elems, rows, width = 8192.0 * 2880, 8192.0, 2880.0
    # amax 2 B, then the rowwise cast 2 + q and the RHT columnwise cast 2 + q: three kernels, as without the fusion
    expected = (2 + 2 * (2 + Q)) * elems / rate + 3 * over
    assert qz.operand_quantisation_s(fused, elems, rows, width, "nvfp4") == pytest.approx(expected)
    assert qz.operand_quantisation_s(acc, elems, rows, width, "nvfp4") == pytest.approx(expected)


def test_profiles_state_the_fusion_by_container():
    later = load_framework("megatron-bridge-26.04-nvfp4")
    earlier = load_framework("megatron-bridge-26.02-nvfp4")
    assert later.nvfp4_rht_cast_fusion and not earlier.nvfp4_rht_cast_fusion
    # every other recipe input is the 26.02 one (scale swizzles included: TE #3011 is in neither)
    skip = {"name", "base", "version", "source", "description", "sources", "nvfp4_rht_cast_fusion"}
    a = later.model_dump(exclude=skip)
    b = earlier.model_dump(exclude=skip)
    assert a == b
    runtime = framework_system(later, load_system("gb200-nvl72")).accelerator.efficiency.runtime
    assert runtime.nvfp4_rht_cast_fusion and runtime.nvfp4_rht and runtime.nvfp4_scale_swizzle
    assert not load_system("gb200-nvl72").accelerator.efficiency.runtime.nvfp4_rht_cast_fusion
