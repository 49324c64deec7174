"""NVFP4 scale swizzles as Transformer Engine v2.12 runs them (cost.quantisation.scale_swizzle_bytes,
cost.compute.scale_swizzle_s): every GEMM call swizzles both operands' E4M3 scales, one HBM-bound kernel each,
hand-computed on the HBM roofline of a GB300 (its table has attention rows only, no copies)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost import quantisation as qz
from paraplan.cost.compute import op_times_s, scale_swizzle_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph.transformer import LayerShape, decoder_layer_1d
from paraplan.specs.fields import with_fields
from paraplan.specs.system import SystemSpec


def with_runtime(system: SystemSpec, **runtime) -> SystemSpec:
    return with_fields(
        system, {f"accelerator.efficiency.runtime.{k}": v for k, v in runtime.items()}
    )


def test_swizzle_bytes_by_hand():
    # Llama 3 70B qkv at TP 1: A = 8192 tokens x 8192, B = 8192 x 10240; scales 1 B per 16 elements, read + write
    shape = (1, 8192, 10240, 8192)
    a, b = qz.scale_swizzle_bytes(shape, "nvfp4", True)
    assert a == pytest.approx(2 * 8192 * 8192 / 16) and b == pytest.approx(2 * 8192 * 10240 / 16)
    # a grouped GEMM of 4 experts: one multi-tensor kernel per operand list, all experts' scales
    g = qz.scale_swizzle_bytes((4, 512, 2048, 1024), "nvfp4", True)
    assert g == pytest.approx((2 * 4 * 512 * 1024 / 16, 2 * 4 * 1024 * 2048 / 16))
    # pre-swizzled scales (a later TE), and the other dtypes: no kernel
    assert qz.scale_swizzle_bytes(shape, "nvfp4", False) == ()
    assert qz.scale_swizzle_bytes(shape, "fp8", True) == ()
    assert qz.scale_swizzle_bytes(shape, "mxfp4", True) == ()


def test_swizzle_time_on_the_hbm_roofline():
    acc = with_runtime(load_system("gb300-nvl72"), nvfp4_scale_swizzle=True).accelerator
    rate, over = acc.hbm_bandwidth * acc.efficiency.hbm, acc.efficiency.kernel_overhead_s
    shape = (1, 8192, 10240, 8192)
    expected = (2 * 8192 * 8192 / 16 + 2 * 8192 * 10240 / 16) / rate + 2 * over
    assert scale_swizzle_s(shape, acc, "nvfp4") == pytest.approx(expected)
    assert scale_swizzle_s(shape, acc, "fp8") == 0.0


def test_gemm_op_pays_a_swizzle_per_call():
    """Forward: one GEMM call; backward: dgrad (m, k, depth n) and wgrad (k, n, depth m), each with its own
    two swizzles: dgrad's operands dY (m x n) and Wᵀ (n x k), wgrad's Xᵀ (k x m) and dY (m x n)."""
    base = with_runtime(load_system("gb300-nvl72"), fp8_recipe="nvfp4")
    on = with_runtime(base, nvfp4_scale_swizzle=True).accelerator
    off = with_runtime(base, nvfp4_scale_swizzle=False).accelerator
    model = load_model("llama3-70b")
    ops = decoder_layer_1d(model, LayerShape(1, 1, 1, 8192, False, "flash", "nvfp4")).ops
    qkv = next(op for op in ops if op.name == "qkv_projection")
    _, m, n, k = qkv.gemm_shape
    (f1, b1), (f0, b0) = op_times_s(qkv, on, "nvfp4"), op_times_s(qkv, off, "nvfp4")
    rate, over = on.hbm_bandwidth * on.efficiency.hbm, on.efficiency.kernel_overhead_s

    def pair(elems_a: float, elems_b: float) -> float:
        return 2 * (elems_a + elems_b) / 16 / rate + 2 * over

    assert f1 - f0 == pytest.approx(pair(m * k, k * n))
    assert b1 - b0 == pytest.approx(pair(m * n, n * k) + pair(k * m, m * n))
    # fp8 GEMMs take no swizzle from this switch
    assert op_times_s(qkv, on, "fp8") == op_times_s(qkv, off, "fp8")


def test_profile_states_the_swizzle_and_default_is_off():
    f = load_framework("megatron-bridge-26.02-nvfp4")
    assert f.nvfp4_scale_swizzle
    runtime = framework_system(f, load_system("gb200-nvl72")).accelerator.efficiency.runtime
    assert runtime.nvfp4_scale_swizzle
    assert not load_system("gb200-nvl72").accelerator.efficiency.runtime.nvfp4_scale_swizzle
    assert not load_framework("megatron-bridge-25.11-mxfp8").nvfp4_scale_swizzle


@pytest.mark.parametrize("system_name", ["dgx-b200", "gb200-nvl72", "gb300-nvl72"])
def test_swizzles_only_add_time(system_name):
    """Step time never decreases when a kernel is added: a layer's every GEMM with the swizzles is at least the
    same GEMM without them, by exactly its swizzle kernels."""
    base = with_runtime(load_system(system_name), fp8_recipe="nvfp4", nvfp4_rht=True)
    on = with_runtime(base, nvfp4_scale_swizzle=True).accelerator
    off = with_runtime(base, nvfp4_scale_swizzle=False).accelerator
    for tp in (1, 2, 4):
        shape = LayerShape(tp, 1, 1, 4096, tp > 1, "flash", "nvfp4")
        for op in decoder_layer_1d(load_model("llama3-8b"), shape).ops:
            t1, t0 = sum(op_times_s(op, on, "nvfp4")), sum(op_times_s(op, off, "nvfp4"))
            assert t1 > t0 if op.kind == "gemm" else t1 == t0
