"""MoE layers composed into the step: block kinds, the expert gradient group, EP exposure, rules."""

from dataclasses import replace

import pytest

from paraplan.api import estimate as api_estimate
from paraplan.catalog import load_model, load_system
from paraplan.step.estimate import estimate, step_inputs
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.step.block_terms import BlockTerms, unpaired_ep_exposure_s
from paraplan.step.build import layer_mix

QWEN = load_model("qwen3-30b-a3b")
H100 = load_system("dgx-h100-80gb")


def plan(**extra) -> PlanSpec:
    return PlanSpec(**(dict(gpus=16, ep=8, global_batch=64, seq_length=4096, zero=1) | extra))


def test_moe_estimate_has_expert_parallel_communication():
    est = estimate(QWEN, H100, plan())
    assert est.breakdown.ep_comm_s > 0 and est.step_time_s > 0
    assert est.breakdown.total_s() == pytest.approx(est.step_time_s)
    # EP 8 inside one DGX: the all-to-alls stay on NVLink; EP 16 crosses the network and costs more
    wide = estimate(QWEN, H100, plan(ep=16))
    assert wide.breakdown.ep_comm_s > est.breakdown.ep_comm_s


def test_a2a_overlap_hides_dispatch_and_forced_balance_is_no_slower():
    base = estimate(QWEN, H100, plan(ep=16))
    hidden = estimate(QWEN, H100, plan(ep=16, moe_a2a_overlap=True))
    assert hidden.breakdown.ep_comm_s < base.breakdown.ep_comm_s
    forced = estimate(QWEN, H100, plan(moe_balance="forced"))
    learned = estimate(QWEN, H100, plan(moe_balance="learned"))
    assert forced.step_time_s <= learned.step_time_s


def test_unpaired_ep_exposure_by_hand():
    terms = BlockTerms(
        1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, ep_forward=0.5, ep_backward=0.7, ep_comm=3.0
    )
    assert unpaired_ep_exposure_s(terms) == pytest.approx(3.0 - 0.5 - 0.7)
    # without the overlap the exposure is the raw time: nothing added, to the bit
    # ((0.1 + 0.2) - 0.1 - 0.2 is 2.8e-17, not 0)
    raw = replace(terms, ep_forward=0.1, ep_backward=0.2, ep_comm=0.1 + 0.2)
    assert unpaired_ep_exposure_s(raw) == 0.0


def test_a2a_overlap_without_pipelining_pays_one_forward_and_one_backward_whole():
    # combined_1f1b_schedule_for_no_pipelining: m - 1 overlapped pairs, the first forward and the last
    # backward alone, so EP(m) = (m - 1)·e + raw with e the overlapped exposure of one micro-batch and raw
    # its all-to-alls whole (the no-overlap plan's EP part over m)
    ep = {
        gbs: estimate(QWEN, H100, plan(global_batch=gbs, moe_a2a_overlap=True)).breakdown.ep_comm_s
        for gbs in (64, 128)
    }  # m = 4 and 8 (dp 16, micro-batch 1)
    e = (ep[128] - ep[64]) / 4
    raw = estimate(QWEN, H100, plan(global_batch=64)).breakdown.ep_comm_s / 4
    assert 0 < e < raw
    assert ep[64] == pytest.approx(3 * e + raw)
    # with pipelining (pp 2) every micro-batch is priced overlapped, as before: EP(m) = m·e
    ep2 = {
        gbs: estimate(
            QWEN, H100, plan(global_batch=gbs, pp=2, moe_a2a_overlap=True)
        ).breakdown.ep_comm_s
        for gbs in (64, 128)
    }
    assert ep2[128] == pytest.approx(2 * ep2[64])


def test_experts_are_their_own_gradient_group_sharded_over_edp():
    inp = step_inputs(QWEN, H100, plan())
    assert set(inp.gradient_groups) == {"dense", "expert"}
    assert (
        inp.gradient_groups["dense"].size == 16 and inp.gradient_groups["expert"].size == 2
    )  # 16 / ep 8
    blocks = {b.kind: (b, n) for b, n in inp.stages[0].blocks}
    experts, count = blocks["experts"]
    assert experts.gradient_group == "expert" and count == 48
    assert experts.params == 16 * 3 * 2048 * 768  # 128/8 experts per GPU
    est = estimate(QWEN, H100, plan())
    one = estimate(QWEN, H100, plan(zero=0))
    # ZeRO-1 shards the expert optimizer over edp = 2 and the dense one over dp = 16
    assert one.stages[0].optimizer_bytes > est.stages[0].optimizer_bytes


def test_layer_mix_by_hand():
    ds = load_model("deepseek-v3")
    assert layer_mix(ds, 0, 4) == (3, 1)  # three dense layers first
    assert layer_mix(ds, 4, 4) == (0, 4)
    assert layer_mix(QWEN.model_copy(update={"moe_layer_interval": 2}), 0, 4) == (2, 2)
    assert layer_mix(load_model("llama3-8b"), 0, 4) == (0, 0)


def test_deepseek_v3_with_mtp_and_mla_up_proj_recompute():
    ds = load_model("deepseek-v3")
    p = PlanSpec(
        gpus=256,
        pp=16,
        ep=8,
        global_batch=2048,
        seq_length=4096,
        zero=1,
        dtype="fp8",
        recompute="selective",
        recompute_modules=["mla_up_proj"],
        layers_first_stage=4,
        layers_last_stage=1,
        capacity_factor=1.0,
    )
    est = estimate(ds, load_system("dgx-b200"), p)
    last = est.stages[-1]
    assert est.breakdown.recompute_s > 0 and last.weights_bytes > 0
    assert est.mfu < 1 and est.model_flops_per_step > 0


@pytest.mark.parametrize(
    "extra, field",
    [
        (dict(ep=3), "plan.ep"),
        (dict(tp=2, ep=8, gpus=16), "plan.sequence_parallel"),
        (dict(recompute_modules=["moe_act"]), "plan.recompute_modules"),
        (dict(moe_dispatcher="deepep", capacity_factor=1.0), "plan.capacity_factor"),
    ],
)
def test_moe_plan_rules(extra, field):
    with pytest.raises(InputError) as err:
        estimate(QWEN, H100, plan(**extra))
    assert str(err.value).startswith(field)


def test_dense_models_refuse_expert_knobs():
    with pytest.raises(InputError, match="plan.etp"):
        api_estimate("llama3-8b", "dgx-h100-80gb", gpus=8, global_batch=8, seq_length=2048, etp=2)


def test_search_accepts_moe_models_with_their_expert_axes():
    problem = SearchProblem(model=QWEN, system=H100, gpus=16, seq_length=4096, global_batch=64)
    problem.check()  # MoE models are searched over ep / etp / dispatcher (tests/search/test_moe_search.py)
    assert len(problem.expert_options(1, 1, 16)) > 1


def test_split_backward_schedules():
    from paraplan.step.schedules import dualpipe_bubble_s
    from paraplan.step.compose import compose_step, stage_work
    from paraplan.step.dualpipe import overlapped_pair_s

    p = dict(gpus=64, pp=8, ep=8, global_batch=512, seq_length=4096, zero=1)
    one = estimate(QWEN, H100, PlanSpec(**p))
    zb = estimate(QWEN, H100, PlanSpec(**p, schedule="zb-h1"))
    dual = estimate(QWEN, H100, PlanSpec(**p, schedule="dualpipe"))
    assert 0 < zb.breakdown.bubble_s < one.breakdown.bubble_s
    assert zb.breakdown.forward_s == one.breakdown.forward_s
    # DualPipe: (p/2 - 1)(F&B + B - 3W) on whole-stage chunks of the slowest stage, F&B its overlapped
    # pair (step.dualpipe.overlapped_pair_s), two parameter copies
    inp = step_inputs(QWEN, H100, PlanSpec(**p, schedule="dualpipe"))
    works = [stage_work(s) for s in inp.stages if s.count]
    slowest = max(works, key=lambda w: sum(w.values()))
    wgrad = max(sum(n * b.terms.wgrad for b, n in s.blocks) for s in inp.stages if s.count)
    f = slowest["forward"] + slowest["tp_forward"] + slowest["cp_forward"] + slowest["ep_forward"]
    b = (
        slowest["backward"]
        + slowest["recompute"]
        + slowest["tp_backward"]
        + slowest["cp_backward"]
        + slowest["ep_backward"]
    )
    stage = next(s for s in inp.stages if s.count and stage_work(s) == slowest)
    ep = sum(n * blk.terms.ep_comm for blk, n in stage.blocks)
    pair = overlapped_pair_s(slowest, ep, inp.pair_compute_share)
    compute = (slowest["forward"] + slowest["backward"] + slowest["recompute"]) * 132 / 112
    other = (
        slowest["tp_forward"]
        + slowest["tp_backward"]
        + slowest["cp_forward"]
        + slowest["cp_backward"]
    )
    # 20 of the H100's 132 SMs given to the all-to-all; the dispatch, combine and sends hidden up to it
    assert pair == pytest.approx(compute + max(0.0, ep + slowest["pp"] - compute) + other)
    assert compose_step(inp)["bubble_s"] == pytest.approx(dualpipe_bubble_s(8, f, b, wgrad, pair))
    # rank 0 holds stage 0 one way and stage 7 (the LM head's) the other: both stages' weights
    w0, w7 = one.stages[0].weights_bytes, one.stages[7].weights_bytes
    assert dual.stages[0].weights_bytes == pytest.approx(w0 + w7)
    assert dual.stages[7].weights_bytes == pytest.approx(w0 + w7)
    assert dual.stages[3].weights_bytes == pytest.approx(2 * one.stages[3].weights_bytes)
    with pytest.raises(InputError, match="plan.schedule"):
        estimate(QWEN, H100, PlanSpec(**(p | dict(gpus=56, pp=7)), schedule="dualpipe"))


def test_hybridep_dispatch_by_hand_and_no_slower_than_deepep():
    """Hybrid-EP moves DeepEP's deduplicated bytes (cost.moe.deepep_split_bytes): one copy of the
    T = 4096 tokens of h = 2048 at 2 B, 16 MiB per call, dispatch and combine; with equal pricing
    the step is as long as deepep's on the same layout (never slower)."""
    from paraplan.graph.moe import ExpertShape
    from paraplan.graph.moe_mlp import dispatch_collectives
    from paraplan.graph.transformer import LayerShape

    shape = LayerShape(tp=1, cp=1, micro_batch=1, seq_length=4096, sequence_parallel=False,
                       attention="flash", dtype="bf16")  # fmt: skip
    for ep in (8, 16):
        expert = ExpertShape(ep=ep, dispatcher="hybridep", balance="forced")
        calls = dispatch_collectives(QWEN, shape._replace(expert=expert), expert)
        assert [(c.name, c.kind, c.bytes) for c in calls] == [
            ("ep_hybridep_dispatch", "all_to_all_dedup", 2 * 2048 * 4096.0),
            ("ep_hybridep_combine", "all_to_all_dedup", 2 * 2048 * 4096.0),
        ]
        hybrid = estimate(QWEN, H100, plan(ep=ep, gpus=16, moe_dispatcher="hybridep"))
        deep = estimate(QWEN, H100, plan(ep=ep, gpus=16, moe_dispatcher="deepep"))
        assert hybrid.breakdown.ep_comm_s > 0
        assert hybrid.step_time_s <= deep.step_time_s * (1 + 1e-12)


def test_hybridep_pads_to_capacity_and_is_searched_only_when_named():
    """Megatron-LM 0d8e0714: only the deepep backend refuses moe_pad_expert_input_to_capacity; a search
    tries hybridep when --dispatcher names it (specs.moe_plan.SEARCH_DISPATCHERS)."""
    assert (
        estimate(QWEN, H100, plan(moe_dispatcher="hybridep", capacity_factor=1.0)).step_time_s > 0
    )
    default = SearchProblem(model=QWEN, system=H100, gpus=16, seq_length=4096, global_batch=64)
    assert {d for d, _ in default.expert_switches(8, 1)} == {"alltoall", "allgather", "deepep"}
    named = SearchProblem(model=QWEN, system=H100, gpus=16, seq_length=4096, global_batch=64,
                          dispatchers=("hybridep",))  # fmt: skip
    assert {d for d, _ in named.expert_switches(8, 1)} == {"hybridep"}
