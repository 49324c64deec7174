"""torch._grouped_mm priced from a grouped table's one-kernel column (cost.compute.torch_grouped_mm_s)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.specs.fields import with_fields

H100 = "h100-sxm5-80gb"


def _grouped_acc(table: str | None, implementation: str = "torch-grouped-mm"):
    fields = {"accelerator.efficiency.runtime.grouped_gemm": implementation}
    if table:
        fields["accelerator.kernel_tables"] = table
    return with_fields(load_system("dgx-h100-80gb"), fields).accelerator


def test_torch_grouped_mm_reads_the_measured_grouped_kernel_not_the_expert_loop():
    from paraplan.cost.compute import grouped_gemm_time_s, one_kernel_grouped_s

    # grouped_gemm.csv: 8 experts x 1024 tokens, k 4096, n 14336: time_us 1266.9680, loop_time_us 1246.6160
    shape = (8, 1024, 14336, 4096)
    flops = 2.0 * 8 * 1024 * 14336 * 4096
    acc = _grouped_acc(H100)
    assert grouped_gemm_time_s(flops, shape, acc, "bf16") == pytest.approx(1266.9680e-6 + 40e-6)
    # Transformer Engine's per-expert loop keeps reading the loop column: 1246.6160 us + 2 ramps
    te = _grouped_acc(H100, "te-multistream")
    assert grouped_gemm_time_s(flops, shape, te, "bf16") == pytest.approx(1246.6160e-6 + 2 * 40e-6)
    # no such column (a table whose grouped file holds only the loop), fp8, or one expert: the batched-GEMM form
    for other, dtype, sh in (
        (_grouped_acc("b200-simumax"), "bf16", shape),
        (acc, "fp8", shape),
        (acc, "bf16", (1, 1024, 14336, 4096)),
    ):
        f = flops / sh[0] if sh[0] == 1 else flops
        assert grouped_gemm_time_s(f, sh, other, dtype) == pytest.approx(
            one_kernel_grouped_s(f, sh, other, dtype)
        )
