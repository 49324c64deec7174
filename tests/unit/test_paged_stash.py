"""Megatron-Core's MoE paged stash (specs.runtime moe_paged_stash, graph.moe_mlp.paged_stash_op,
stashed_row_bytes) against hand-computed values: the bytes its copies move and the buffer it keeps."""

import pytest
from tests.unit.test_fused_grouped_mlp import FUSED, QWEN, _ops

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.compute import op_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph.moe import ExpertShape
from paraplan.graph.moe_mlp import moe_mlp_activation_bytes, stashed_row_bytes
from paraplan.step.constants import stack_shape_fields

# one micro-batch of 4096 tokens, no TP / CP, forced balance (test_fused_grouped_mlp's shapes): Qwen3-30B-A3B
# over EP 8 routes 4096 x top-8 = 32768 rows to each rank; DeepSeek-V3 over EP 64 the same 32768 (top-8)
STASHED = FUSED._replace(paged_stash=1.2)
DSV3 = ExpertShape(ep=64, balance="forced")


def test_stashed_row_bytes_by_hand():
    # fc1 input and fc2 input columnwise in fp8 (1 B) with one e8m0 scale per 32 rows, the fc1 output
    # (gate and up, 2 x f) in bf16 and the fp32 routing probability
    # DeepSeek-V3: h 7168, f_e 2048: (7168 + 2048) x 33/32 + 2 x 2 x 2048 + 4 = 9504 + 8192 + 4
    assert stashed_row_bytes(load_model("deepseek-v3"), STASHED, DSV3) == 17700.0
    # Qwen3-30B-A3B: h 2048, f_e 768: (2048 + 768) x 33/32 + 2 x 2 x 768 + 4 = 2904 + 3072 + 4
    assert stashed_row_bytes(load_model("qwen3-30b-a3b"), STASHED, QWEN) == 5980.0


def test_the_stash_copies_by_hand():
    # forward the pack (read + write of every stashed row), backward the unpack (the same bytes)
    op = _ops("qwen3-30b-a3b", STASHED, QWEN)["paged_stash"]
    moved = 2 * 32768 * 5980
    assert (op.kind, op.fwd_bytes, op.bwd_bytes, op.fwd_flops, op.bwd_flops) == (
        "memory",
        moved,
        moved,
        0.0,
        0.0,
    )
    # the rest of the layer is unchanged
    ops = _ops("qwen3-30b-a3b", STASHED, QWEN)
    del ops["paged_stash"]
    assert ops == _ops("qwen3-30b-a3b", FUSED, QWEN)


def test_only_the_fused_grouped_mlp_stashes():
    # Megatron-Core opens the stash context in TEGroupedMLP._fused_forward only; a bf16 plan runs unfused
    assert "paged_stash" not in _ops("qwen3-30b-a3b", FUSED, QWEN)
    assert "paged_stash" not in _ops("qwen3-30b-a3b", STASHED._replace(dtype="bf16"), QWEN)
    assert "paged_stash" not in _ops(
        "qwen3-30b-a3b", STASHED._replace(fused_grouped_mlp=False), QWEN
    )


def test_the_stash_buffer_keeps_the_factor_times_the_rows_by_hand():
    m = load_model("qwen3-30b-a3b")
    plain = moe_mlp_activation_bytes(m, FUSED, QWEN, ())
    stashed = moe_mlp_activation_bytes(m, STASHED, QWEN, ())
    # without the stash the routed rows keep 2048 + 2 x 2 x 768 + 768 + 4 = 5892 B each; with it 1.2 x 5980
    assert stashed - plain == pytest.approx(32768 * (1.2 * 5980 - 5892))
    # the buffer is sized on the average rows (T x k x etp), whatever a learned router's busiest rank receives
    learned = QWEN._replace(balance="learned")
    assert moe_mlp_activation_bytes(m, STASHED, learned, ()) == pytest.approx(stashed)
    # a moe recomputation keeps nothing of the routed rows either way
    assert moe_mlp_activation_bytes(m, STASHED, QWEN, ("moe",)) == moe_mlp_activation_bytes(
        m, FUSED, QWEN, ("moe",)
    )


@pytest.mark.parametrize("system", ["gb200-nvl72", "gb300-nvl72"])
def test_the_stash_copies_are_priced_at_the_hbm_rate_by_hand(system):
    # the copy kernel's grid, min(rows, 2048) programs, fills every SM and streams at the HBM rate, so the
    # contention rule (cost.comm_contention) hides none of it: the op is an in-line memory op, each direction
    # moved / (B_HBM x eta_HBM) + one kernel overhead (no kernel table on these systems)
    acc = framework_system(
        load_framework("megatron-bridge-26.08-mxfp8"), load_system(system)
    ).accelerator
    assert not acc.kernel_tables and acc.efficiency.eager_traffic_factor == 1.0
    op = _ops("qwen3-30b-a3b", STASHED, QWEN)["paged_stash"]
    one_way = (
        2 * 32768 * 5980 / (acc.hbm_bandwidth * acc.efficiency.hbm)
        + acc.efficiency.kernel_overhead_s
    )
    assert op_times_s(op, acc, "fp8") == pytest.approx((one_way, one_way), rel=1e-12)


def test_the_full_iteration_profiles_set_it():
    gb300 = load_system("gb300-nvl72")
    for name, factor in (
        ("megatron-bridge-26.08-mxfp8", 1.2),
        ("megatron-bridge-26.06-mxfp8", 1.2),
        ("megatron-bridge-26.06.01-mxfp8", 1.2),
        ("megatron-bridge-25.11-mxfp8", 0.0),
    ):
        system = framework_system(load_framework(name), gb300)
        assert stack_shape_fields(system)["paged_stash"] == factor
