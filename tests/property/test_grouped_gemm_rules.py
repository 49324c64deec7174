"""Issue 33's grouped-GEMM rules on every catalog accelerator with fp8, every implementation and sampled expert
shapes: fp8 experts are never slower than bf16 at the same layout, and one local expert is a dense GEMM."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.catalog import load_system, system_names
from paraplan.cost.compute import GROUPED_GEMM_IMPLEMENTATIONS, gemm_time_s, grouped_gemm_time_s
from paraplan.specs.fields import with_fields

# every catalog system whose accelerator has an fp8 tensor rate (its own caps, tables and power cap)
FP8_ACCELERATORS = {
    name: load_system(name).accelerator
    for name in system_names()
    if "fp8" in load_system(name).accelerator.matrix_flops
}


shapes = st.tuples(
    st.integers(1, 64), st.integers(1, 16384), st.integers(64, 16384), st.integers(64, 16384)
)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, share=st.floats(0.0, 1.0))
def test_fp8_experts_are_never_slower_than_bf16(shape, share):
    b, m, n, k = shape
    flops = 2.0 * b * m * n * k
    for acc in FP8_ACCELERATORS.values():
        acc = acc.model_copy(
            update={"efficiency": acc.efficiency.model_copy(update={"grouped_gemm_fp8": share})}
        )
        for impl in GROUPED_GEMM_IMPLEMENTATIONS:
            a = with_fields(acc, {"efficiency.runtime.grouped_gemm": impl})
            fp8, bf16 = (grouped_gemm_time_s(flops, shape, a, d) for d in ("fp8", "bf16"))
            assert fp8 <= bf16 * (1 + 1e-12), (impl, acc.name, shape, fp8, bf16)


@settings(max_examples=60, deadline=None)
@given(shape=shapes)
def test_one_local_expert_is_a_dense_gemm(shape):
    """One local expert costs the dense GEMM of its shape, at the aligned rate: its routed token count is no
    operand's leading dimension (cost.compute.te_multistream_grouped_s)."""
    _, m, n, k = shape
    flops = 2.0 * m * n * k
    for acc in FP8_ACCELERATORS.values():
        for impl in GROUPED_GEMM_IMPLEMENTATIONS:
            a = with_fields(acc, {"efficiency.runtime.grouped_gemm": impl})
            for dtype in ("bf16", "fp8"):
                dense = gemm_time_s(flops, (1, m, n, k), a, dtype, leading_dims_aligned=True)
                assert grouped_gemm_time_s(flops, (1, m, n, k), a, dtype) == dense
