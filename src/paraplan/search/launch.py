"""Which plans a framework can launch: the search's side of the rules the exporters check (issue 34).

With ``--framework F`` the search covers only plans F runs and paraplan can export to F (``targets``):
the Megatron-Core profile and the recipe profiles built on it (exported to Megatron-LM and NeMo), the
torchtitan profiles (a torchtitan job config) and the DeepSpeed profile (a DeepSpeed JSON). The rules
restate what the exporters refuse and the start-up checks they evaluate (export/facts/*_checks.yaml;
this layer sits below export and cannot call it: tests/search/test_launch_filter.py exports every row of
each filtered search). Where a framework runs a knob only in combination with axes the grid sets
independently, the knob is left out whole, so each filtered space is a subset of what F runs:

- Megatron-Core (Megatron-LM core_v0.14.0, NeMo v2.4.0): specs.rules megatron_fsdp_rule and
  megatron_overlap_rule, 1F1B and interleaved 1F1B, the default rank order, TP overlap only with
  sequence parallelism, no 2D tensor-parallel grid; offloads (Megatron offloads the optimizer only beside
  the distributed optimizer) and EP all-to-all overlap (asserted without full recomputation and with
  virtual stages at pp > 1) left out.
- torchtitan v0.2.2: FSDP2 over dp·cp (ZeRO 2 or 3; plain DDP runs only as the sole parallelism and
  ZeRO 1 has no FSDP2 form, so ZeRO 0 is left out), overlaps always on, sequence parallelism always on
  with tp > 1, recomputation none, full or per-op SAC (op_sac: dense swiglu models at cp = 1), 1F1B /
  interleaved 1F1B / GPipe with any split its model parts state (specs.rules.model_parts_rule: every
  stage at least vpp layers; the even split written as layers_per_stage, any other as
  module_fqns_per_model_part, export/torchtitan_split.py), with --vary-split too, seq divisible by
  2·tp·cp, the default rank order, 1D tensor parallelism, experts with etp 1 and the all-to-all
  dispatcher over ep dividing dp·cp·tp; offloads left out (its CPU offload moves weights and optimizer
  state together, with ZeRO 3 only).
- DeepSpeed v0.16.4: no context parallelism, AutoTP without sequence parallelism or TP overlap, 1F1B,
  ZeRO 0/1 with pipeline stages, no ZeRO 3 with AutoTP, one overlap switch for both DP overlaps, no DP
  overlap at ZeRO 0 (DeepSpeedEngine's buffered_allreduce_fallback: specs.rules_stack.engine_dp_overlap_rule),
  recomputation none or full, no experts split (DeepSpeed-MoE is set in the model script), 1D tensor
  parallelism, the default split and rank order; offloads left out.

The per-stage searches (search.staged, ``search --cluster`` / ``--non-uniform`` with ``--framework F``)
call the same rules on every candidate (``stage_plan_allowed``), with what a per-stage plan adds: each
launcher takes one tensor-parallel size, one data-parallel size and one recomputation mode for all
stages (a policy mode stated per stage as specs.recompute.stage_fields) and no other per-op
recomputation (the uniform search leaves recompute_modules out), a split only as
its exporter states one (``fixed_split``), and the launcher's own ZeRO stage and sequence parallelism
where the searches' fixed ones are not its (``staged_fields``).

Profiles without an exporter (the 2021 profiles, maxtext, the PyTorch and Hugging Face ones,
megatron-deepspeed, whose launch is Megatron-DeepSpeed's own arguments) search the whole space; the rows
then say which frameworks run them. The recomputation modes a stack alone runs (specs.recompute: op_sac
with torchtitan, save_dots with maxtext) are searched with that stack's profiles only (recompute_modes),
by the uniform and the per-stage searches alike (searched_modes).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from paraplan.specs.recompute import MODES, OP_SAC, offered_modes, stage_mode
from paraplan.specs.rules import (
    deepspeed_cp_rule,
    megatron_fsdp_rule,
    megatron_overlap_rule,
    model_parts_rule,
    recompute_modules_rule,
    torchtitan_sequence_rule,
)
from paraplan.specs.rules_moe import deepspeed_experts_rule, torchtitan_experts_rule
from paraplan.specs.rules_stack import (
    deepspeed_allreduce_fallback,
    engine_dp_overlap_rule,
    engine_zero_rule,
)
from paraplan.specs.split import default_first_last, grouped_split, stage_layer_counts

if TYPE_CHECKING:
    from paraplan.step.stage_links import StageSetting

MEGATRON_CORE = "megatron-core"
TORCHTITAN = "torchtitan"
DEEPSPEED = "deepspeed"
# launcher profile -> the exporters (export.FRAMEWORKS) that write its launch
TARGETS = {
    MEGATRON_CORE: ("megatron", "nemo"),
    TORCHTITAN: ("torchtitan",),
    DEEPSPEED: ("deepspeed",),
}
# profiles built on a launcher profile that launch through other arguments (no exporter writes them)
OWN_LAUNCH = frozenset({"megatron-deepspeed"})
SCHEDULES = {
    MEGATRON_CORE: ("1f1b", "interleaved"),
    TORCHTITAN: ("1f1b", "interleaved", "gpipe"),
    DEEPSPEED: ("1f1b",),
}
ZEROS = {MEGATRON_CORE: (0, 1, 2, 3), TORCHTITAN: (2, 3), DEEPSPEED: (0, 1, 2, 3)}
LAYOUTS = {MEGATRON_CORE: ("1d", "2d-seq"), TORCHTITAN: ("1d",), DEEPSPEED: ("1d",)}
RECOMPUTE = {  # the specs.recompute modes each exporter states
    MEGATRON_CORE: ("none", "selective", "full"),
    TORCHTITAN: ("none", "full", OP_SAC),
    DEEPSPEED: ("none", "full"),
}
DTYPES = {  # the training datatypes each exporter states (export.common.UNMAPPED_DTYPES aside)
    MEGATRON_CORE: ("fp32", "fp16", "bf16", "fp8"),
    TORCHTITAN: ("fp32", "bf16", "fp8"),
    DEEPSPEED: ("fp32", "fp16", "bf16"),
}


def launcher(framework) -> str | None:
    """The launcher profile whose exporters write ``framework``'s plans (a profile name or a
    FrameworkSpec): the first launcher on its ``base`` chain (catalog.framework_chain: nemo-24.09 and
    megatron-bridge-25.11 -> megatron-core, torchtitan-compiled -> torchtitan, a recipe built on
    torchtitan-compiled -> torchtitan); None for a profile no exporter writes (a chain reaching none, or
    an OWN_LAUNCH profile first)."""
    from paraplan.catalog import framework_chain

    return _first_launcher(framework_chain(framework))


@lru_cache(maxsize=64)
def _first_launcher(chain: tuple[str, ...]) -> str | None:
    """The first TARGETS profile of a base chain, None when an OWN_LAUNCH profile comes first."""
    for name in chain:
        if name in OWN_LAUNCH:
            return None
        if name in TARGETS:
            return name
    return None


def targets(framework: str | None) -> tuple[str, ...]:
    """The exporters a filtered search's rows are written with (none without a launcher)."""
    return TARGETS.get(launcher(framework), ())


def restricted(framework: str | None) -> bool:
    """Does the search leave out plans this framework profile cannot launch?"""
    return launcher(framework) is not None


def run_wide_violations(framework: str | None, problem) -> list[tuple[str, object, str]]:
    """(field, value, why) of the search's run-wide settings the framework's exporters cannot state:
    the datatype, the attention kernel (torchtitan and DeepSpeed run fused attention), the CP algorithm;
    and with any framework or none, a ``--recompute`` restriction no plan takes
    (recompute_mode_violations). The per-stage searches ask it through problem_violations, as the uniform search."""
    name = launcher(framework)
    if name is None:
        return recompute_mode_violations(framework, problem)
    out: list[tuple[str, object, str]] = []
    if problem.dtype not in DTYPES[name]:
        out.append(("dtype", problem.dtype, f"{framework} plans take {', '.join(DTYPES[name])}"))
    if name != MEGATRON_CORE and problem.attention != "flash":
        out.append(("attention", problem.attention, f"{framework} runs fused (flash) attention"))
    if (
        name == TORCHTITAN and problem.runtime.cp_algorithm != "ring"
    ):  # DeepSpeed: cp = 1, no algorithm
        out.append(
            ("cp_algorithm", problem.runtime.cp_algorithm, f"{framework} runs ring attention")
        )
    return out + recompute_mode_violations(framework, problem)


def problem_violations(framework: str | None, problem) -> list[tuple[str, object, str]]:
    """(field, value, why) of the uniform search's settings the framework's exporters cannot state: the
    run-wide ones (run_wide_violations) and the experts' (_expert_axis_violations: capacity, balance,
    expert axes outside Megatron-Core)."""
    name = launcher(framework)
    experts = [] if name is None else _expert_axis_violations(framework, name, problem)
    return run_wide_violations(framework, problem) + experts


@lru_cache(maxsize=64)
def recompute_modes(framework: str | None) -> tuple[str, ...]:
    """The recomputation modes (specs.recompute.MODES) a search with ``framework`` varies: the common ones
    and its stack's own (specs.recompute.offered_modes of catalog.framework_stack: op_sac with torchtitan,
    save_dots with maxtext), of them those its exporter states (RECOMPUTE) when one writes its plans."""
    from paraplan.catalog import framework_stack

    offered = offered_modes(framework_stack(framework))
    name = launcher(framework)
    return offered if name is None else tuple(m for m in offered if m in RECOMPUTE[name])


def searched_modes(
    framework: str | None, model, cp: int, restriction: tuple[str, ...] | None = None
) -> tuple[str, ...]:
    """The recomputation modes a search varies at context-parallel degree ``cp``: of ``restriction``
    (``--recompute``; None: every one) those the search with ``framework`` varies (recompute_modes) and
    the model takes (mode_refusal). The one rule of the uniform search (search.space) and of the per-stage
    searches (search.staged, at each stage's cp: a stage states any mode, specs.recompute.stage_fields)."""
    offered = recompute_modes(framework)
    return tuple(
        r for r in (restriction or offered) if r in offered and not mode_refusal(model, cp, r)
    )


def recompute_allowed(framework: str | None, recompute: str) -> bool:
    """Does the search with ``framework`` vary the recomputation mode ``recompute`` (recompute_modes)?"""
    return recompute in recompute_modes(framework)


def mode_refusal(model, cp: int, mode: str) -> str | None:
    """Why the model refuses recomputation mode ``mode`` at context-parallel degree ``cp`` (the estimator's
    rule, specs.rules.recompute_modules_rule); None when it takes it."""
    m = MODES[mode]
    return recompute_modules_rule(model, m.recompute, m.modules, cp)


def recompute_mode_violations(framework: str | None, problem) -> list[tuple[str, object, str]]:
    """(field, value, why) of a ``--recompute`` restriction no plan can take: none of its modes among those
    the framework's search varies, or a mode the model refuses at every cp (its rule at cp = 1)."""
    if not problem.recompute:
        return []
    offered = recompute_modes(framework)
    if not any(m in offered for m in problem.recompute):
        why = f"allowed with {f'--framework {framework}' if framework else 'no --framework'}: "
        return [("recompute", ",".join(problem.recompute), why + ", ".join(offered))]
    ruled = [(m, mode_refusal(problem.model, 1, m)) for m in problem.recompute if m in offered]
    return [("recompute", m, rule) for m, rule in ruled if rule]


def _expert_axis_violations(framework: str, name: str, problem) -> list[tuple[str, object, str]]:
    """Expert settings the framework cannot state: a capacity factor or a balance other than learned
    routing outside Megatron-Core, and expert axes (--ep, --etp, --dispatcher) that leave it no value
    (experts_allowed)."""
    out: list[tuple[str, object, str]] = []
    if name != MEGATRON_CORE and problem.capacity_factor is not None:
        out.append(("capacity_factor", problem.capacity_factor, f"{framework}: dropless only"))
    if name != MEGATRON_CORE and problem.moe_balance != "learned":
        out.append(("moe_balance", problem.moe_balance, f"{framework}: learned routing only"))
    if name == DEEPSPEED and problem.ep and 1 not in problem.ep:
        why = deepspeed_experts_rule(min(problem.ep), 1, "alltoall")
        out.append(("ep", ",".join(map(str, problem.ep)), f"{why}; allowed: 1"))
    if name != MEGATRON_CORE and problem.etp and 1 not in problem.etp:
        out.append(("etp", ",".join(map(str, problem.etp)), f"{framework}: allowed: 1"))
    if name != MEGATRON_CORE and problem.dispatchers and "alltoall" not in problem.dispatchers:
        out.append(("dispatcher", ",".join(problem.dispatchers), f"{framework}: allowed: alltoall"))
    return out


def degrees_allowed(framework: str | None, tp: int, cp: int, seq_length: int) -> bool:
    """DeepSpeed has no ring context parallelism (specs.rules.deepspeed_cp_rule); torchtitan needs seq
    divisible by tp·2·cp (specs.rules.torchtitan_sequence_rule)."""
    name = launcher(framework)
    if name == DEEPSPEED:
        return not deepspeed_cp_rule(cp)
    if name == TORCHTITAN:
        return not torchtitan_sequence_rule(seq_length, tp, cp)
    return True


def schedule_allowed(framework: str | None, schedule: str) -> bool:
    """The pipeline schedules the framework runs (SCHEDULES)."""
    name = launcher(framework)
    return name is None or schedule in SCHEDULES[name]


def stages_allowed(
    framework: str | None, stage_layers: list[int], vpp: int, units: tuple[int, int] = (0, 0)
) -> bool:
    """DeepSpeed takes the default split only (no accounted units); torchtitan any split its model
    parts state (specs.rules.model_parts_rule with the split's (embedding, loss) units, the rule its
    exporter refuses by). ``stage_layers``: the decoder layers of each of the pp stages."""
    name = launcher(framework)
    if name == DEEPSPEED and units != (0, 0):
        return False
    if name != TORCHTITAN or len(stage_layers) == 1:
        return True
    return not model_parts_rule(stage_layers, vpp, *units)


def state_allowed(
    framework: str | None,
    zero: int,
    reduce: bool,
    gather: bool,
    pp: int,
    tp: int = 1,
    fp8_primary: bool = False,
) -> bool:
    """ZeRO stage and DP overlaps at this pipeline depth and tensor-parallel size (module doc); with
    fp8 primary weights (fp8 without cached copies) Megatron-LM needs the distributed optimizer or FSDP
    (--fp8-param-gather, arguments.py line 615: ZeRO >= 1 over more than one data-parallel rank)."""
    name = launcher(framework)
    if name is None:
        return True
    if zero not in ZEROS[name]:
        return False
    if name == MEGATRON_CORE:
        if fp8_primary and zero == 0:
            return False
        return not (megatron_fsdp_rule(zero, pp) or megatron_overlap_rule(zero, reduce, gather))
    if name == TORCHTITAN:
        return reduce and gather
    if engine_zero_rule(DEEPSPEED, zero, pp) or tp > 1 and zero == 3:  # engine.py:426
        return False
    if engine_dp_overlap_rule(DEEPSPEED, reduce, pp, deepspeed_allreduce_fallback(zero, False)):
        return False
    return zero == 0 or reduce == gather


def offloads_allowed(framework: str | None) -> bool:
    """Are offloads searched? Not under a launcher (see the module doc)."""
    return not restricted(framework)


def placement_varied(framework: str | None, vary: bool) -> bool:
    """Every launcher searches its default rank order (tp-cp-ep-dp-pp, torchtitan's tp-cp-dp-pp,
    DeepSpeed's tp-dp-pp)."""
    return vary and not restricted(framework)


def layout_allowed(framework: str | None, layout: str) -> bool:
    """The tensor-parallel layouts the framework runs (LAYOUTS)."""
    name = launcher(framework)
    return name is None or layout in LAYOUTS[name]


def sequence_parallel_allowed(framework: str | None, tp: int, sequence_parallel: bool) -> bool:
    """torchtitan's TP always shards norms along the sequence; DeepSpeed's AutoTP never does."""
    name = launcher(framework)
    if name == TORCHTITAN and tp > 1:
        return sequence_parallel
    return name != DEEPSPEED or not sequence_parallel


def tp_overlap_allowed(framework: str | None, sequence_parallel: bool, overlap: bool) -> bool:
    """Megatron-LM's --tp-comm-overlap needs --sequence-parallel (arguments.py line 845); AutoTP does
    not overlap TP collectives."""
    name = launcher(framework)
    if name == DEEPSPEED:
        return not overlap
    return name is None or sequence_parallel or not overlap


def a2a_overlap_allowed(framework: str | None, overlap: bool) -> bool:
    """EP all-to-all overlap is left out under every launcher (see the module doc)."""
    return not restricted(framework) or not overlap


def experts_allowed(
    framework: str | None, tp: int, cp: int, dp: int, ep: int, etp: int, dispatcher: str
) -> bool:
    """torchtitan: etp 1, the all-to-all dispatcher, ep dividing dp·cp·tp (its expert mesh,
    specs.rules_moe.torchtitan_experts_rule); DeepSpeed: no expert split (ep = etp = 1,
    specs.rules_moe.deepspeed_experts_rule)."""
    name = launcher(framework)
    if name == TORCHTITAN:
        return not torchtitan_experts_rule(dp * cp * tp, ep, etp, dispatcher)
    if name == DEEPSPEED:
        return not deepspeed_experts_rule(ep, etp, dispatcher)
    return True


def experts_unrestricted(framework: str | None) -> bool:
    """experts_allowed is True for every expert option under this framework (no launcher, or one that
    states any (ep, etp, dispatcher)): the search's counts then skip the per-option question (DeepSeek-V3
    over every axis asks it 23,250 times to count its blocks)."""
    return launcher(framework) not in (TORCHTITAN, DEEPSPEED)


def staged_fields(framework: str | None, overlap_tp_comm: bool) -> dict[str, object]:
    """HeteroProblem fields a per-stage search states under the framework's launcher where its own (ZeRO
    0, no sequence parallelism) are not ones the launcher runs: the lowest ZeRO stage of ZEROS
    (torchtitan: 2, FSDP2), sequence parallelism where tp > 1 needs it (sequence_parallel_allowed; the
    profile's TP overlap, tp_overlap_allowed)."""
    name = launcher(framework)
    out: dict[str, object] = {}
    if name is not None and 0 not in ZEROS[name]:
        out["zero"] = min(ZEROS[name])
    if not (
        sequence_parallel_allowed(framework, 2, False)
        and tp_overlap_allowed(framework, False, overlap_tp_comm)
    ):
        out["sequence_parallel"] = True
    return out


def fixed_split(framework: str | None, layers: int, pp: int) -> tuple[int, ...] | None:
    """The decoder layers per stage of the one split a launcher states (DeepSpeed: its exporter writes
    partition "uniform", the search's default split, specs.split), or None where any split launches
    (Megatron-LM's --pipeline-model-parallel-layout, torchtitan's module_fqns_per_model_part, each within
    stages_allowed)."""
    if launcher(framework) != DEEPSPEED:
        return None
    first, last = default_first_last(layers, pp)
    return tuple(stage_layer_counts(grouped_split(layers, pp, first, last)))


def stage_plan_allowed(framework: str | None, problem, stages: Sequence[StageSetting]) -> bool:
    """Does the framework's launcher run a per-stage candidate: ``stages`` the settings of each pipeline
    stage (step.stage_links.StageSetting: its ``dims``' tp, cp and dp, recompute, recompute_ops), with
    ``problem``'s run-wide settings (a search.staged HeteroProblem)? One tp, dp and recompute mode on every
    stage (cp too), no per-op recomputation that is no mode (module doc; specs.recompute.stage_mode), and the
    uniform search's rules at those degrees: recompute_allowed, schedule_allowed, degrees_allowed,
    state_allowed, layout_allowed, sequence_parallel_allowed, tp_overlap_allowed."""
    if not restricted(framework):
        return True
    stated = {
        (s.dims.tp, s.dims.cp, s.dims.dp, stage_mode(s.recompute, s.recompute_ops)) for s in stages
    }
    if len(stated) > 1:
        return False
    (tp, cp, _, mode), pp, sp = stated.pop(), len(stages), problem.sequence_parallel
    if mode is None:
        return False
    fp8_primary = problem.dtype == "fp8" and not problem.runtime.fp8_weight_copies
    return (
        recompute_allowed(framework, mode)
        and schedule_allowed(framework, problem.schedule)
        and degrees_allowed(framework, tp, cp, problem.seq_length)
        and state_allowed(
            framework,
            problem.zero,
            problem.overlap_dp_grad_reduce,
            problem.overlap_param_gather,
            pp,
            tp,
            fp8_primary,
        )
        and layout_allowed(framework, "1d")
        and sequence_parallel_allowed(framework, tp, sp)
        and tp_overlap_allowed(framework, sp, problem.overlap_tp_comm and tp > 1)
    )
