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
``moe`` (the whole MoE MLP); and ``op_sac``, torchtitan's per-op selective activation checkpointing
(``selective_ac_option = "op"``; graph.ops.OP_SAC_SOURCE), alone, on dense swiglu decoder layers;
and ``save_dots``, MaxText's ``remat_policy: minimal_flash`` (every weight GEMM's output and the
attention context saved, the element-wise ops re-run; graph.ops.SAVE_DOTS), alone, on dense decoder layers.

The rules of these knobs (ep and etp against the experts and the dense degrees, the dispatcher against
capacity, sequence parallelism with tp) are in specs/rules.py with every other plan rule.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator

from paraplan.specs.parallel import ParallelDims
from paraplan.specs.strict import InputModel

Dispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]
# the dispatchers a search tries when --dispatcher names none: hybridep is priced as deepep
# (cost.moe.moe_collective_time_s), so a default search would only duplicate the deepep plans
SEARCH_DISPATCHERS: tuple[str, ...] = ("alltoall", "allgather", "deepep")
Balance = Literal["forced", "learned"]
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "shared_experts",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "op_sac",
    "save_dots",
)


class MoEPlanFields(InputModel):
    """Mixture-of-experts knobs of a plan (defaults leave a dense plan unchanged)."""

    etp: int = Field(
        1, gt=0, description="expert tensor-parallel degree; ep·etp must divide tp·cp·dp"
    )
    moe_dispatcher: Dispatcher = Field(
        "alltoall",
        description="token dispatcher: alltoall (NCCL all-to-all), allgather, deepep (DeepEP kernels), "
        "hybridep (Megatron-Core flex dispatcher, Hybrid-EP backend)",
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
    expert_load_cv: float | None = Field(
        None,
        ge=0,
        description="learned routing: coefficient of variation of the experts' routing probabilities (the busiest "
        "rank's load, graph.routing.expected_max_load_factor); null: the published figure of the model's "
        "router_balancing (catalog/routing/expert_loads.yaml), 0 where none is published",
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


@lru_cache(maxsize=4096)
def expert_data_parallel(tp: int, cp: int, dp: int, ep: int, etp: int) -> int:
    """edp = tp·cp·dp / (ep·etp): the expert-data-parallel degree (ParallelDims.edp); memoised (a plan's spans ask
    for it once per placement order: cost.moe.expert_dp_span)."""
    return ParallelDims(tp=tp, cp=cp, dp=dp, ep=ep, etp=etp).edp
