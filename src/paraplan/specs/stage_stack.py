"""The training stacks of a per-stage plan's pools and the stack it may state (StagePlanSpec.engine_stack):
what each ran (STACK_FACTS) and the plan's parallel kinds and dtype checked against them, with the rules a
uniform plan's check uses (specs.rules_stack). specs.stage_plan.stage_plan_violations asks these."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from paraplan.specs.errors import Violation
from paraplan.specs.rules_stack import (
    dp_reduce_fallback,
    engine_dp_overlap_rule,
    stack_gpus_rule,
    stack_parallelism_rules,
)

if TYPE_CHECKING:
    from paraplan.specs.stage_plan import StagePlanSpec


@dataclass(frozen=True)
class StackFacts:
    """What a training stack a per-stage plan may state ran (StagePlanSpec.engine_stack): the pipeline
    engine it ran on, the dtypes it trained in and the parallel kinds its loop runs (specs.runtime.
    PARALLELISMS names); the rules and calibrated constants it sets on its engine are
    step.engines.ENGINE_STACKS's. stage_engine_stack_violations checks them."""

    engine: str
    dtypes: tuple[str, ...]
    parallelism: tuple[str, ...]


# amp2022: AMP's trials (Li et al. 2022, arXiv:2210.07297; DachengLi1/AMP @ 72eeea4, which vendors
# the sources it ran) ran Megatron-LM v1.1.5's GPT-2 pipe model on DeepSpeed's PipelineEngine in fp16
# (DeepSpeed's FP16 optimizer, runtime/fp16/fused_optimizer.py; the fp16 constants of
# step.engines.ENGINE_STACKS["amp2022"]: 6 B gradients, 2 B tied gradients), over data, tensor (mpu)
# and pipeline parallelism only: v1.1.5 has no sequence parallelism (Megatron-LM's came with
# Korthikanti et al. 2022), no context or expert parallelism and no TP comm-GEMM overlap.
STACK_FACTS = {"amp2022": StackFacts("deepspeed", ("fp16",), ("dp", "tp", "pp"))}
# the pipeline engine each training stack ran on
STACK_ENGINES = {name: facts.engine for name, facts in STACK_FACTS.items()}


def stage_stack_violations(plan: StagePlanSpec, pools) -> list[Violation]:
    """The parallel kinds the plan uses that the stack of a pool its stages use does not run
    (specs.rules_stack.stack_parallelism_rules on efficiency.runtime.parallelism, a uniform plan's check):
    the stages' tp, cp and dp, the plan's pp, sequence parallelism and TP overlap, each named once; a loop that
    runs on one device is refused the plan's GPUs first (stack_gpus_rule, as the uniform estimate names it)."""
    out: list[Violation] = []
    gpus = sum(s.gpus for s in plan.stages)
    for pool in pools:
        runs = pool.system.accelerator.efficiency.runtime.parallelism
        if rule := stack_gpus_rule(runs, gpus):
            if (v := Violation("gpus", gpus, rule)) not in out:
                out.append(v)
            continue
        _add_kind_violations(out, plan, runs, "its framework profile's")
    return out


def pools_reduce_fallback(
    pools, engine: str, zero: int, dtype: str, grad_dtype: str, offload_optimizer: bool = False
) -> tuple[str, ...]:
    """The names of the pools among ``pools`` whose stacks reduce the data-parallel gradients after the
    backward on DeepSpeedEngine (specs.rules_stack.dp_reduce_fallback of each pool's
    efficiency.runtime with the plan's ``engine``, ``zero``, ``dtype``, ``grad_dtype`` and
    ``offload_optimizer``): the per-stage plan's check and default (stage_dp_overlap) and the per-stage
    searches' (search.staged.problem) reading of the one rule."""
    facts = (engine, zero, dtype, grad_dtype, offload_optimizer)
    return tuple(
        pool.name
        for pool in pools
        if dp_reduce_fallback(pool.system.accelerator.efficiency.runtime, *facts)
    )


def stage_dp_overlap(plan: StagePlanSpec, pools) -> tuple[bool, str | None]:
    """(the plan's overlap_dp_grad_reduce, the rule refusing it or None) over ``pools``, the pools its
    stages use: a stated value, else the value the stacks run (engine_dp_overlap_rule's allowed value:
    false on DeepSpeed's PipelineEngine with pp > 1, and where a pool's stack falls back,
    pools_reduce_fallback, true otherwise). The switch is one for the whole plan, so over pools of
    different stacks false is the one value every stage's stack runs: a stated true is refused where
    any pool's stack falls back, the rule naming those pools."""
    facts = (plan.engine, plan.zero, plan.dtype, plan.grad_dtype, plan.offload_optimizer)
    falling = pools_reduce_fallback(pools, *facts)
    rule = engine_dp_overlap_rule(plan.engine, True, plan.pp, bool(falling))
    if rule is not None and falling:
        rule = f"pool {', '.join(falling)}: {rule}"
    overlap = plan.overlap_dp_grad_reduce
    if overlap is None:
        return rule is None, None
    return overlap, rule if overlap else None


def _add_kind_violations(out: list[Violation], plan: StagePlanSpec, runs, whose: str) -> None:
    """Append to ``out`` each parallel kind a stage of ``plan`` uses that ``runs`` (a stack's parallel kinds,
    stated by ``whose``) leaves out (specs.rules_stack.stack_parallelism_rules: the stage's tp, cp, dp, the
    plan's pp, sequence parallelism and TP overlap), each violation once."""
    for s in plan.stages:
        dims = replace(s.dims, pp=plan.pp)
        for rule in stack_parallelism_rules(
            runs, dims, plan.sequence_parallel, plan.overlap_tp_comm, whose
        ):
            if (v := Violation(*rule)) not in out:
                out.append(v)


def stage_engine_stack_violations(plan: StagePlanSpec) -> list[Violation]:
    """The dtype and parallel kinds the plan uses that the training stack it states
    (plan.engine_stack, STACK_FACTS) did not run: one violation per field naming the stack's allowed values
    (the parallel kinds through specs.rules_stack.stack_parallelism_rules, a profile's check)."""
    if plan.engine_stack is None:
        return []
    facts, name = STACK_FACTS[plan.engine_stack], plan.engine_stack
    out: list[Violation] = []
    if plan.dtype not in facts.dtypes:
        rule = f"engine_stack {name} trained in {', '.join(facts.dtypes)}"
        out.append(
            Violation("plan.dtype", plan.dtype, f"{rule}; allowed: {', '.join(facts.dtypes)}")
        )
    _add_kind_violations(out, plan, facts.parallelism, f"engine_stack {name}'s")
    return out
