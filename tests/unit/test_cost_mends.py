"""Review mends in cost/: each rule decided in one place (the GEMM cap key, the composites' casts, the
measured fp8 kernels' rate)."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost import host as H
from paraplan.cost import kernel_tables as kt
from paraplan.cost import quantisation as qz
from paraplan.cost.eager_kernels import composite_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph import eager_modules as em
from paraplan.graph.ops import Op
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


def _rate_as_first_written(acc, op: str, nominal: float, width: float) -> float | None:
    """cost.quantisation.measured_rate as first written (its own CSV parse and log-log interpolation),
    the reference the shared kernel_tables.top_rows_scatter must reproduce."""
    table = kt.load_table(acc.kernel_tables, acc.l2_cache)
    rows = [r for r in table.rows.get("fp8_kernels", []) if r.get("op") == op]
    if not rows:
        return None
    top = max(float(r["tokens"]) for r in rows)
    pts = sorted(
        (float(r["width"]), nominal * top * float(r["width"]) / (float(r["time_us"]) * 1e-6))
        for r in rows
        if float(r["tokens"]) == top
    )
    widths, rates = [w for w, _ in pts], [b for _, b in pts]
    x = min(max(math.log2(width), math.log2(widths[0])), math.log2(widths[-1]))
    for i in range(len(widths) - 1):
        x0, x1 = math.log2(widths[i]), math.log2(widths[i + 1])
        if x <= x1:
            t = 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
            return 2.0 ** ((1 - t) * math.log2(rates[i]) + t * math.log2(rates[i + 1]))
    return rates[-1]


def _h100_with(table: str):
    acc = load_system("dgx-h100-80gb").accelerator
    return acc.model_copy(update={"kernel_tables": table})


def test_measured_fp8_rate_is_the_shared_scatter_and_unchanged():
    acc = _h100_with("h100-sxm5-80gb")
    for op, nominal in ((qz.FUSED_ROW, qz.FUSED_NOMINAL_BYTES), (qz.AMAX_ROW, qz.READ_BYTES)):
        for width in (512, 1000, 2048, 3000, 4096, 7168, 8192, 14336, 28672, 50000):
            old = _rate_as_first_written(acc, op, nominal, width)
            assert old is not None
            assert qz.measured_rate(acc, op, nominal, width) == pytest.approx(old, rel=1e-12)
    assert qz.measured_rate(acc, "no_such_kernel", 4.0, 4096) is None
    assert (
        qz.measured_rate(acc.model_copy(update={"kernel_tables": None}), qz.AMAX_ROW, 2, 4096)
        is None
    )


def test_an_fp8_table_with_a_shape_column_is_read(tmp_path):
    """load_table accepts fp8_kernels rows with a ROWSxWIDTH ``shape`` column instead of ``tokens`` and
    ``width``; the measured rate reads them alike (the largest token count's rows only)."""
    rows = [("amax", 4096, 2048, 30.0), ("amax", 16384, 2048, 60.0), ("amax", 16384, 8192, 200.0)]
    for name, columns, fmt in (
        ("shaped", "op,shape,time_us", "{0},{1}x{2},{3}"),
        ("columns", "op,tokens,width,time_us", "{0},{1},{2},{3}"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "table.yaml").write_text("files:\n  fp8_kernels: fp8.csv\n")
        (folder / "fp8.csv").write_text(
            "\n".join([columns, *(fmt.format(*r) for r in rows)]) + "\n"
        )
    shaped, columns = _h100_with(str(tmp_path / "shaped")), _h100_with(str(tmp_path / "columns"))
    for width in (1024, 2048, 4096, 8192, 16384):
        rate = qz.measured_rate(shaped, qz.AMAX_ROW, 2.0, width)
        assert rate == pytest.approx(qz.measured_rate(columns, qz.AMAX_ROW, 2.0, width), rel=1e-12)
        assert rate == pytest.approx(_rate_as_first_written(columns, qz.AMAX_ROW, 2.0, width))
    # at the measured 16384-token widths: bytes / time of those rows (the 4096-token row is not read)
    assert qz.measured_rate(shaped, qz.AMAX_ROW, 2.0, 2048) == pytest.approx(
        2 * 16384 * 2048 / 60e-6
    )
    kt.clear_caches()


@pytest.mark.parametrize("family", sorted(em.FAMILY_ROLE))
@pytest.mark.parametrize("residual", ["fp32", "bf16"])
def test_the_host_counts_the_kernels_a_composite_is_timed_by(family, residual):
    """The host's count of a composite (cost.host.op_kernels) is the length of the kernel list its GPU time
    sums (cost.eager_kernels.composite_times_s), autocast's casts included: at a negligible-byte shape
    every kernel takes the launch floor, so the GPU time is the count × the floor. A bf16-input q/k norm
    adds no cast though the profile runs norms in fp32 (its input is the bf16 q/k heads)."""
    # the score families are composites under the Megatron-LM releases that name them (fp16 on V100)
    scores = family.startswith("scores")
    profile = "megatron-lm-2019" if scores else "hf-transformers"
    system = framework_system(
        load_framework(profile), load_system("dgx-2h" if scores else "dgx-h100-80gb")
    )
    acc = system.accelerator
    precisions = {**acc.efficiency.eager_kernels, "residual": residual}
    acc = acc.model_copy(
        update={"efficiency": acc.efficiency.model_copy(update={"eager_kernels": precisions})}
    )
    e = acc.efficiency
    op = Op("x", "memory", 0.0, 2.0, 0.0, 4.0, kernel=(family, 1.0, 1.0))
    times = composite_times_s(op, acc, "fp16" if scores else "bf16")
    assert times is not None and (e.autocast_casts or scores)
    impl = (e.module_impl, e.eager_kernels)
    host = H.op_kernels(op, e.host_eager, e.autocast_casts, impl=impl, wide_roles=H.wide_roles(e))
    floor = qz.copy_floor_s(acc)
    assert host == (round(times[0] / floor), round(times[1] / floor))
    assert times == pytest.approx((host[0] * floor, host[1] * floor), rel=1e-9)
    if family == "qk_rmsnorm":
        assert host == (2 * 8, 2 * 17)  # LlamaRMSNorm on bf16 q and k, no activation casts
    if family == "scores":
        assert host == (5, 4)  # the 2019 code's div, mul, sub, softmax, dropout; 4 backward


def test_a_composite_is_built_once_and_the_host_context_once_per_op_list():
    impl = {"norm": "transformers-rmsnorm", "activation": "fused"}
    first = em.composite("rmsnorm", impl, 4, 2)
    assert first is em.composite("rmsnorm", dict(reversed(impl.items())), 4, 2)
    assert first == em.rmsnorm_upcast(4) and em.composite("gelu_new", impl, 2, 2) is None
    system = framework_system(load_framework("hf-transformers"), load_system("dgx-h100-80gb"))
    e = system.accelerator.efficiency
    for family in sorted(em.FAMILY_ROLE):
        op = Op("x", "memory", 0.0, 2.0, 0.0, 4.0, kernel=(family, 8.0, 64.0))
        assert H.op_host_s(op, e, False, context=H.eager_context(e)) == H.op_host_s(op, e, False)
