"""The problem of the per-stage searches (``search --cluster`` and ``--non-uniform``): the model, the
cluster of node pools, the batch and the run-wide settings every stage of a searched plan shares
(HeteroProblem), read once from a framework profile (profile_fields, under_profile), and the launcher's
rules on one candidate's stage settings (launchable, search.launch)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost.frameworks import PLAN_DEFAULTS, framework_cluster
from paraplan.search import launch
from paraplan.search.expert_axes import expert_axes_violations
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.errors import InputError, Violation
from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.plan import RUNTIME_FIELDS, RuntimeFields, runtime_of
from paraplan.specs.rules_moe import dispatcher_rule
from paraplan.specs.rules_precision import accelerators_rules, cluster_default_precision
from paraplan.specs.rules_schedule import per_stage_schedules_rule
from paraplan.specs.rules_stack import (
    engine_dp_overlap_rule,
    engine_schedule_rule,
    engine_zero_rule,
    stack_gpus_rule,
    stack_parallelism_rules,
)
from paraplan.specs.stage_stack import pools_reduce_fallback
from paraplan.specs.uniform_stages import stage_engine
from paraplan.step.per_stage import Common, StageSetting, common_of


@dataclass(frozen=True)
class HeteroProblem:
    model: ModelSpec
    cluster: ClusterSpec
    global_batch: int
    seq_length: int
    # None: chosen for the cluster's accelerators (specs.rules_precision.cluster_default_precision: bf16 and
    # FlashAttention, fp16 and unfused attention where a pool is a V100 / T4), as the command chooses them
    dtype: str = None  # type: ignore[assignment]
    attention: str = None  # type: ignore[assignment]
    schedule: str = "1f1b"
    zero: int = 0
    # None: the value the engine runs at every depth the cluster allows (specs.rules_stack.
    # engine_dp_overlap_rule: false on DeepSpeed's PipelineEngine and where a pool's stack falls back on
    # DeepSpeedEngine, true otherwise), as a per-stage plan's default (specs.stage_stack.stage_dp_overlap)
    overlap_dp_grad_reduce: bool = None  # type: ignore[assignment]
    recompute: tuple[str, ...] = ("none", "full")
    micro_batches: tuple[int, ...] | None = (
        None  # per-GPU micro-batch sizes to try; default powers of two
    )
    engine: str = "megatron"
    tps: tuple[int, ...] | None = (
        None  # tensor-parallel degrees to try (AMP-style search); default powers of two in a node
    )
    pps: tuple[int, ...] | None = (
        None  # pipeline depths to try (AMP-style search); default every divisor
    )
    # the run-wide knobs a framework profile sets (cost.frameworks.PLAN_DEFAULTS; the cluster's systems
    # carry its stack): every plan states them, so ``estimate --plan --framework`` prices it identically
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False
    runtime: RuntimeFields = RuntimeFields()
    # the profile whose launcher must run every plan (search.launch), and the sequence parallelism it
    # may need (search.launch.staged_fields)
    framework: str | None = None
    sequence_parallel: bool = False
    # the run-wide axes the per-stage searches vary beside each stage's GPUs, tp and recompute
    # (search.staged.axes; the uniform search's --cp, --schedule and offload switches): by default the
    # space they searched before, cp 1 on every stage, ``schedule`` alone (None), no offload
    cps: tuple[int, ...] = (1,)
    schedules: tuple[str, ...] | None = None
    vary_offload: bool = False
    # a candidate's offloads (specs.plan.OFFLOAD_FIELDS), set on a variant (search.staged.axes.variants)
    offload_weights: bool = False
    offload_activations: bool = False
    offload_optimizer: bool = False
    # a mixture-of-experts model's axes (search.staged.experts: None, every value the rules allow, as the
    # uniform search's --ep, --etp, --dispatcher) and run-wide knobs (a uniform plan's, specs.moe_plan.
    # MoEPlanFields): capacity, balance and spread fixed for the search; the dispatcher and the a2a overlap
    # those of the candidates this problem prices (search.staged.experts.switched)
    ep: tuple[int, ...] | None = None
    etp: tuple[int, ...] | None = None
    dispatchers: tuple[str, ...] | None = None
    capacity_factor: float | None = None
    moe_balance: str = "learned"
    expert_load_cv: float | None = None
    moe_dispatcher: str = "alltoall"
    moe_a2a_overlap: bool = False

    def __post_init__(self) -> None:
        """Refuse a dtype or attention
        kernel a pool's accelerator lacks (specs.rules_precision.accelerator_rules, the check of every per-stage
        plan: specs.stage_plan.stage_accelerator_violations); the run-wide settings and expert axes the framework's
        launcher cannot state, a ``recompute`` restriction among them (search.launch.problem_violations, as the
        uniform search); a router spread the model's router cannot have (expert_problem_violations); and a
        cluster of more than one GPU under a stack whose loop runs on one device (specs.rules_stack.stack_gpus_rule).
        A mixture-of-experts model runs sequence parallelism where the launcher allows it (``_expert_defaults``)."""
        _expert_defaults(self)
        accelerators = [p.system.accelerator for p in self.cluster.pools]
        precision, _ = cluster_default_precision(accelerators)
        for name in ("dtype", "attention"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, precision[name])
        if self.overlap_dp_grad_reduce is None:
            deepest = engine_dp_overlap_rule(self.engine, True, self.cluster.gpus, _fallback(self))
            object.__setattr__(self, "overlap_dp_grad_reduce", deepest is None)
        if refused := accelerators_rules(accelerators, self.dtype, self.attention):
            raise InputError.from_violations([Violation(*r) for r in refused])
        unlaunchable = launch.problem_violations(self.framework, self) + expert_problem_violations(
            self
        )
        if unlaunchable:
            raise InputError.from_violations([Violation(*v) for v in unlaunchable])
        # degrees and micro-batch sizes are positive counts (named as the command's options)
        for name, option in (
            ("cps", "cp"),
            ("micro_batches", "micro-batch"),
            ("tps", "tp"),
            ("pps", "pp"),
        ):
            values = getattr(self, name)
            if values is not None and (not values or min(values) < 1):
                listed = ",".join(map(str, values))
                raise InputError(f"{option}: {listed!r} is not allowed; give positive integers")
        if refused := per_stage_schedules_rule(self.schedules):
            names, rule = refused
            raise InputError(f"schedules: {','.join(names)!r} is not allowed; {rule}")
        for pool in self.cluster.pools:  # a one-device loop (specs.rules_stack.stack_gpus_rule)
            runs = pool.system.accelerator.efficiency.runtime.parallelism
            if rule := stack_gpus_rule(runs, self.cluster.gpus):
                raise InputError(f"cluster: {self.cluster.gpus} GPUs is not allowed; {rule}")

    # model chunks per stage (read by step.per_stage.common_of with the fields above): 1 in the searches'
    # own candidates; an interleaved uniform seed's (search.staged.uniform_seed) where the per-stage search
    # alleviates from it, with its schedule
    vpp: int = 1

    @property
    def common(self) -> Common:
        return common_of(self)


def searched_modes(problem: HeteroProblem, cp: int = 1) -> tuple[str, ...]:
    """The recomputation modes of ``problem.recompute`` the per-stage searches vary at context-parallel
    degree ``cp``: the uniform search's rule (search.launch.searched_modes), each stated per stage by
    specs.recompute.stage_fields."""
    return launch.searched_modes(problem.framework, problem.model, cp, problem.recompute)


def _expert_defaults(problem: HeteroProblem) -> None:
    """An MoE model's search runs sequence parallelism where the framework's launcher allows it
    (search.launch.sequence_parallel_allowed): Megatron-Core refuses MoE layers with tp > 1 without it
    (specs.rules_moe.moe_sequence_parallel_rule), and a stage at tp 1 prices alike either way (it splits no
    sequence), so the search loses no plan; without it every MoE candidate would keep tp 1."""
    if problem.model.is_moe and launch.sequence_parallel_allowed(problem.framework, 2, True):
        object.__setattr__(problem, "sequence_parallel", True)


def expert_problem_violations(problem: HeteroProblem) -> list[tuple[str, object, str]]:
    """(field, value, why) of the problem's expert axes and fixed MoE knobs the rules refuse: the axes no
    plan can take and the router's spread (search.expert_axes.expert_axes_violations, the uniform search's
    check) and the dispatcher against the capacity (dispatcher_rule: a stated one; searched ones are
    filtered, search.expert_axes.expert_switches)."""
    axes = (problem.ep, problem.etp, problem.dispatchers, problem.capacity_factor)
    out = expert_axes_violations(problem.model, *axes, problem.expert_load_cv)
    if rule := dispatcher_rule(problem.moe_dispatcher, problem.capacity_factor):
        out.append(("moe_dispatcher", problem.moe_dispatcher, rule))
    return out


def profile_fields(profile: FrameworkSpec, cluster_spec: ClusterSpec) -> tuple[ClusterSpec, dict]:
    """(the cluster under the profile's stack, cost.frameworks.framework_cluster; the HeteroProblem fields of
        its plan defaults, cost.frameworks.PLAN_DEFAULTS: attention and the overlap switches, and the run-wide
        knobs, specs.plan.runtime_of; its name, whose launcher must run every plan, and the settings
    search.launch.staged_fields states), the one reading of a profile by the per-stage searches."""
    fields = {k: getattr(profile, k) for k in PLAN_DEFAULTS if k not in RUNTIME_FIELDS}
    # the profile's DP overlap is a default: on, the overlap where the stacks run it (HeteroProblem's None),
    # as the uniform search's state options take it (search.grid_axes: off where DeepSpeedEngine falls back)
    fields["overlap_dp_grad_reduce"] = None if profile.overlap_dp_grad_reduce else False
    fields["runtime"] = runtime_of(profile)
    fields["engine"] = stage_engine(profile.pipeline_engine)  # the profile's pipeline runtime
    staged = launch.staged_fields(profile.name, profile.overlap_tp_comm)
    fields |= {"framework": profile.name, **staged}
    return framework_cluster(profile, cluster_spec), fields


def under_profile(
    profile: FrameworkSpec, cluster_spec: ClusterSpec, given: dict
) -> tuple[ClusterSpec, dict]:
    """(the cluster, the HeteroProblem fields) of a per-stage search under ``profile`` (profile_fields), the
    caller's ``given`` fields kept where the profile states none, and its ``attention`` winning over the
    profile's (``--attention`` stated): the one reading of the command and the Python API."""
    cluster_spec, stated = profile_fields(profile, cluster_spec)
    return cluster_spec, given | stated | {"attention": given.get("attention", stated["attention"])}


def depth_allowed(problem: HeteroProblem, pp: int) -> bool:
    """Does the problem's pipeline runtime take its ZeRO stage and its schedule at ``pp`` stages
    (specs.rules_stack.engine_zero_rule, engine_dp_overlap_rule, engine_schedule_rule: the per-stage plan's
    checks; DeepSpeed's PipelineEngine refuses ZeRO-2/3, a DP overlap and any schedule but 1F1B with pp > 1), and do the stacks of the
    cluster's pools run pipeline parallelism at all (stack_parallelism_rules)? The pipeline depths both
    per-stage searches list (search.staged.hetero, search.staged.non_uniform)."""
    return (
        engine_zero_rule(problem.engine, problem.zero, pp) is None
        and engine_dp_overlap_rule(
            problem.engine, problem.overlap_dp_grad_reduce, pp, _fallback(problem)
        )
        is None
        and engine_schedule_rule(problem.engine, problem.schedule, problem.vpp, pp) is None
        and not _stack_refusals(problem, ParallelDims(pp=pp))
    )


def _fallback(problem: HeteroProblem) -> bool:
    """Whether a pool of the cluster reduces after the backward on DeepSpeedEngine (specs.stage_stack.
    pools_reduce_fallback: specs.rules_stack.dp_reduce_fallback of each pool's stack with the problem's
    engine, ZeRO stage, dtype and gradient dtype, no optimizer offload): the per-stage plan's rule, so
    that its default and the searched plans agree."""
    facts = (problem.engine, problem.zero, problem.dtype, problem.runtime.grad_dtype)
    return bool(pools_reduce_fallback(problem.cluster.pools, *facts))


def _stack_refusals(problem: HeteroProblem, dims: ParallelDims) -> list:
    """specs.rules_stack.stack_parallelism_rules of ``dims`` (with the problem's sequence parallelism and TP
    overlap) on each pool's stack (efficiency.runtime.parallelism), the per-stage check's rule."""
    return [
        rule
        for pool in problem.cluster.pools
        for rule in stack_parallelism_rules(
            pool.system.accelerator.efficiency.runtime.parallelism,
            dims,
            problem.sequence_parallel,
            problem.overlap_tp_comm,
        )
    ]


def launchable(problem: HeteroProblem, settings: list[StageSetting]) -> bool:
    """Does the framework's launcher run these stage settings (search.launch.stage_plan_allowed), and the
    stacks of the pools their tensor and data parallelism (_stack_refusals, the per-stage check's rule)?"""
    if any(_stack_refusals(problem, replace(s.dims, pp=1)) for s in settings):
        return False
    return launch.stage_plan_allowed(problem.framework, problem, settings)
