"""One step, one path (issue 31): a uniform plan priced by the uniform estimator (step.estimate) and the
same plan restated as a per-stage plan (specs.uniform_stages.uniform_stage_plan → step.per_stage) go
through one block vocabulary (step.blocks), one layout (step.layout), block by block, and one statement of
each pipeline rule, so they give the same step time, breakdown and memory per stage, with nothing set aside:
- point-to-point: step.p2p.exchanges (exchanges with each neighbour per micro-batch, interleaved
  pipelines' wrapping ones included), each boundary on its own link (a uniform plan's boundaries by
  step.p2p.uniform_group_p2p, a per-stage plan's one by one by step.stage_links.p2p_links);
- the tied-embedding all-reduce between the first and the last stage (step.p2p.tied_embedding_sync_s);
- the data-parallel gradient collectives (step.build.gradient_group), also when a stage's dp group
  spans nodes;
- stages that do not tile the nodes (tp·dp GPUs per stage neither dividing nor a multiple of a node's):
  the uniform path lays them out one by one on the one placement rule (step.placement, cost.comm.placed_span),
  so a stage straddling a node boundary pays the network on both paths.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.group_spans import strided_groups_span
from paraplan.cost.frameworks import apply_framework
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.plan import PlanSpec
from paraplan.specs.recompute import plan_fields as mode_plan_fields
from paraplan.specs.rules import tp_rules
from paraplan.specs.rules_schedule import SCHEDULE_RULES, schedule_batch_rule
from paraplan.specs.uniform_stages import uniform_stage_plan
from paraplan.step.estimate import estimate
from paraplan.step.p2p import PipelineLinks, exchanges, uniform_group_p2p
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.step.result import Estimate, StageMemory, TimeBreakdown
from paraplan.step.stage_totals import stage_plan_fields

REL = 1e-9
MAX_GPUS = 32  # four 8-GPU nodes
SYSTEM = "dgx-h100-80gb"
CPS = (1, 2, 4)  # context-parallel degrees drawn (issue 31: a per-stage plan states cp)
DENSE_DECODERS = ("gpt3-125m", "gpt3-350m", "gpt3-1.3b", "gpt3-2.7b", "llama2-7b", "llama3-8b")
PER_STAGE_FIELDS = ("stage_work_s", "stage_tail_s", "stage_summary")
MEMORY_FIELDS = tuple(
    f.name for f in fields(StageMemory) if f.name.endswith("_bytes") and "capacity" not in f.name
)


def both_paths(
    model_name: str, system_name: str = SYSTEM, framework: str | None = None, **plan_fields
):
    """(uniform Estimate, per-stage Estimate) of one plan on a uniform cluster of its GPUs; with
    ``framework``, the system and the plan's defaults under that profile (cost.frameworks.apply_framework)."""
    model, system = load_model(model_name), load_system(system_name)
    if framework is not None:
        system, plan_fields = apply_framework(load_framework(framework), system, plan_fields)
    plan = PlanSpec(**plan_fields)
    cluster = uniform_cluster(system, plan.gpus)
    # the pipeline runtime the profile states, as production restates a uniform plan (cli.hetero_cmd,
    # search.staged.uniform_seed): DeepSpeed profiles run step.engines.ENGINES["deepspeed"]
    engine = system.accelerator.efficiency.runtime.pipeline_engine
    stage_plan = uniform_stage_plan(plan, model, cluster.pools[0].name, engine)
    return estimate(model, system, plan), estimate_stage_plan(model, cluster, stage_plan)


def assert_same(uniform, per_stage) -> None:
    """Both paths return one type, step.result.Estimate, compared field by field: the same step time,
    breakdown, memory per stage, FLOPs and peak; the plan is the uniform plan's per-stage form
    (specs.uniform_stages.uniform_stage_plan); only the per-stage path fills the per-stage fields."""
    assert type(uniform) is type(per_stage) is Estimate
    model = load_model(uniform.model)
    stage_plan = uniform_stage_plan(
        PlanSpec(**uniform.plan),
        model,
        per_stage.plan["stages"][0]["devices"][0]["pool"],
        per_stage.plan["engine"],
    )
    for f in fields(Estimate):
        u, p = getattr(uniform, f.name), getattr(per_stage, f.name)
        if f.name == "plan":
            assert p == stage_plan_fields(stage_plan)
        elif f.name == "breakdown":
            for b in fields(TimeBreakdown):
                assert getattr(p, b.name) == pytest.approx(
                    getattr(u, b.name), rel=REL, abs=1e-15
                ), b.name
        elif f.name == "stages":
            assert len(p) == len(u)
            for us, ps in zip(u, p):
                assert (ps.stage, ps.capacity_bytes, ps.host_capacity_bytes) == (
                    us.stage,
                    us.capacity_bytes,
                    us.host_capacity_bytes,
                )
                for name in MEMORY_FIELDS:
                    assert getattr(ps, name) == pytest.approx(
                        getattr(us, name), rel=REL, abs=1e-6
                    ), (us.stage, name)
        elif f.name in PER_STAGE_FIELDS:
            assert u == () and len(p) == len(per_stage.stages), f.name
        elif isinstance(u, float):
            assert p == pytest.approx(u, rel=REL), f.name
        else:
            assert p == u, f.name
    assert (per_stage.mfu, per_stage.hfu) == pytest.approx((uniform.mfu, uniform.hfu), rel=REL)
    assert per_stage.fit == uniform.fit


def pipeline_schedules(pp: int) -> list[str]:
    """Every schedule of specs.rules_schedule.SCHEDULE_RULES that runs on pp > 1 stages at 2·pp micro-batches
    (DualPipe: an even pp), in its order; 1F1B alone without a pipeline."""
    if pp == 1:
        return ["1f1b"]
    return [s for s in SCHEDULE_RULES if schedule_batch_rule(s, pp, 2 * pp) is None]


def draw_plan_fields(pick, model) -> dict:
    """A uniform plan of ``model``, each knob chosen by ``pick`` (options -> one of them: a hypothesis draw,
    or a seeded random.choice): pp 1-8 (≤ its layers), tp in (1, 2, 4, 8) (the ones the model's heads
    allow, specs.rules.tp_rules), cp in (1, 2, 4) (each 2·cp divides both sequence lengths, specs.rules.cp_rule;
    the per-stage plan states it on every stage), dp 1-8, on tp·cp·pp·dp ≤ 32 GPUs of 8-GPU nodes (so stages
    share a node, fill one, span several or straddle a node boundary, and so may a stage's dp and cp groups: a
    stage of S = tp·cp·dp GPUs tiles the nodes when S | 8 or 8 | S, else (dp 3, 5, 6, 7) the uniform path
    prices it stage by stage, step.placement), every schedule of SCHEDULE_RULES (``pipeline_schedules``: 1F1B, GPipe,
    ZB-H1, DualPipe with an even pp and 2·pp or 4·pp micro-batches, interleaved with vpp ≤ 4 and micro-batches a
    multiple of pp, specs.rules.interleave_batch_rule), ZeRO 0-3, the three common recompute modes (the stacks' per-op
    policies: test_policy_recompute_modes_agree), sequence parallelism, offloads (``draw_offloads``)."""
    pp = pick([p for p in range(1, 9) if p <= model.layers])
    tp = pick([t for t in (1, 2, 4, 8) if t * pp <= MAX_GPUS and not tp_rules(model, t)])
    cp = pick([c for c in CPS if tp * c * pp <= MAX_GPUS])
    dp = pick([d for d in range(1, 9) if tp * cp * pp * d <= MAX_GPUS])
    micro_batch = pick((1, 2))
    schedule = pick(pipeline_schedules(pp))
    vpp = pick((2, 3, 4)) if SCHEDULE_RULES[schedule].chunked else 1
    least = SCHEDULE_RULES[schedule].min_count(pp)  # pp interleaved, 2·pp DualPipe, else 1
    microbatches = least * pick((1, 2)) if least > 1 else pick((1, 4, 8))
    return {
        "gpus": tp * cp * pp * dp,
        "tp": tp,
        "cp": cp,
        "pp": pp,
        "vpp": vpp,
        "micro_batch": micro_batch,
        "global_batch": micro_batch * dp * microbatches,
        "seq_length": pick((1024, 2048)),
        "zero": pick((0, 1, 2, 3)),
        "recompute": pick(("none", "selective", "full")),
        "sequence_parallel": tp > 1 and pick((False, True)),
        "schedule": schedule,
        **draw_offloads(pick),
    }


def draw_offloads(pick) -> dict:
    """Offload of weights, activations (every layer, or k = 1 or 2 per stage: offload_activation_layers) and
    optimizer state, each on in one draw of four (issue 31: a per-stage plan states them)."""
    activations = pick((False, False, False, True))
    return {
        "offload_weights": pick((False, False, False, True)),
        "offload_activations": activations,
        "offload_activation_layers": pick((None, 1, 2)) if activations else None,
        "offload_optimizer": pick((False, False, False, True)),
    }


@st.composite
def dense_plans(draw):
    """A dense decoder and a uniform plan of it (``draw_plan_fields``)."""
    name = draw(st.sampled_from(DENSE_DECODERS))
    return name, draw_plan_fields(lambda options: draw(st.sampled_from(options)), load_model(name))


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(dense_plans())
def test_uniform_and_per_stage_paths_price_a_plan_alike(case):
    name, plan_fields = case
    assert_same(*both_paths(name, **plan_fields))


@pytest.mark.parametrize(
    "plan",
    [
        # stages of 2 GPUs, 4 to a node: the boundary 3|4 alone crosses nodes
        dict(gpus=16, tp=2, pp=8, global_batch=16, micro_batch=1),
        # and interleaved: the wrapping boundary 7|0 crosses too
        dict(gpus=16, tp=2, pp=8, vpp=2, global_batch=16, micro_batch=1),
        dict(gpus=16, tp=1, pp=4, vpp=3, global_batch=32, micro_batch=2, seq_length=1024),
        # a stage's dp group over two nodes (tp 2 · dp 8), ZeRO-1 and ZeRO-3
        dict(gpus=32, tp=2, pp=2, global_batch=32, micro_batch=1, zero=1),
        dict(gpus=48, tp=1, pp=3, global_batch=64, micro_batch=2, zero=3),
        # pp = 2 interleaved: both neighbours are the same stage
        dict(gpus=8, tp=4, pp=2, vpp=4, global_batch=8, micro_batch=1, sequence_parallel=True),
    ],
)
def test_links_that_differ_by_boundary_agree(plan):
    """The cases the uniform path once priced on the pp group's slowest link, or with 2·vpp sends on every
    stage, or without the tied-embedding all-reduce (gpt3-1.3b ties its embeddings)."""
    uniform, per_stage = both_paths("gpt3-1.3b", **({"seq_length": 2048} | plan))
    assert_same(uniform, per_stage)
    assert uniform.breakdown.pp_comm_s > 0


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_one_stage_plans_agree(zero, recompute):
    uniform, per_stage = both_paths(
        "gpt3-1.3b",
        gpus=8,
        tp=2,
        pp=1,
        global_batch=32,
        micro_batch=2,
        seq_length=2048,
        zero=zero,
        recompute=recompute,
    )
    assert_same(uniform, per_stage)


def test_zero3_gathers_block_by_block_on_both_paths():
    """Issue 31's repro: gpt3-2.7b, tp1 pp2 dp4, ZeRO-3, 8 H100s. The per-stage builder packed a stage into one
    block, so ZeRO-3 gathered a whole stage at once (5.20 GiB of gathered weights, 1.148 s); both paths now
    gather one block at a time (0.29 GiB) and share every pipeline rule: 0.8509 s (0.8324 s before hidden
    collectives were priced by the SMs and HBM NCCL's kernels hold, cost.comm_contention: 0.199 of an
    NVLink collective's time instead of 0.15; the uniform path's 0.8315 s before it counted one exchange on
    each end stage and the tied-embedding all-reduce)."""
    uniform, per_stage = both_paths(
        "gpt3-2.7b", gpus=8, tp=1, pp=2, zero=3, global_batch=64, seq_length=2048
    )
    assert_same(uniform, per_stage)
    assert uniform.step_time_s == pytest.approx(0.8509408938737006, rel=REL)
    gib = 2.0**30
    for u, p in zip(uniform.stages, per_stage.stages):
        assert p.buffers_bytes == pytest.approx(u.buffers_bytes, rel=REL)
        assert p.buffers_bytes / gib < 0.3


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
@pytest.mark.parametrize("vpp", [1, 2, 3])
def test_exchanges_follow_megatron_schedules(pp, vpp):
    """1F1B: the end ranks exchange with one neighbour, the middle ones with two; interleaved: vpp with
    each neighbour, the previous and next ranks wrapping around, one fewer on the ends' wrapping side.
    Summed over the ranks, each of the vpp·pp − 1 boundaries a micro-batch crosses is counted on both
    of its sides."""
    counts = [tuple(float(n) for n in exchanges(i, pp, vpp)) for i in range(pp)]
    assert counts[0] == (vpp - 1, vpp) and counts[-1] == (vpp, vpp - 1)
    assert all(c == (vpp, vpp) for c in counts[1:-1])
    assert sum(a + b for a, b in counts) == 2 * (vpp * pp - 1)
    assert tuple(float(n) for n in exchanges(0, 1, 1)) == (0.0, 0.0)


def test_uniform_stage_classes_by_hand():
    """pp 8, 4 stages to a node (pp span a = 4 over 2 nodes): boundary 3|4 crosses, the wrapping one too.
    Middle ranks 1-6: ranks 3 and 4 have one link across, 1, 2, 5, 6 none; rank 0 its wrapping link
    across (vpp 2), rank 7 its wrapping link across."""
    links = PipelineLinks(1.0, 10.0, 4, 2, None, 0.0)
    (p_one, n_one), (p_none, n_none) = uniform_group_p2p(links, 1, 6, 8, 2)
    assert (float(p_one), int(n_one), float(p_none), int(n_none)) == (22.0, 2, 4.0, 4)
    (first, n), _ = uniform_group_p2p(links, 0, 1, 8, 2)
    assert (float(first), int(n)) == (1 * 10.0 + 2 * 1.0, 1)
    (last, n), _ = uniform_group_p2p(links, 7, 1, 8, 2)
    assert (float(last), int(n)) == (2 * 1.0 + 1 * 10.0, 1)
    (last, _), _ = uniform_group_p2p(links, 7, 1, 8, 1)  # 1F1B: no wrapping exchange
    assert float(last) == 1.0


# tp that does not divide the node (issue 31): gpt3-125m's 12 heads allow tp 3, 6 and 12 on 8-GPU nodes,
# gpt3-1.3b's 16 heads tp 16 on 72-GPU NVL72 domains with more than 64 GPUs
STRADDLING = (
    ("gpt3-125m", SYSTEM, (1, 2, 3, 4, 6, 12), 48),
    ("gpt3-1.3b", "gb200-nvl72", (16,), 160),
)


def tp_spans_by_stage(plan_fields: dict, domain: int) -> set:
    """The span of each stage's slowest tp group (cost.group_spans.strided_groups_span), over the stages."""
    tp, pp = plan_fields["tp"], plan_fields["pp"]
    stage = plan_fields["gpus"] // pp
    return {strided_groups_span(s * stage, stage, tp, 1, domain) for s in range(pp)}


@st.composite
def straddling_plans(draw):
    """A uniform plan whose tp groups may straddle a domain boundary for some ranks (tp 3 on 8-GPU nodes puts
    ranks 6-8 on two), 1F1B or GPipe, ZeRO 0-3."""
    name, system, tps, most = draw(st.sampled_from(STRADDLING))
    tp = draw(st.sampled_from(tps))
    pp = draw(st.sampled_from([p for p in (1, 2, 3, 4) if tp * p <= most]))
    dp = draw(st.sampled_from([d for d in range(1, 11) if tp * pp * d <= most]))
    microbatches = draw(st.sampled_from((1, 4)))
    plan = {
        "gpus": tp * pp * dp,
        "tp": tp,
        "pp": pp,
        "micro_batch": 1,
        "global_batch": dp * microbatches,
        "seq_length": 1024,
        "zero": draw(st.sampled_from((0, 1, 3))),
        "schedule": draw(st.sampled_from(("1f1b", "gpipe") if pp > 1 else ("1f1b",))),
    }
    return name, system, plan


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(straddling_plans())
def test_tp_groups_that_straddle_a_domain_boundary(case):
    """Both paths price a stage's tp collectives on its own slowest tp group (step.stage_links.tp_span on the
    stage's GPUs; on a uniform plan whose stages tile the domains step.plan_spans.plan_spans, whose stages do not
    step.placement.position_spans stage by stage, all cost.group_spans.strided_groups_span) and its gradient
    group on its tp-rank-0 ranks (cost.comm.placed_span), so they agree in full, also where only some stages'
    tp groups straddle a node boundary (tp 3, pp 3 on 8-GPU nodes: only stage 2's, ranks 6-8)."""
    name, system, plan = case
    uniform, per_stage = both_paths(name, system, **plan)
    assert_same(uniform, per_stage)


def test_a_straddling_stage_is_priced_on_its_own_tp_group():
    """tp 3, pp 3, dp 1 on 8-GPU nodes: stages 0 and 1 (ranks 0-2, 3-5) keep their tp groups on one node,
    stage 2 (ranks 6-8) straddles two; both paths give each stage its own, the uniform one no longer the
    plan's slowest at every stage (before: 0.024256 s against the per-stage path's 0.023766 s)."""
    plan = {"gpus": 9, "tp": 3, "pp": 3, "micro_batch": 1, "global_batch": 4, "seq_length": 1024}
    assert len(tp_spans_by_stage(plan, 8)) == 2
    uniform, per_stage = both_paths("gpt3-125m", **plan)
    assert_same(uniform, per_stage)


@pytest.mark.parametrize(
    ("framework", "mode"), [("torchtitan", "op_sac"), ("maxtext", "save_dots")]
)
@pytest.mark.parametrize(("pp", "zero"), [(1, 3), (2, 1), (4, 0)])
def test_policy_recompute_modes_agree(framework, mode, pp, zero):
    """The per-op policies (specs.recompute: torchtitan's op_sac, MaxText's save_dots) are per-stage
    recompute_ops lists on the per-stage path (specs.recompute.stage_fields), the same price as the uniform
    plan's recompute_modules."""
    uniform, per_stage = both_paths(
        "llama3-8b",
        framework=framework,
        gpus=8,
        tp=2,
        pp=pp,
        global_batch=16,
        micro_batch=1,
        seq_length=2048,
        zero=zero,
        **mode_plan_fields(mode),
    )
    assert_same(uniform, per_stage)
    assert uniform.breakdown.recompute_s > 0
