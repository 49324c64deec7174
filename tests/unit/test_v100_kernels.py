"""The V100 kernel table (DeepBench) and the unfused Megatron-LM score kernels (issue 32)."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import op_times_s, table_clock_ratio
from paraplan.graph.eager_modules import megatron_scores
from paraplan.graph.ops import Op

V100 = "v100-sxm2-deepbench"

# rows copied by hand from DeepBench results/train/DeepBench_NV_V100.xlsx (commit 30c5115):
# (sheet, sheet row, M, N, K, A transpose, B transpose, time in ms)
SOURCE_ROWS = [
    ("fp16", 24, 4096, 7000, 4096, "N", "N", 2.092),
    ("fp16", 44, 4096, 7000, 4096, "T", "N", 2.147),
    ("fp16", 100, 4608, 24000, 1536, "N", "N", 3.447),
    ("fp16", 110, 4608, 24000, 1536, "T", "N", 3.642),
    ("fp16", 138, 512, 16, 512, "N", "N", 0.008),
    ("fp16", 52, 35, 8457, 1760, "N", "N", 0.083),  # run padded: M 35 -> 40 (NN pads M and K)
    ("fp16", 45, 1760, 7133, 1760, "N", "T", 0.452),  # NT pads M and N: N 7133 -> 7136
    ("fp32", 5, 1760, 16, 1760, "N", "N", 0.038),
    ("fp32", 24, 4096, 7000, 4096, "N", "N", 15.894),
]


def _csv_rows() -> dict[str, dict[str, str]]:
    table = kt.load_table(V100)
    return {row["sheet_row"]: row for row in table.rows["gemm"]}


@pytest.mark.parametrize("row", SOURCE_ROWS)
def test_the_table_reproduces_its_source_rows(row):
    dtype, sheet_row, m, n, k, ta, tb, ms = row
    got = _csv_rows()[f"{dtype}:{sheet_row}"]
    assert (int(got["deepbench_m"]), int(got["deepbench_n"]), int(got["deepbench_k"])) == (m, n, k)
    # written m = DeepBench's N (the mini-batch), n = M; fp16 as gemm_bench.cu ran it, padded to 8 where
    # cuBLAS's tensor-op rule asks (NN / TN: M and K; NT: M and N)
    if dtype == "fp16":
        up = lambda x: -(-x // 8) * 8
        m, n, k = (up(m), n, up(k)) if tb == "N" else (up(m), up(n), k)
    assert (int(got["m"]), int(got["n"]), int(got["k"])) == (n, m, k)
    assert (got["a_transpose"], got["b_transpose"], got["dtype"]) == (ta, tb, dtype)
    assert float(got["time_us"]) == pytest.approx(ms * 1000, rel=1e-9)


def test_every_row_has_provenance_and_the_table_lists_the_v100():
    table = kt.load_table(V100)
    assert len(table.rows["gemm"]) == 320 and all(r["sheet_row"] for r in table.rows["gemm"])
    assert "V100-SXM2-16GB" in table.provenance["accelerators"]
    assert "30c5115" in table.provenance["source"]
    assert kt.tables_measured_on("V100-SXM2-16GB") == [V100]


def test_a_shape_under_several_transposes_is_their_geometric_mean_rate():
    # 4096 x 7000 x 4096 fp16: NN 2.092 ms, TN 2.147 ms -> time at the geometric-mean rate
    m, n, k = 7000, 4096, 4096
    expected = math.sqrt(2.092e-3 * 2.147e-3)
    assert kt.gemm_time_s(V100, None, 1, m, n, k, "fp16") == pytest.approx(expected, rel=1e-12)
    # fp32 1760 x 16 x 1760 (DeepBench M, N, K): NN 38 us (row 5), TN 37 us (row 25)
    expected = math.sqrt(38e-6 * 37e-6)
    assert kt.gemm_time_s(V100, None, 1, 16, 1760, 1760, "fp32") == pytest.approx(
        expected, rel=1e-12
    )


def test_the_dgx2h_prices_the_sxm2_table_at_the_clock_ratio():
    sxm3 = load_system("dgx-2h").accelerator
    sxm2 = load_system("dgx-1-v100").accelerator
    assert table_clock_ratio(sxm3, "fp16") == pytest.approx(125 / 130, rel=1e-12)
    assert table_clock_ratio(sxm3, "fp32") == pytest.approx(15.7 / 16.4, rel=1e-12)
    assert table_clock_ratio(sxm2, "fp16") == 1.0
    assert table_clock_ratio(load_system("dgx-h100-80gb").accelerator, "bf16") == 1.0
    op = Op("x", "gemm", 2.0 * 7000 * 4096 * 4096, 0.0, 0.0, 0.0, (1, 7000, 4096, 4096))
    t2, t3 = op_times_s(op, sxm2, "fp16")[0], op_times_s(op, sxm3, "fp16")[0]
    ramp = sxm2.efficiency.gemm_ramp_s
    assert t2 - ramp == pytest.approx(math.sqrt(2.092e-3 * 2.147e-3), rel=1e-12)
    assert (t3 - ramp) / (t2 - ramp) == pytest.approx(125 / 130, rel=1e-12)


@pytest.mark.parametrize(
    ("version", "dropout", "fwd", "bwd", "kernels"),
    [
        ("megatron-2019", True, 21, 19, (5, 4)),  # div, mul, sub, softmax, dropout / 4 backward
        ("megatron-2019", False, 16, 14, (4, 3)),
        ("megatron-v1.0", True, 13, 15, (3, 3)),  # masked_fill_, softmax, dropout
        ("megatron-v1.0", False, 8, 10, (2, 2)),
    ],
)
def test_megatron_score_kernels_move_the_hand_counted_bytes(version, dropout, fwd, bwd, kernels):
    c = megatron_scores(version, 2, dropout)
    assert sum(k.bytes for k in c.forward) == fwd
    assert sum(k.bytes for k in c.backward) == bwd
    assert c.kernels == kernels


def test_the_2019_stack_prices_its_score_passes_at_the_hbm_rate():
    from paraplan.catalog import load_framework
    from paraplan.cost.frameworks import framework_system

    base = load_system("dgx-2h")
    rows, width = 128 * 1024, 1024  # b·a·s rows of s scores (1.2B: b 8, a 16, s 1024)
    op = Op("softmax_dropout", "memory", 0.0, 9.0 * rows * width, 0.0, 18.0 * rows * width)
    op = op._replace(kernel=("scores", rows, width))
    rate = base.accelerator.hbm_bandwidth * base.accelerator.efficiency.hbm
    # the 2019 stack's PyTorch 1.1 softmax runs at half the rate (softmax_rate_share 0.5): its 4 B forward and
    # 6 B backward count twice, 21 + 4 and 19 + 6 B at the HBM rate; v1.0's persistent softmax at the rate
    for name, fwd, bwd in (("megatron-lm-2019", 25, 25), ("megatron-lm-v1.0", 13, 15)):
        acc = framework_system(load_framework(name), base).accelerator
        got = op_times_s(op, acc, "fp16")
        assert got == pytest.approx(
            (fwd * rows * width / rate, bwd * rows * width / rate), rel=1e-9
        )
    # a stack whose scores are fused keeps the op graph's count (9 B forward, 18 B backward)
    acc = framework_system(load_framework("megatron-lm-2021"), base).accelerator
    eff = acc.efficiency
    expected = 9.0 * rows * width / rate + eff.kernel_overhead_s
    assert op_times_s(op, acc, "fp16")[0] == pytest.approx(expected, rel=1e-9)


V100_PLANS = (
    ("gpt3-1.3b", {"gpus": 8, "micro_batch": 4, "global_batch": 64, "seq_length": 2048}),
    (
        "gpt3-2.7b",
        {"gpus": 8, "tp": 2, "pp": 2, "micro_batch": 2, "global_batch": 64, "seq_length": 2048},
    ),
    ("gpt3-350m", {"gpus": 8, "micro_batch": 8, "global_batch": 64, "seq_length": 1024}),
)


@pytest.mark.parametrize("system_name", ["dgx-2h", "dgx-1-v100"])
def test_v100_step_time_never_decreases_when_a_table_gemm_gets_slower(tmp_path, system_name):
    import random
    import shutil
    from importlib import resources

    from paraplan.catalog import load_model
    from paraplan.specs.fields import with_fields
    from paraplan.specs.plan import PlanSpec
    from paraplan.step.estimate import estimate

    base = load_system(system_name)
    assert base.accelerator.kernel_tables == V100
    src = resources.files("paraplan.catalog") / "kernels" / V100
    fp16 = {"dtype": "fp16", "attention": "unfused"}
    cases = [(load_model(m), PlanSpec(**p, **fp16)) for m, p in V100_PLANS]
    before = [estimate(m, base, p).step_time_s for m, p in cases]
    rng = random.Random(32)
    for trial in range(4):  # every row slower, then one row at a time (seeded)
        dst = tmp_path / f"t{trial}"
        shutil.copytree(src, dst)
        lines = (dst / "gemm.csv").read_text().splitlines()
        col = lines[0].split(",").index("time_us")
        rows = range(1, len(lines)) if trial == 0 else [rng.randrange(1, len(lines))]
        for i in rows:
            cells = lines[i].split(",")
            cells[col] = repr(float(cells[col]) * 1.25)
            lines[i] = ",".join(cells)
        (dst / "gemm.csv").write_text("\n".join(lines) + "\n")
        slow = with_fields(base, {"accelerator.kernel_tables": str(dst)})
        after = [estimate(m, slow, p).step_time_s for m, p in cases]
        assert all(a >= b * (1 - 1e-12) for b, a in zip(before, after)), (trial, before, after)
        if trial == 0:
            assert all(a > b * 1.05 for b, a in zip(before, after))
    kt.clear_caches()
