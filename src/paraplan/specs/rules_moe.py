"""The plan rules of the mixture-of-experts knobs (ep, etp, dispatcher, capacity), each written once:
the rest of the rule set of specs.rules (issue 31), read by the same plan checks and searches.

Sources: Megatron-LM's argument checks (megatron/training/arguments.py) unless a rule names another.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import TYPE_CHECKING

from paraplan.specs.errors import Violation
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.rules import Rule

if TYPE_CHECKING:
    from paraplan.specs.model import ModelSpec


def expert_degree_rules(model: ModelSpec, dims: ParallelDims) -> list[Rule]:
    """(field, value, rule) for each broken rule of ep and etp on an MoE model: ep divides the experts,
    ep·etp divides tp·cp·dp (Megatron-Core carves the expert groups from them), etp divides one
    expert's width."""
    ep, etp, out = dims.ep, dims.etp, []
    if model.experts % ep:
        out.append(("plan.ep", ep, f"must divide experts={model.experts}"))
    if dims.stage_gpus % (ep * etp):
        carved = f"tp·cp·dp = {dims.tp}·{dims.cp}·{dims.dp} (expert groups are carved from them)"
        out.append(("plan.ep", ep, f"ep·etp = {ep}·{etp} must divide {carved}"))
    width = model.moe_ffn_hidden or 0
    if width % etp:
        out.append(("plan.etp", etp, f"must divide moe_ffn_hidden={width}"))
    return out


def expert_free_rule(model: ModelSpec, degree: int) -> str | None:
    """A dense model has no experts to split: its ep and etp stay 1."""
    if not model.is_moe and degree != 1:
        return "expert parallelism needs a mixture-of-experts model; dense models use 1"
    return None


def dispatcher_rule(dispatcher: str, capacity_factor: float | None) -> str | None:
    """Megatron-LM's flex (DeepEP) dispatcher refuses moe_pad_expert_input_to_capacity
    (TransformerConfig.__post_init__, Megatron-LM 0d8e0714: only the deepep backend); the hybridep
    backend pads (_HybridEPManager drop_and_pad, token_dispatcher.py at 0d8e0714)."""
    if capacity_factor is not None and dispatcher == "deepep":
        return "the deepep dispatcher cannot pad experts to capacity; use null (dropless)"
    return None


def expert_load_cv_rule(model: ModelSpec, cv: float | None) -> str | None:
    """A learned router's expert spread c (plan.expert_load_cv, graph.routing.rank_load_spread): the coefficient of
    variation of the E experts' shares p_i of the T·k routed choices. Each token picks k distinct experts, so
    0 <= p_i <= 1/k with Σp_i = 1, and c² = E·Σp_i² − 1 <= E·k·(1/k)² − 1 = E/k − 1 (k experts take every choice):
    0 <= c <= √(E/k − 1). A dense model has no router to state it for. None (the published figure) is allowed."""
    if cv is None:
        return None
    if not model.is_moe:
        return "the router's expert spread needs a mixture-of-experts model; leave it unset"
    top = math.sqrt(max(model.experts / max(model.top_k, 1) - 1.0, 0.0))
    if not (math.isfinite(cv) and 0.0 <= cv <= top):
        return (
            f"allowed: 0 <= expert_load_cv <= √(experts/top_k − 1) = {top:.4g} for {model.name} "
            f"(experts={model.experts}, top_k={model.top_k})"
        )
    return None


def moe_sequence_parallel_rule(model: ModelSpec, tp: int, sequence_parallel: bool) -> str | None:
    """Megatron-Core refuses MoE layers with tensor parallelism but without sequence parallelism
    ("performance may degrade if MoE and tensor parallelism are enabled without also enabling
    sequence parallelism", enforced as an error)."""
    if model.is_moe and tp > 1 and not sequence_parallel:
        return f"MoE layers with tp={tp} need sequence_parallel (Megatron-Core)"
    return None


def torchtitan_experts_rule(stage_gpus: int, ep: int, etp: int, dispatcher: str) -> str | None:
    """torchtitan splits experts with etp 1 and the all-to-all dispatcher only, and its expert mesh takes
    ep out of dp·cp·tp (``stage_gpus``; ParallelDims, torchtitan/distributed/parallel_dims.py line 207
    at v0.2.2; export/facts/torchtitan_checks.yaml 'expert-mesh-divides')."""
    if etp != 1 or dispatcher != "alltoall":
        return "torchtitan: etp 1 and the alltoall dispatcher only"
    if stage_gpus % ep:
        return f"torchtitan's expert mesh needs ep dividing dp·cp·tp = {stage_gpus}"
    return None


def deepspeed_experts_rule(ep: int, etp: int, dispatcher: str) -> str | None:
    """DeepSpeed's config splits no experts: DeepSpeed-MoE's ep is set in the model script, not in the
    JSON configuration export.deepspeed writes (ep = etp = 1, the all-to-all dispatcher). The search's
    per-option filter and its check of the ep axis (search.launch) both state it."""
    if ep != 1 or etp != 1 or dispatcher != "alltoall":
        return (
            "DeepSpeed's config splits no experts (DeepSpeed-MoE's ep is set in the model script)"
        )
    return None


def stage_expert_rule(ep: int, etp: int, first: tuple[int, int]) -> str | None:
    """Every stage of a per-stage plan runs the first stage's (ep, etp) (``first``): Megatron-Core sets one
    expert_model_parallel_size and one expert_tensor_parallel_size for the whole model
    (megatron/core/parallel_state.py initialize_model_parallel, lines 610 and 614 at NVIDIA/Megatron-LM
    d98e8a64), its expert rank generator carving the expert grid etp·ep·edp out of each stage's ranks with
    edp = world / (etp·ep·pp) (lines 874-896): one expert grid per model, as stage_cp_rule's one cp."""
    if (ep, etp) != first:
        return f"every stage runs one ep and etp (one expert grid per model); allowed: ep={first[0]}, etp={first[1]}"
    return None


def stage_expert_violations(
    model: ModelSpec, index: int, dims: ParallelDims, plan
) -> list[Violation]:
    """The MoE rules of stage ``index`` of a per-stage plan (``plan`` a specs.stage_plan.StagePlanSpec, whose
    MoE knobs are a uniform plan's): moe_plan_violations on the stage's degrees (ep·etp divides the stage's
    tp·cp·dp, ep the experts, etp an expert's width; the dispatcher against capacity; the spread) and
    moe_sequence_parallel_rule on its tp, each naming the stage's field."""
    stage = f"plan.stages.{index}"
    # the knobs moe_plan_violations reads: the stage's etp, the plan's others (a per-stage plan recomputes by
    # op, its stages' recompute_ops, so it states no plan-wide recompute_modules)
    knobs = SimpleNamespace(
        etp=dims.etp,
        recompute_modules=None,
        moe_dispatcher=plan.moe_dispatcher,
        capacity_factor=plan.capacity_factor,
        expert_load_cv=plan.expert_load_cv,
    )
    out = [
        Violation(
            v.field.replace("plan.", f"{stage}.") if v.field in _STAGE_FIELDS else v.field,
            v.value,
            v.rule,
        )
        for v in moe_plan_violations(model, dims, knobs)
    ]
    if rule := moe_sequence_parallel_rule(model, dims.tp, plan.sequence_parallel):
        out.append(Violation("plan.sequence_parallel", False, f"stage {index}: {rule}"))
    return out


def stage_pools_rule(model: ModelSpec, pools: int) -> str | None:
    """A stage of a mixture-of-experts model takes its GPUs from one pool: its expert groups are priced as a
    uniform plan's, on the closed-form spans of one system (cost.moe.expert_span, expert_tp_span, expert_dp_span,
    which place the etp·ep·edp grid on one kind of node), not on links between pools."""
    if model.is_moe and pools > 1:
        return "a stage of a mixture-of-experts model takes its GPUs from one pool; allowed: 1 pool"
    return None


_STAGE_FIELDS = ("plan.ep", "plan.etp")  # the degrees a per-stage plan states on each stage


def moe_plan_violations(model: ModelSpec, dims: ParallelDims, moe) -> list[Violation]:
    """Rules of the MoE knobs (``moe`` a specs.moe_plan.MoEPlanFields) against the model and the degrees."""
    cv_rule = expert_load_cv_rule(model, moe.expert_load_cv)
    out = [Violation("plan.expert_load_cv", moe.expert_load_cv, cv_rule)] if cv_rule else []
    if not model.is_moe:
        return out + [
            Violation(f"plan.{name}", value, rule)
            for name, value in (("ep", dims.ep), ("etp", moe.etp))
            if (rule := expert_free_rule(model, value))
        ]
    out += [Violation(*rule) for rule in expert_degree_rules(model, dims)]
    if rule := dispatcher_rule(moe.moe_dispatcher, moe.capacity_factor):
        out.append(Violation("plan.capacity_factor", moe.capacity_factor, rule))
    if "mla_up_proj" in (moe.recompute_modules or ()) and not model.is_mla:
        out.append(Violation("plan.recompute_modules", "mla_up_proj", "needs attention_type=mla"))
    return out
