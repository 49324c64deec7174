"""Plan knobs of mixture-of-experts training (issue 9), kept as a mixin until they join PlanSpec.

``ep`` (expert-parallel degree) is already a PlanSpec field. The groups follow Megatron-Core's
``parallel_state`` (expert-model-parallel groups are carved out of the same world as the dense
groups): the ``tp·cp·dp`` ranks of one pipeline stage are re-factored for the expert layers as
``etp · ep · edp``, so ``ep·etp`` must divide ``tp·cp·dp`` and the expert-data-parallel degree
(the group expert gradients are reduced over) is ``edp = tp·cp·dp / (ep·etp)``.

Selective recomputation by module (``recompute_modules``) uses Megatron-LM's module names
(``--recompute-modules``, megatron/core/transformer/transformer_config.py): ``core_attn``
(the attention core, what ``recompute: selective`` already re-runs), ``moe_act`` (the routed
experts' activation function), ``shared_experts``, ``layernorm`` (input and pre-MLP norms),
``mla_up_proj`` (MLA's query/key/value up-projections and rotary), ``mlp`` (the dense MLP), and
``moe`` (the whole MoE MLP).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from paraplan.specs.errors import Violation
from paraplan.specs.model import ModelSpec
from paraplan.specs.strict import InputModel

Dispatcher = Literal["alltoall", "allgather", "deepep"]
Balance = Literal["forced", "learned"]
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "shared_experts",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
)


class MoEPlanFields(InputModel):
    """Mixture-of-experts knobs of a plan (defaults leave a dense plan unchanged)."""

    etp: int = Field(
        1, gt=0, description="expert tensor-parallel degree; ep·etp must divide tp·cp·dp"
    )
    moe_dispatcher: Dispatcher = Field(
        "alltoall",
        description="token dispatcher: alltoall (NCCL all-to-all), allgather, deepep (DeepEP kernels)",
    )
    capacity_factor: float | None = Field(
        None,
        gt=0,
        description="expert capacity = factor·tokens·top_k/experts, tokens over it dropped and "
        "every expert padded to it; null = dropless",
    )
    moe_balance: Balance = Field(
        "learned",
        description="forced: tokens spread evenly over experts (benchmarks); learned: routing decides",
    )
    moe_a2a_overlap: bool = Field(
        False,
        description="dispatch/combine overlapped with another micro-batch's compute (DeepEP / 1F1B A2A overlap)",
    )
    recompute_modules: tuple[str, ...] | None = Field(
        None,
        description="selective recomputation by module name (null: Megatron-LM's default, core_attn)",
    )

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _known_modules(cls, value):
        if value is None:
            return None
        if isinstance(value, str):
            value = (value,)
        if not isinstance(value, (list, tuple)):
            raise ValueError(
                f"{value!r} is not a list of module names; allowed names: {', '.join(RECOMPUTE_MODULES)}"
            )
        value = tuple(value)
        for name in value:
            if name not in RECOMPUTE_MODULES:
                raise ValueError(
                    f"unknown module {name!r}; allowed: {', '.join(RECOMPUTE_MODULES)}"
                )
        return value


def expert_data_parallel(tp: int, cp: int, dp: int, ep: int, etp: int) -> int:
    """edp = tp·cp·dp / (ep·etp): the expert-data-parallel degree (Megatron-Core parallel_state)."""
    return tp * cp * dp // (ep * etp)


def expert_degree_rules(
    model: ModelSpec, tp: int, cp: int, dp: int, ep: int, etp: int
) -> list[tuple[str, int, str]]:
    """(field, value, rule) for each broken rule of ep and etp on an MoE model: ep divides the experts,
    ep·etp divides tp·cp·dp (Megatron-Core carves the expert groups from them), etp divides one
    expert's width. Shared by plan validation and the search space."""
    out = []
    if model.experts % ep:
        out.append(("plan.ep", ep, f"must divide experts={model.experts}"))
    if (tp * cp * dp) % (ep * etp):
        out.append(
            (
                "plan.ep",
                ep,
                f"ep·etp = {ep}·{etp} must divide tp·cp·dp = {tp}·{cp}·{dp} (expert groups are carved from them)",
            )
        )
    width = model.moe_ffn_hidden or 0
    if width % etp:
        out.append(("plan.etp", etp, f"must divide moe_ffn_hidden={width}"))
    return out


def dispatcher_rule(dispatcher: str, capacity_factor: float | None) -> str | None:
    """Megatron-LM's flex (DeepEP) dispatcher refuses moe_pad_expert_input_to_capacity."""
    if capacity_factor is not None and dispatcher == "deepep":
        return "the deepep dispatcher cannot pad experts to capacity; use null (dropless)"
    return None


def moe_sequence_parallel_rule(model: ModelSpec, tp: int, sequence_parallel: bool) -> str | None:
    """Megatron-Core refuses MoE layers with tensor parallelism but without sequence parallelism
    (megatron/training/arguments.py: "performance may degrade if MoE and tensor parallelism are
    enabled without also enabling sequence parallelism", enforced as an error)."""
    if model.is_moe and tp > 1 and not sequence_parallel:
        return f"MoE layers with tp={tp} need sequence_parallel (Megatron-Core)"
    return None


def moe_plan_violations(
    model: ModelSpec, tp: int, cp: int, dp: int, ep: int, moe: MoEPlanFields
) -> list[Violation]:
    """Rules of the MoE knobs against the model and the dense degrees, each naming field, value and rule."""
    out: list[Violation] = []
    if not model.is_moe:
        if ep != 1:
            out.append(
                Violation(
                    "plan.ep",
                    ep,
                    "expert parallelism needs a mixture-of-experts model; dense models use ep=1",
                )
            )
        if moe.etp != 1:
            out.append(
                Violation(
                    "plan.etp",
                    moe.etp,
                    "expert tensor parallelism needs a mixture-of-experts model; use etp=1",
                )
            )
        return out
    for field, value, rule in expert_degree_rules(model, tp, cp, dp, ep, moe.etp):
        out.append(Violation(field, value, rule))
    if rule := dispatcher_rule(moe.moe_dispatcher, moe.capacity_factor):
        out.append(Violation("plan.capacity_factor", moe.capacity_factor, rule))
    if "mla_up_proj" in (moe.recompute_modules or ()) and not model.is_mla:
        out.append(Violation("plan.recompute_modules", "mla_up_proj", "needs attention_type=mla"))
    return out
