"""Non-uniform plans on mixed clusters: composition by hand, agreement with the uniform estimator,
the slowest member sets a mixed stage, memory per stage against its own GPU, other architectures."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.step.estimate import estimate
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.stage_plan import stage_plan_from_dict

SMALL = ModelSpec(layers=8, hidden=1024, heads=16, ffn_hidden=4096, vocab=32000, max_position=1024)
MIXED = cluster_from_dict(
    {
        "pools": [
            {"name": "v100", "system": "aws-p3.8xlarge", "nodes": 1},
            {"name": "t4", "system": "aws-g4dn.12xlarge", "nodes": 1},
        ]
    }
)


def test_compose_step_over_stages_with_their_own_inputs():
    """The step goes through step.compose.compose_step with per-stage StepInputs; it equals the formula
    Σ W_i + (m − 1)·max W_i + the tail + tied sync on the per-stage figures (read apart, by stage_cost),
    the tail between the first stage's (nothing drains after the first stage's last backward) and the
    largest stage tail (a later stage's reduction runs on while the stages in front drain:
    step.tail.drain_slack_s)."""
    from paraplan.step.per_stage import common_of, stage_settings, tied_embedding_sync_s

    plan = _plan(
        [{"pool": "v100", "gpus": 4, "layers": 5, "tp": 2}, {"pool": "t4", "gpus": 4, "layers": 3}],
        engine="deepspeed",
        global_batch=16,
    )
    est = estimate_stage_plan(SMALL, MIXED, plan)
    settings = stage_settings(plan, MIXED)
    tied = tied_embedding_sync_s(SMALL, MIXED, common_of(plan), settings[0], settings[-1])
    w, m = est.stage_work_s, plan.n_microbatches
    pipeline = sum(w) + (m - 1) * max(w)
    b = est.breakdown
    assert est.step_time_s == pytest.approx(pipeline + b.optimizer_s + b.dp_comm_s + b.offload_s)
    assert pipeline + est.stage_tail_s[0] + tied <= est.step_time_s * (1 + 1e-9)
    assert est.step_time_s <= (pipeline + max(est.stage_tail_s) + tied) * (1 + 1e-9)
    assert est.breakdown.bubble_s == pytest.approx(sum(w) - max(w))


def _plan(stages, **kw):
    base = {
        "global_batch": 8,
        "seq_length": 1024,
        "microbatches": 4,
        "dtype": "fp16",
        "attention": "unfused",
        "stages": stages,
    }
    return stage_plan_from_dict(base | kw)


@pytest.mark.parametrize("tp", [1, 2])
def test_one_stage_equals_uniform_estimator(tp):
    system = load_system("dgx-a100-80gb")
    cluster = uniform_cluster(system, 8)
    pool = cluster.pools[0].name
    plan = _plan(
        [{"pool": pool, "gpus": tp, "layers": 8, "tp": tp}],
        dtype="bf16",
        attention="flash",
        global_batch=4,
        microbatches=4,
    )
    mine = estimate_stage_plan(SMALL, uniform_cluster(system, tp), plan)
    ref = estimate(
        SMALL,
        system,
        PlanSpec(gpus=tp, tp=tp, global_batch=4, micro_batch=1, seq_length=1024, dtype="bf16"),
    )
    assert mine.step_time_s == pytest.approx(ref.step_time_s, rel=1e-9)
    assert mine.stages[0].peak_bytes == pytest.approx(ref.stages[0].peak_bytes, rel=1e-9)


def test_slowest_pool_sets_a_mixed_stage():
    t4_only = _plan(
        [{"pool": "v100", "gpus": 4, "layers": 4}, {"pool": "t4", "gpus": 4, "layers": 4}],
        global_batch=16,
    )
    mixed = _plan(
        [
            {"pool": "v100", "gpus": 2, "layers": 4},
            {"devices": [{"pool": "v100", "gpus": 2}, {"pool": "t4", "gpus": 2}], "layers": 4},
        ],
        global_batch=16,
        microbatches=4,
    )
    v100_only = _plan(
        [{"pool": "v100", "gpus": 2, "layers": 4}, {"pool": "v100", "gpus": 2, "layers": 4}],
        global_batch=8,
    )
    a = estimate_stage_plan(SMALL, MIXED, mixed)
    b = estimate_stage_plan(SMALL, MIXED, v100_only)
    assert a.stage_work_s[1] > b.stage_work_s[1] * 1.5  # the T4 half sets the mixed stage
    c = estimate_stage_plan(SMALL, MIXED, t4_only)
    assert c.stages[1].capacity_bytes == pytest.approx(15 * 2**30) and c.stages[
        0
    ].capacity_bytes == pytest.approx(16 * 2**30)


def test_dp_group_across_pools_uses_the_slower_link():
    inside = _plan([{"pool": "v100", "gpus": 4, "layers": 8}], global_batch=8, microbatches=2)
    across = _plan(
        [{"devices": [{"pool": "v100", "gpus": 2}, {"pool": "t4", "gpus": 2}], "layers": 8}],
        global_batch=8,
        microbatches=2,
    )
    a = estimate_stage_plan(SMALL, MIXED, inside).breakdown.dp_comm_s
    b = estimate_stage_plan(SMALL, MIXED, across).breakdown.dp_comm_s
    assert b > 5 * a  # 10 Gb/s Ethernet instead of NVLink


def test_uneven_split_balances_mixed_stages():
    even = _plan(
        [{"pool": "v100", "gpus": 4, "layers": 4}, {"pool": "t4", "gpus": 4, "layers": 4}],
        global_batch=16,
    )
    uneven = _plan(
        [{"pool": "v100", "gpus": 4, "layers": 6}, {"pool": "t4", "gpus": 4, "layers": 2}],
        global_batch=16,
    )
    assert (
        estimate_stage_plan(SMALL, MIXED, uneven).step_time_s
        < estimate_stage_plan(SMALL, MIXED, even).step_time_s
    )


def test_memory_per_stage_and_oom():
    big = _plan(
        [{"pool": "v100", "gpus": 1, "layers": 4}, {"pool": "t4", "gpus": 1, "layers": 4}],
        global_batch=64,
        microbatches=1,
    )
    est = estimate_stage_plan(SMALL, MIXED, big)
    assert not est.fits and not est.stages[1].fits  # the T4 stage (15 GiB, LM head logits)
    recomputed = _plan(
        [
            {"pool": "v100", "gpus": 1, "layers": 4, "recompute": "full"},
            {"pool": "t4", "gpus": 1, "layers": 4, "recompute": "full"},
        ],
        global_batch=64,
        microbatches=1,
    )
    assert (
        estimate_stage_plan(SMALL, MIXED, recomputed).stages[1].activations_bytes
        < est.stages[1].activations_bytes
    )


def test_per_op_recompute():
    base = [{"pool": "v100", "gpus": 1, "layers": 8}]
    sel = estimate_stage_plan(
        SMALL, MIXED, _plan([base[0] | {"recompute": "selective"}], attention="unfused")
    )
    ops = estimate_stage_plan(
        SMALL,
        MIXED,
        _plan(
            [base[0] | {"recompute_ops": ["attention_scores", "softmax_dropout"]}],
            attention="unfused",
        ),
    )
    assert ops.step_time_s == pytest.approx(sel.step_time_s)
    # an op of another module re-runs that module (here the MLP): more time, less memory than none
    none = estimate_stage_plan(SMALL, MIXED, _plan(base, attention="unfused"))
    mlp = estimate_stage_plan(
        SMALL,
        MIXED,
        _plan([base[0] | {"recompute_ops": ["mlp_in_projection"]}], attention="unfused"),
    )
    by_name = estimate_stage_plan(
        SMALL, MIXED, _plan([base[0] | {"recompute_ops": ["mlp"]}], attention="unfused")
    )
    assert mlp.step_time_s == by_name.step_time_s > none.step_time_s
    assert mlp.stages[0].peak_bytes < none.stages[0].peak_bytes
    with pytest.raises(InputError, match="recompute_ops: 'qkv_projection' is not allowed"):
        estimate_stage_plan(
            SMALL,
            MIXED,
            _plan([base[0] | {"recompute_ops": ["qkv_projection"]}], attention="unfused"),
        )


def test_encoder_has_no_causal_discount():
    enc = SMALL.model_copy(update={"architecture": "encoder"})
    enc = ModelSpec.model_validate(enc.model_dump())
    # FlashAttention skips the masked half of a causal score matrix: an Ampere part (accelerator_rules)
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    pool = cluster.pools[0].name
    plan = _plan([{"pool": pool, "gpus": 1, "layers": 8}], dtype="bf16", attention="flash")
    dec_t = estimate_stage_plan(SMALL, cluster, plan).breakdown.forward_s
    enc_t = estimate_stage_plan(enc, cluster, plan).breakdown.forward_s
    assert enc_t > dec_t


def test_t5_and_vit_plans():
    t5 = ModelSpec(
        architecture="encoder_decoder",
        layers=4,
        encoder_layers=4,
        hidden=512,
        heads=8,
        ffn_hidden=2048,
        vocab=32128,
        decoder_seq_length=128,
        tie_embeddings=True,
        max_position=512,
    )
    plan = stage_plan_from_dict(
        {
            "global_batch": 8,
            "seq_length": 512,
            "microbatches": 2,
            "dtype": "fp16",
            "attention": "unfused",
            "stages": [
                {"pool": "v100", "gpus": 2, "layers": 4},
                {"pool": "v100", "gpus": 2, "layers": 4},
            ],
        }
    )
    est = estimate_stage_plan(t5, MIXED, plan)
    assert est.fits and est.step_time_s > 0
    vit = ModelSpec(
        architecture="encoder",
        patch_size=14,
        layers=8,
        hidden=1024,
        heads=16,
        ffn_hidden=4096,
        vocab=1000,
    )
    plan = stage_plan_from_dict(
        {
            "global_batch": 8,
            "seq_length": 257,
            "microbatches": 2,
            "dtype": "fp16",
            "attention": "unfused",
            "stages": [{"pool": "v100", "gpus": 4, "layers": 8}],
        }
    )
    assert estimate_stage_plan(vit, MIXED, plan).step_time_s > 0
