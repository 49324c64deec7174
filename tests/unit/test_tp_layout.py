"""2D tensor parallelism (SUMMA) and the 2D sequence/context layout (specs/tp_layout.py, graph/summa.py,
cost/summa.py, cost/comm.rooted_collective) against values worked out by hand.

Expected values are arithmetic on literal numbers with the formula in a comment. The synthetic
system has round numbers: NVLink 100 GB/s at 50 % = 50 GB/s, 5 us; NIC 10 GB/s at 50 % = 5 GB/s,
10 us; 8 GPUs per NVLink domain.
"""

from __future__ import annotations

import json

import pytest

from paraplan.api import estimate, plan_from_fields
from paraplan.catalog import load_model, load_system
from paraplan.cli import main
from paraplan.cost import comm
from paraplan.cost.comm_contention import tier_overlap_costs
from paraplan.cost.memory import layer_activation_bytes, layout_buffer_bytes
from paraplan.cost.summa import grid_spans, summa_exposed_s
from paraplan.step.estimate import layer_shape
from paraplan.graph.summa import decoder_layer_2d, summa_weight_params
from paraplan.graph.layers import decoder_layer
from paraplan.graph.transformer import LayerShape, layer_weight_params
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_violations
from paraplan.specs.system import SystemSpec
from paraplan.specs.tp_layout import default_rows, grid_shape, panel_count
from paraplan.step.compose import block_terms
from paraplan.step.build import block_comm, block_compute, block_cost_facts
from paraplan.step.plan_spans import plan_spans

ROUND = SystemSpec.model_validate(
    {
        "name": "round",
        "accelerator": {
            "name": "round-gpu",
            "matrix_flops": {"bf16": 100e12},
            "vector_flops": {"bf16": 10e12},
            "hbm_capacity": 80e9,
            "hbm_bandwidth": 1e12,
            "sm_count": 100,
        },
        "node": {
            "gpus_per_domain": 8,
            "nvlink_bandwidth": 100e9,
            "nvlink_latency": 5e-6,
            "nvlink_efficiency": 0.5,
        },
        "network": {"nic_bandwidth": 10e9, "latency": 10e-6, "efficiency": 0.5},
    }
)
# h 1024, 16 heads of 64, f 4096, GPT-style (gelu, layernorm, biases, dropout, learned positions)
SMALL = ModelSpec.model_validate(
    {
        "name": "small",
        "layers": 4,
        "hidden": 1024,
        "heads": 16,
        "ffn_hidden": 4096,
        "vocab": 32000,
        "max_position": 4096,
    }
)


def approx(x: float, rel: float = 1e-12) -> object:
    return pytest.approx(x, rel=rel, abs=0.0)


# ---- the grid ----------------------------------------------------------------------------------
def test_grid_shape_and_panels():
    assert (
        default_rows(16) == 4
        and default_rows(8) == 2
        and default_rows(12) == 3
        and default_rows(7) == 1
    )
    assert grid_shape(8, None) == (2, 4) and grid_shape(8, 4) == (4, 2)
    assert panel_count(2, 4, None) == 4 and panel_count(2, 4, 16) == 16


@pytest.mark.parametrize(
    ("tp_span", "rows", "row", "col"),
    [
        # tp 16 on 8-GPU domains, 4 x 4: a row is ranks 0-3 (one domain); a column 0,4,8,12: 2 per domain
        (comm.GroupSpan(16, 8, 2), 4, comm.GroupSpan(4, 4, 1), comm.GroupSpan(4, 2, 2)),
        # tp 8 inside a domain, 2 x 4: everything on NVLink
        (comm.GroupSpan(8, 8, 1), 2, comm.GroupSpan(4, 4, 1), comm.GroupSpan(2, 2, 1)),
        # tp 4 with one member per domain (tp placed outermost): every row and column crosses the NIC
        (comm.GroupSpan(4, 1, 4), 2, comm.GroupSpan(2, 1, 2), comm.GroupSpan(2, 1, 2)),
    ],
)
def test_grid_spans(tp_span, rows, row, col):
    assert grid_spans(tp_span, rows) == (row, col)


def test_grid_spans_agree_with_placement_spans():
    """A 4 x 4 grid laid row by row is a tp-4 group (row) inside a cp-4 group (column): group_span says the same."""
    plan = PlanSpec(gpus=16, tp=4, cp=4, global_batch=1, seq_length=64)
    whole = PlanSpec(gpus=16, tp=16, global_batch=1, seq_length=64)
    assert grid_spans(comm.group_span(whole, ROUND, "tp"), 4) == (
        comm.group_span(plan, ROUND, "tp"),
        comm.group_span(plan, ROUND, "cp"),
    )


# ---- broadcast / reduce on two tiers -----------------------------------------------------------
def test_broadcast_and_reduce_two_tier():
    for kind in ("broadcast", "reduce"):
        # inside one domain, 4 members: 1e9 / 50e9 = 0.02 s; latency the chain along NCCL's ring, 3*5us = 15 us
        assert comm.collective_time_s(kind, 1e9, comm.GroupSpan(4, 4, 1), ROUND) == approx(
            0.02 + 15e-6
        )
        # one member per domain, 4 domains: 1e9 / 5e9 = 0.2 s; latency 3 hops across domains, 3*10us = 30 us
        assert comm.collective_time_s(kind, 1e9, comm.GroupSpan(4, 1, 4), ROUND) == approx(
            0.2 + 30e-6
        )
        # 2 per domain over 2 domains: max(1e9/(2*5e9) = 0.1, 1e9/50e9 = 0.02) = 0.1 s (the NIC binds);
        # latency: the ring's 3 hops, 1 across domains: 2*5us NVLink + 1*10us NIC = 20 us
        assert comm.collective_time_s(kind, 1e9, comm.GroupSpan(4, 2, 2), ROUND) == approx(
            0.1 + 20e-6
        )
    # hiding it costs the binding tier's overlap price only: NIC 0.1 s x its overlap_cost
    # (cost.comm_contention, tested by hand in test_comm_contention.py)
    c_in, c_out, _, hbm_out = tier_overlap_costs("broadcast", True, ROUND, 1)
    form = comm.linear_collective("broadcast", comm.GroupSpan(4, 2, 2), ROUND)
    assert form.slope_in == 0.0 and form.slope_out == approx(1 / 10e9)
    assert comm.collective_time_and_price_s("broadcast", 1e9, comm.GroupSpan(4, 2, 2), ROUND)[
        1
    ] == approx(c_in * 10e-6 + c_out * (0.1 + 10e-6) + hbm_out * 0.1)


def test_summa_exposure_pipelines_panels():
    # comm 8 s beside 10 s of GEMMs in 4 panels: 8/4 + max(0, 3/4*(8-10)) = 2 s
    assert summa_exposed_s(8.0, 10.0, 4) == approx(2.0)
    # comm 20 s beside 8 s: 20/4 + 3/4*(20-8) = 5 + 9 = 14 s; one panel: all of it
    assert summa_exposed_s(20.0, 8.0, 4) == approx(14.0)
    assert summa_exposed_s(20.0, 8.0, 1) == approx(20.0)


# ---- the op graph of a 2D layer --------------------------------------------------------------
SHAPE_2D = LayerShape(
    tp=4,
    cp=1,
    micro_batch=1,
    seq_length=1024,
    sequence_parallel=True,
    attention="flash",
    dtype="bf16",
    tp_layout="2d",
    tp_rows=2,
    summa_panels=2,
)


def test_summa_gemms_and_traffic_by_hand():
    g = decoder_layer(SMALL, SHAPE_2D)
    assert g is decoder_layer_2d(SMALL, SHAPE_2D)
    ops = {o.name: o for o in g.ops}
    # QKV on a 2 x 2 grid: T/r = 512 tokens x (3*1024)/2 = 1536 outputs x e = 1024: 2*512*1536*1024 FLOPs,
    # panel GEMMs 512 x 1536 x 512 (e/nb)
    assert ops["qkv_projection"].fwd_flops == 2 * 512 * 1536 * 1024
    assert ops["qkv_projection"].gemm_shape == (1, 512, 1536, 512)
    # MLP-out: 512 tokens x 1024/2 outputs x e = 4096
    assert ops["mlp_out_projection"].fwd_flops == 2 * 512 * 512 * 4096
    coll = {c.name: c for c in g.collectives}
    # X panel of QKV: 2 B x 512 tokens x 1024/2 = 524,288 B per call, 2 panels, along the row
    x = coll["qkv_projection_x_broadcast"]
    assert (x.group, x.kind, x.bytes, x.count_fwd, x.count_bwd) == (
        "tp_row",
        "broadcast",
        524288.0,
        2,
        2,
    )
    # W panel of QKV: 2 B x 1024/2 x 3072/2 = 1,572,864 B per call, along the column; dW reduced in backward only
    w = coll["qkv_projection_dw_reduce"]
    assert (w.group, w.kind, w.bytes, w.count_fwd, w.count_bwd) == (
        "tp_col",
        "reduce",
        1572864.0,
        0,
        2,
    )
    # K/V of the column's 1024 tokens, 8 heads of 64 each: 2 B x 1024 x 2 x 1024/2 = 2 MiB, all-gathered over 2 rows
    kv = coll["tp_col_kv_all_gather"]
    assert (kv.kind, kv.bytes, kv.count_fwd, kv.count_bwd) == ("all_gather", 2097152.0, 1, 1)
    # LayerNorm: 2 fp32 statistics per token of the row block: 2 x 4 B x 512 = 4096 B, two norms per pass
    stats = coll["norm_statistics_all_reduce"]
    assert (stats.group, stats.bytes, stats.count_fwd, stats.count_bwd) == ("tp_row", 4096.0, 2, 2)


def test_summa_splits_every_gemm_and_weight_over_the_grid():
    one = decoder_layer(SMALL, LayerShape(1, 1, 1, 1024, False, "flash", "bf16"))
    two = decoder_layer(SMALL, SHAPE_2D)
    gemm = lambda g: sum(o.fwd_flops for o in g.ops if o.kind == "gemm")  # noqa: E731
    assert gemm(two) * 4 == approx(gemm(one))
    # parameters: matrices 1024*3072 + 1024*1024 + 2*1024*4096 = 12,582,912 over 4 GPUs;
    # QKV and MLP-in biases 3072 + 4096, two row biases 2*1024 and two LayerNorms 4*1024 over 2 columns
    assert (
        two.weight_params
        == summa_weight_params(SMALL, 2, 2)
        == 12582912 / 4 + (7168 + 2048 + 4096) / 2
    )
    assert layer_weight_params(SMALL, 4) == 12582912 / 4 + 7168 / 4 + 2048 + 4096


def test_summa_memory_is_the_whole_grid_split():
    # activations: Korthikanti's per-layer bytes with every tensor split over r*c = 4 (SP form with t = 4)
    sp = LayerShape(
        tp=4,
        cp=1,
        micro_batch=1,
        seq_length=1024,
        sequence_parallel=True,
        attention="flash",
        dtype="bf16",
    )
    assert layer_activation_bytes(SMALL, SHAPE_2D, "none") == layer_activation_bytes(
        SMALL, sp, "none"
    )
    # buffer: the column's gathered K/V, 2 B x 1024 tokens x 2 x 1024/2
    assert layout_buffer_bytes(SMALL, SHAPE_2D) == 2 * 1024 * 2 * 512


def test_two_d_seq_gathers_kv_over_cp_instead_of_the_ring():
    shape = LayerShape(
        tp=2,
        cp=4,
        micro_batch=1,
        seq_length=1024,
        sequence_parallel=True,
        attention="flash",
        dtype="bf16",
        tp_layout="2d-seq",
    )
    coll = {c.name: c for c in decoder_layer(SMALL, shape).collectives}
    assert "cp_kv_ring" not in coll
    # K and V of all 1024 tokens for the rank's 8 heads: 2 B x 1024 x 2 x 1024/2 = 2 MiB, gathered forward and backward
    gather, scatter = coll["cp_kv_all_gather"], coll["cp_dkv_reduce_scatter"]
    assert (gather.bytes, gather.count_fwd, gather.count_bwd) == (2097152.0, 1, 1)
    assert (scatter.bytes, scatter.count_fwd, scatter.count_bwd) == (2097152.0, 0, 1)
    assert layout_buffer_bytes(SMALL, shape) == 2097152.0
    # nothing hides them: CP time nothing hides (as the ring's per-step synchronisation), not in its overlap window
    span = comm.GroupSpan(4, 4, 1)
    c = block_comm(decoder_layer(SMALL, shape), ROUND, comm.GroupSpan(2, 2, 1), span)
    # all-gather: 3/4 * 2 MiB / 50e9 + min(3*5us, 2*2*5us); reduce-scatter the same
    one = 0.75 * 2097152 / 50e9 + 15e-6
    assert (c.cp_forward, c.cp_steps, c.cp_sync_forward, c.cp_sync_backward) == (
        0.0,
        0.0,
        approx(one),
        approx(2 * one),
    )
    terms = block_terms(block_compute(decoder_layer(SMALL, shape), ROUND, "bf16"), c, 0, False)
    assert (float(terms.cp_forward), float(terms.cp_backward)) == (approx(one), approx(2 * one))


# ---- plan rules ----------------------------------------------------------------------------
def _rules(**fields):
    plan = plan_from_fields({"gpus": 16, "global_batch": 16, "seq_length": 1024, **fields})
    return [(v.field, v.rule) for v in plan_violations(plan, SMALL)]


def test_plan_rules_of_the_layouts():
    assert _rules(tp=4, tp_layout="2d") == []
    assert _rules(tp=16, tp_layout="2d", tp_rows=4) == []  # 16 heads: columns 4 hold whole heads
    assert ("plan.tp_rows", "must divide tp=4") in _rules(tp=4, tp_layout="2d", tp_rows=3)
    assert any(
        f == "plan.tp_rows" and "at least 2 × 2" in r
        for f, r in _rules(tp=4, tp_layout="2d", tp_rows=1)
    )
    assert any(
        f == "plan.sequence_parallel"
        for f, _ in _rules(tp=4, tp_layout="2d", sequence_parallel=True)
    )
    assert any(
        f == "plan.overlap_tp_comm" for f, _ in _rules(tp=4, tp_layout="2d", overlap_tp_comm=True)
    )
    assert ("plan.tp_rows", "needs tp_layout=2d") in _rules(tp=4, tp_rows=2)
    assert any(f == "plan.cp" for f, _ in _rules(tp=4, tp_layout="2d-seq"))
    assert _rules(tp=2, cp=2, tp_layout="2d-seq") == []
    moe = load_model("mixtral-8x7b")
    plan = plan_from_fields(
        {
            "gpus": 8,
            "tp": 4,
            "global_batch": 8,
            "seq_length": 1024,
            "tp_layout": "2d",
            "sequence_parallel": False,
        }
    )
    assert any(v.field == "plan.tp_layout" for v in plan_violations(plan, moe))


def test_layer_shape_of_a_2d_plan():
    plan = plan_from_fields(
        {"gpus": 8, "tp": 8, "global_batch": 8, "seq_length": 1024, "tp_layout": "2d"}
    )
    shape = layer_shape(plan, ROUND)
    assert (shape.tp, shape.tp_rows, shape.summa_panels, shape.sequence_parallel) == (8, 2, 4, True)


# ---- the estimate ------------------------------------------------------------------------------
def test_estimate_composes_the_summa_exposure():
    """One stage, one micro-batch, no DP: the step's TP part is the layers' exposed SUMMA traffic (by the
    pipelined-panel rule, hidden part priced), their exposed gathers and statistics, and the embedding /
    LM head's collectives."""
    from paraplan.cost.summa import summa_traffic_s
    from paraplan.step.estimate import step_inputs

    plan = plan_from_fields(
        {"gpus": 4, "tp": 4, "global_batch": 1, "seq_length": 1024, "tp_layout": "2d"}
    )
    est = estimate(SMALL, ROUND, plan)
    shape = layer_shape(plan, ROUND)
    spans = plan_spans(plan, ROUND)
    graph = decoder_layer(SMALL, shape)
    c = block_comm(
        graph, ROUND, spans["tp"], spans["cp"], None, shape
    )  # K/V gathers and norm statistics
    gemm = block_compute(graph, ROUND, "bf16")
    fwd, bwd, fwd_price, bwd_price = summa_traffic_s(graph, ROUND, spans["tp"], 2)
    assert shape.summa_panels == 2 and 0 < fwd < bwd
    by_hand = c.tp_forward + c.tp_backward  # nothing hides those
    for total, gemm_s, price in (
        (fwd, gemm.gemm_forward, fwd_price),
        (bwd, gemm.gemm_backward, bwd_price),
    ):
        exposed = total / 2 + max(0.0, 0.5 * (total - gemm_s))  # nb = 2
        by_hand += exposed + (total - exposed) * price / total
    facts = block_cost_facts(SMALL, ROUND, shape, spans["tp"], spans["cp"])["decoder"]
    layer = block_terms(facts.compute, facts.comm, 0, False)
    assert float(layer.tp_forward + layer.tp_backward) == approx(by_hand, 1e-9)
    inp = step_inputs(SMALL, ROUND, plan)
    others = sum(
        float(b.terms.tp_forward + b.terms.tp_backward) * n
        for b, n in inp.stages[0].blocks
        if b.kind != "decoder"
    )
    assert est.breakdown.tp_comm_s == approx(SMALL.layers * by_hand + others, 1e-9)


def test_2d_trades_weight_traffic_for_activation_traffic():
    """SUMMA moves each weight block every micro-batch: with few tokens per micro-batch it loses to 1D TP,
    with many it moves less than 1D's activation all-reduces (NERSC model: 2D pays off at large b·s)."""
    gpt = load_model("gpt3-175b")
    a100 = load_system("dgx-a100-80gb")
    base = {
        "gpus": 16,
        "tp": 16,
        "pp": 1,
        "global_batch": 1,
        "micro_batch": 1,
        "recompute": "full",
        "zero": 3,
    }
    for seq, two_d_wins in ((2048, False), (65536, True)):
        one = estimate(gpt, a100, {**base, "seq_length": seq, "sequence_parallel": True})
        two = estimate(gpt, a100, {**base, "seq_length": seq, "tp_layout": "2d"})
        assert (two.breakdown.tp_comm_s < one.breakdown.tp_comm_s) == two_d_wins
        assert (two.step_time_s < one.step_time_s) == two_d_wins


def test_cli_estimate_takes_the_layout_and_refuses_bad_values(capsys):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "estimate",
                "-m",
                "gpt3-125m",
                "-s",
                "dgx-a100-80gb",
                "--gpus",
                "8",
                "--tp",
                "4",
                "--tp-layout",
                "2d",
                "--seq-length",
                "1024",
                "--json",
            ]
        )
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    plan = json.loads(out)["plan"]
    assert (plan["tp_layout"], plan["tp_rows"], plan["sequence_parallel"]) == ("2d", None, False)
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "estimate",
                "-m",
                "gpt3-125m",
                "-s",
                "dgx-a100-80gb",
                "--gpus",
                "8",
                "--tp",
                "4",
                "--tp-layout",
                "3d",
            ]
        )
    _, err = capsys.readouterr()
    assert exc.value.code == 2 and err.startswith("error: plan.tp_layout") and err.count("\n") == 1


def test_exports_refuse_a_2d_plan():
    from paraplan.export import export_plan

    plan = plan_from_fields(
        {"gpus": 8, "tp": 4, "global_batch": 8, "seq_length": 1024, "tp_layout": "2d"}
    )
    for framework in ("megatron", "nemo", "torchtitan", "deepspeed"):
        with pytest.raises(InputError, match="tp_layout"):
            export_plan(framework, plan, load_model("gpt3-125m"))
    with pytest.raises(InputError, match="1D tensor parallelism only"):
        export_plan("megatron", plan, load_model("gpt3-125m"))


def test_two_d_seq_exports_as_all_gather_context_parallelism_and_back():
    """Megatron-Core's cp_comm_type "all_gather" (K/V gathered before attention, not overlapped) is 2d-seq."""
    from paraplan.export import canonical_plan, export_plan, import_plan

    gpt = load_model("gpt3-125m")
    plan = plan_from_fields(
        {"gpus": 16, "tp": 2, "cp": 4, "global_batch": 8, "seq_length": 2048, "tp_layout": "2d-seq"}
    )
    line = export_plan("megatron", plan, gpt)
    assert "--cp-comm-type all_gather" in line
    assert canonical_plan(plan_from_fields(import_plan("megatron", line))) == canonical_plan(plan)
    recipe = export_plan("nemo", plan, gpt)
    assert "recipe.model.config.cp_comm_type = 'all_gather'" in recipe
    assert canonical_plan(plan_from_fields(import_plan("nemo", recipe))) == canonical_plan(plan)
    ring = plan_from_fields({"gpus": 16, "tp": 2, "cp": 4, "global_batch": 8, "seq_length": 2048})
    assert "--cp-comm-type" not in export_plan("megatron", ring, gpt)  # the default, p2p
    ulysses = line.replace(
        "--cp-comm-type all_gather", "--cp-comm-type a2a"
    )  # Ulysses: the 1D layout, all-to-all CP
    assert {k: import_plan("megatron", ulysses)[k] for k in ("tp_layout", "cp_algorithm")} == {
        "tp_layout": "1d",
        "cp_algorithm": "all-to-all",
    }
    with pytest.raises(InputError, match="hierarchical all-to-all"):
        import_plan("megatron", line.replace("--cp-comm-type all_gather", "--cp-comm-type a2a+p2p"))


def test_error_band_feature_of_a_2d_layout():
    """A 2D layout is a feature of its own, so the band lists it as extrapolated (no validation case has one)."""
    from paraplan.validate.features import plan_features

    a100 = load_system("dgx-a100-80gb")
    for layout, fields in (("2d", {"tp": 4}), ("2d-seq", {"tp": 2, "cp": 2})):
        plan = plan_from_fields(
            {"gpus": 8, "global_batch": 8, "seq_length": 2048, "tp_layout": layout, **fields}
        )
        assert f"ampere tp layout {layout}" in plan_features(SMALL, a100, plan)
    plain = plan_from_fields({"gpus": 8, "tp": 4, "global_batch": 8, "seq_length": 2048})
    assert not any("layout" in f for f in plan_features(SMALL, a100, plain))


def test_search_tries_layouts_only_when_asked(capsys):
    from paraplan.api import search

    base = dict(
        gpus=8,
        global_batch=8,
        seq_length=8192,
        tp=[4, 8],
        micro_batch=[1],
        recompute=["full"],
        zero=[1],
        vary_offload=False,
        vary_overlap=False,
        vary_placement=False,
    )
    plain = search("gpt3-125m", "dgx-a100-80gb", top=50, **base)
    assert {r.plan.tp_layout for r in plain.plans} == {"1d"}
    wide = search("gpt3-125m", "dgx-a100-80gb", top=50, tp_layouts=["1d", "2d", "2d-seq"], **base)
    assert {r.plan.tp_layout for r in wide.plans} >= {
        "1d",
        "2d",
    } and wide.raw.candidates > plain.raw.candidates
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "search",
                "-m",
                "gpt3-125m",
                "-s",
                "dgx-a100-80gb",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--tp-layout",
                "1d,3d",
            ]
        )
    _, err = capsys.readouterr()
    assert exc.value.code == 2 and err.startswith("error: --tp-layout") and err.count("\n") == 1
