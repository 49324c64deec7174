"""fp8 / FP4 recipes as priced inputs (issue 33, cost.quantisation): each recipe's passes and bytes by hand,
the measured H100 fp8 kernels at their 16k-token rate, the HBM fallback, and the orderings a recipe must keep."""

from __future__ import annotations

import itertools
import random

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost import quantisation as qz
from paraplan.cost.compute import op_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph.transformer import LayerShape, decoder_layer_1d, fp8_cast_op
from paraplan.specs.fields import with_fields
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.estimate import estimate

H100_TABLE = "h100-sxm5-80gb"
HEAVIER = ("delayed", "current")  # current = delayed + one amax read of the operand


def with_recipe(system: SystemSpec, recipe: str, table: str | None = None) -> SystemSpec:
    data = system.model_dump()
    data["accelerator"]["efficiency"]["runtime"]["fp8_recipe"] = recipe
    if table is not None:
        data["accelerator"]["kernel_tables"] = table
    return SystemSpec.model_validate(data)


def test_bytes_per_operand_element_by_hand():
    # delayed: read bf16 2 B, write fp8 and its transpose 1 + 1 B; the amax fused, the scale from history
    assert qz.operand_bytes("delayed", "fp8") == 4.0
    # current: an amax pass reads the operand once more before the same cast-transpose
    assert qz.operand_bytes("current", "fp8") == 6.0
    # blockwise: fp32 scale per 1x128 block in each orientation; MXFP8: E8M0 byte per 32 in each copy
    assert qz.operand_bytes("blockwise", "fp8") == pytest.approx(4.0 + 2 * 4 / 128)
    assert qz.operand_bytes("mxfp8", "fp8") == pytest.approx(4.0 + 2 / 32)
    # NVFP4: per-tensor amax pass, then 4-bit values with an E4M3 scale per 16 elements, both ways
    assert qz.operand_bytes("nvfp4", "nvfp4") == pytest.approx(2.0 + 2.0 + 2 * (0.5 + 1 / 16))
    # fp8 runs the runtime's recipe (cost.runtimes maps a profile's "none" to delayed); FP4 dtypes their own
    assert qz.run_recipe("current", "fp8") == "current"
    assert qz.run_recipe("current", "nvfp4") == "nvfp4"


def test_analytical_fallback_by_hand():
    system = load_system("dgx-h100-80gb")
    acc = with_recipe(system, "current").accelerator
    rate = acc.hbm_bandwidth * acc.efficiency.hbm
    elems, rows, width = 4096.0 * 8192, 4096.0, 8192.0
    t = qz.operand_quantisation_s(acc, elems, rows, width, "fp8")
    # two passes: amax 2 B, cast-transpose 4 B, each with the kernel overhead
    assert t == pytest.approx(6.0 * elems / rate + 2 * acc.efficiency.kernel_overhead_s)
    delayed = with_recipe(system, "delayed").accelerator
    d = qz.operand_quantisation_s(delayed, elems, rows, width, "fp8")
    assert d == pytest.approx(4.0 * elems / rate + acc.efficiency.kernel_overhead_s)


def test_measured_h100_kernels_at_their_16k_token_rate():
    system = load_system("dgx-h100-80gb")
    acc = with_recipe(system, "current", H100_TABLE).accelerator
    # fp8_kernels.csv at 16,384 tokens x 8,192: fused pass 410.4724 us (4 B / element), amax 287.291 us (2 B)
    fused = 4.0 * 16384 * 8192 / 410.4724e-6
    amax = 2.0 * 16384 * 8192 / 287.291e-6
    assert qz.measured_rate(acc, qz.FUSED_ROW, 4.0, 8192) == pytest.approx(fused)
    assert qz.measured_rate(acc, qz.AMAX_ROW, 2.0, 8192) == pytest.approx(amax)
    # 4k tokens take the 16k rows' rate (the 4k fused rows are host-bound): time scales with the elements
    elems = 4096.0 * 8192
    t = qz.operand_quantisation_s(acc, elems, 4096.0, 8192.0, "fp8")
    assert t == pytest.approx(elems * 2.0 / amax + elems * 4.0 / fused)
    # between measured widths: log-log between neighbours; beyond them, the edge's rate
    mid = qz.measured_rate(acc, qz.FUSED_ROW, 4.0, 8192 * 2**0.5)
    lo, hi = sorted((fused, qz.measured_rate(acc, qz.FUSED_ROW, 4.0, 14336)))
    assert lo <= mid <= hi
    assert qz.measured_rate(acc, qz.FUSED_ROW, 4.0, 1e6) == qz.measured_rate(
        acc, qz.FUSED_ROW, 4.0, 14336
    )


@pytest.mark.parametrize("table", [None, H100_TABLE])
def test_a_heavier_recipe_is_never_faster(table):
    rng = random.Random(33)
    system = load_system("dgx-h100-80gb")
    systems = [with_recipe(system, r, table).accelerator for r in HEAVIER]
    model = load_model("llama3-8b")
    for _ in range(20):
        shape = LayerShape(
            rng.choice([1, 2, 4, 8]), 1, rng.choice([1, 2]), rng.choice([2048, 8192]),
            True, "flash", "fp8",
        )  # fmt: skip
        op = fp8_cast_op(model, shape)
        times = [op_times_s(op, acc, "fp8") for acc in systems]
        for light, heavy in itertools.pairwise(times):
            assert heavy[0] > light[0] and heavy[1] > light[1]


def test_a_heavier_recipe_never_gives_a_faster_step():
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=8, tp=2, global_batch=32, seq_length=4096, dtype="fp8", zero=1)
    steps = [
        estimate(model, framework_system(load_framework(name), system), plan).step_time_s
        for name in ("megatron-core", "megatron-bridge-25.09")  # delayed, current
    ]
    assert steps[1] > steps[0]


def test_fp8_layer_never_slower_than_bf16_beyond_its_quantisation():
    """The invariant the model keeps: an fp8 layer's compute is at most the bf16 layer's plus its operand
    quantisation, on a system whose fp8 GEMM rate is at least its bf16 rate (every GEMM runs at least as fast;
    attention and element-wise ops run in bf16 in both); so fp8 is faster whenever the GEMM time saved exceeds
    the quantisation."""
    rng = random.Random(7)
    model = load_model("llama3-70b")
    for name in ("dgx-h100-80gb", "dgx-b200"):
        system = load_system(name)
        assert system.accelerator.peak_matrix_flops("fp8") * system.accelerator.gemm_efficiency_cap(
            "fp8"
        ) >= system.accelerator.peak_matrix_flops("bf16") * system.accelerator.gemm_efficiency_cap(
            "bf16"
        )
        for recipe in ("delayed", "current", "blockwise", "mxfp8"):
            acc = with_recipe(system, recipe).accelerator
            for _ in range(8):
                tp, seq = rng.choice([1, 2, 4, 8]), rng.choice([2048, 4096, 8192])
                common = (tp, 1, 1, seq, tp > 1, "flash")
                total = {}
                quant = 0.0
                for dtype in ("bf16", "fp8"):
                    ops = decoder_layer_1d(model, LayerShape(*common, dtype)).ops
                    times = [sum(op_times_s(op, acc, dtype)) for op in ops]
                    total[dtype] = sum(times)
                    quant += sum(t for op, t in zip(ops, times) if op.name == "fp8_casts")
                assert quant > 0.0
                assert total["fp8"] <= total["bf16"] + quant + 1e-12


def test_weights_are_quantised_once_per_step():
    # bf16 weights: the recipe's operand passes once a step (TE's is_first_microbatch cache); fp8 primary
    # weights (fp8_params): the transpose of the gathered fp8 weight, read 1 + write 1 B; bf16 runs: nothing
    assert qz.weight_quantisation_bytes("delayed", "fp8", False) == 4.0
    assert qz.weight_quantisation_bytes("current", "fp8", False) == 6.0
    assert qz.weight_quantisation_bytes("current", "fp8", True) == 2.0
    assert qz.weight_quantisation_bytes("delayed", "bf16", False) == 0.0
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=8, tp=2, global_batch=32, seq_length=4096, dtype="fp8", zero=1)

    def optimizer_s(recipe: str, dtype: str) -> float:
        est = estimate(model, with_recipe(system, recipe), plan.model_copy(update={"dtype": dtype}))
        return est.breakdown.optimizer_s

    # the tail's optimizer region grows by the stage's layer weights x bytes / HBM rate: 4 B delayed, 6 B current,
    # independent of the number of micro-batches
    bf16, delayed, current = (
        optimizer_s("delayed", "bf16"),
        optimizer_s("delayed", "fp8"),
        optimizer_s("current", "fp8"),
    )
    assert current - delayed == pytest.approx(0.5 * (delayed - bf16), rel=1e-9)
    assert delayed > bf16
    more = PlanSpec(gpus=8, tp=2, global_batch=128, seq_length=4096, dtype="fp8", zero=1)
    assert estimate(model, with_recipe(system, "delayed"), more).breakdown.optimizer_s == delayed


def with_runtime(system: SystemSpec, **runtime) -> SystemSpec:
    return with_fields(
        system, {f"accelerator.efficiency.runtime.{k}": v for k, v in runtime.items()}
    )


def test_nvfp4_rht_passes_by_hand():
    q = 0.5 + 1 / 16  # E2M1 + one E4M3 scale per 16 elements
    # RHT (TE v2.12 NVFP4Quantizer::quantize_impl): amax read 2, rowwise cast 2 + q, fused RHT columnwise cast 2 + q
    assert qz.rht_cast_passes("nvfp4") == pytest.approx((2 + q, 2 + q))
    assert qz.operand_bytes("nvfp4", "nvfp4", rht=True) == pytest.approx(2 + 2 * (2 + q))
    # without it one cast writes both orientations: one read of the operand less
    assert qz.operand_bytes("nvfp4", "nvfp4", rht=True) - qz.operand_bytes(
        "nvfp4", "nvfp4"
    ) == pytest.approx(2.0)
    # weights take no transform (2D 16x16 scales instead): amax + one cast, once per step
    assert qz.weight_quantisation_bytes("nvfp4", "nvfp4", False) == pytest.approx(2 + 2 + 2 * q)
    # MXFP4: MXFP8's single pass, its E8M0 scales counted once (q = 0.5 + 1/32 holds them)
    assert qz.operand_bytes("mxfp8", "mxfp4") == pytest.approx(2 + 2 * (0.5 + 1 / 32))
    assert qz.oriented_bytes("mxfp8", "fp8") == pytest.approx(1 + 1 / 32)


def test_nvfp4_rht_pass_time_on_the_hbm_roofline():
    system = load_system("gb300-nvl72")
    acc = with_runtime(system, fp8_recipe="nvfp4", nvfp4_rht=True).accelerator
    plain = with_runtime(system, fp8_recipe="nvfp4", nvfp4_rht=False).accelerator
    rate = acc.hbm_bandwidth * acc.efficiency.hbm
    over = acc.efficiency.kernel_overhead_s
    elems, rows, width = 8192.0 * 8192, 8192.0, 8192.0
    q = 0.5 + 1 / 16
    t = qz.operand_quantisation_s(acc, elems, rows, width, "nvfp4")
    # three kernels: amax 2 B, rowwise cast 2 + q, RHT columnwise cast 2 + q, each with the kernel overhead
    assert t == pytest.approx((2 + 2 * (2 + q)) * elems / rate + 3 * over)
    p = qz.operand_quantisation_s(plain, elems, rows, width, "nvfp4")
    assert p == pytest.approx((2 + 2 + 2 * q) * elems / rate + 2 * over)


def test_nvfp4_profile_states_the_recipe_as_run():
    """megatron-bridge-26.02-nvfp4: Megatron-Bridge v0.3.0 bf16_with_nvfp4_mixed under TE 2.12 defaults."""
    f = load_framework("megatron-bridge-26.02-nvfp4")
    assert (f.fp8_recipe, f.nvfp4_rht, f.fp8_param_gather, f.fp8_weight_copies) == (
        "nvfp4", True, False, True,
    )  # fmt: skip
    assert (f.overlap_tp_comm, f.cuda_graph_scope, f.grad_dtype) == (False, "none", "bf16")
    runtime = framework_system(f, load_system("gb300-nvl72")).accelerator.efficiency.runtime
    assert runtime.nvfp4_rht and runtime.fp8_recipe == "nvfp4"


def test_fp4_weight_copies_by_hand():
    from paraplan.cost.memory import fp8_weight_copy_bytes_per_param as copies

    # rowwise + columnwise copies at the stored bytes with block scales: NVFP4 2 x 0.5625, MXFP4 2 x 0.53125
    assert copies("nvfp4", True) == pytest.approx(1.125)
    assert copies("mxfp4", True) == pytest.approx(1.0625)
    assert (
        copies("fp8", True) == 2.0 and copies("nvfp4", False) == 0.0 and copies("bf16", True) == 0.0
    )


def fp4_systems() -> list[str]:
    """The catalog systems with an NVFP4 peak."""
    from paraplan.catalog import system_names

    return [n for n in system_names() if "nvfp4" in load_system(n).accelerator.matrix_flops]


def test_fp4_systems_are_the_blackwell_parts():
    assert set(fp4_systems()) >= {"dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72"}


@pytest.mark.parametrize("system_name", fp4_systems())
def test_fp4_layer_never_slower_than_fp8_beyond_its_extra_passes(system_name):
    """What holds at the kernel level: an NVFP4 layer's compute is at most the same layer's in fp8 (MXFP8's
    single pass, the Blackwell fp8 recipe) plus the NVFP4 quantisation's extra time over MXFP8's. Every GEMM runs
    at the FP4 peak x the gemm_fp8 cap x fp4_gemm_share (at least the fp8 rate on every FP4 part), attention and element-wise
    ops in bf16 in both; only the quantisation passes may make FP4 slower (its amax pass and, with RHT, the second
    cast read), and they do so only where the GEMM time saved is smaller than those passes."""
    rng = random.Random(32)
    model = load_model("llama3-70b")
    base = load_system(system_name)
    acc = base.accelerator
    fp4_rate = acc.peak_matrix_flops("nvfp4") * acc.gemm_efficiency_cap("nvfp4")
    assert fp4_rate >= acc.peak_matrix_flops("fp8") * acc.gemm_efficiency_cap("fp8")
    fp8 = with_runtime(base, fp8_recipe="mxfp8").accelerator
    fp4 = with_runtime(base, fp8_recipe="nvfp4", nvfp4_rht=True).accelerator
    for _ in range(8):
        tp, seq = rng.choice([1, 2, 4, 8]), rng.choice([2048, 4096, 8192])
        common = (tp, 1, 1, seq, tp > 1, "flash")
        total, quant = {}, {}
        for dtype, acc in (("fp8", fp8), ("nvfp4", fp4)):
            ops = decoder_layer_1d(model, LayerShape(*common, dtype)).ops
            times = [sum(op_times_s(op, acc, dtype)) for op in ops]
            total[dtype] = sum(times)
            quant[dtype] = sum(t for op, t in zip(ops, times) if op.name == "fp8_casts")
        extra = max(0.0, quant["nvfp4"] - quant["fp8"])
        assert extra > 0.0  # the amax pass and the RHT cast's read
        assert total["nvfp4"] <= total["fp8"] + extra + 1e-12
        # at these shapes the GEMM time saved exceeds the extra passes: FP4 is faster outright
        assert total["nvfp4"] < total["fp8"]
