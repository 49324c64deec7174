"""Review mends in cost/: each rule decided in one place (the GEMM cap key, the composites' casts, the
measured fp8 kernels' rate)."""

from __future__ import annotations

from paraplan.catalog import load_system
from paraplan.specs.system import gemm_cap_key


def test_the_gemm_cap_is_the_one_its_key_names():
    """AcceleratorSpec.gemm_efficiency_cap prices a dtype by specs.system.gemm_cap_key's cap, falling back
    to gemm where the profile leaves gemm_fp8 unset."""
    acc = load_system("dgx-h100-80gb").accelerator
    unset = acc.model_copy(
        update={"efficiency": acc.efficiency.model_copy(update={"gemm_fp8": None})}
    )
    for dtype in ("bf16", "fp16", "fp32", "tf32", "fp8", "nvfp4", "mxfp4"):
        key = gemm_cap_key(dtype)
        assert key == ("gemm_fp8" if dtype in ("fp8", "nvfp4", "mxfp4") else "gemm")
        assert acc.gemm_efficiency_cap(dtype) == getattr(acc.efficiency, key)
        assert unset.gemm_efficiency_cap(dtype) == acc.efficiency.gemm
