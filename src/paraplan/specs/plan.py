"""The parallelization plan, and the rules that tie it to a model and a system.

Field-level rules are checked by pydantic when the plan is built; rules that involve the model or
the system (tp divides heads, the batch divides into micro-batches, ...) are returned by
``plan_violations`` as named :class:`Violation` s, so a search can count why candidates fail and the
CLI can print one clear line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from paraplan.specs.errors import Violation
from paraplan.specs.model import ModelSpec

Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "interleaved", "gpipe"]
PlanDtype = Literal["fp32", "fp16", "bf16", "fp8"]
GROUP_NAMES = ("tp", "cp", "dp", "pp")


class PlanSpec(BaseModel):
    """One way to run a training step. ``dp`` may be omitted: it is gpus / (tp·pp·cp)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus: int = Field(gt=0)
    tp: int = Field(1, gt=0, description="tensor-parallel degree (Megatron 1D); must divide heads and kv_heads")
    pp: int = Field(1, gt=0, description="pipeline stages; uneven splits follow schedule.pipeline.layers_on_stage")
    dp: int = Field(0, ge=0, description="data-parallel degree; 0 = infer from gpus")
    cp: int = Field(1, gt=0, description="context-parallel degree; splits the sequence")
    vpp: int = Field(1, gt=0, description="virtual stages per GPU (interleaved schedule)")
    ep: int = Field(1, gt=0, description="expert-parallel degree (dense models: 1)")
    micro_batch: int = Field(1, gt=0)
    global_batch: int = Field(gt=0)
    seq_length: int = Field(gt=0)
    sequence_parallel: bool = False
    recompute: Recompute = "none"
    zero: int = Field(0, ge=0, le=3, description="0 none, 1 optimizer state (distributed optimizer), 2 +grads, 3 +weights")
    dtype: PlanDtype = "bf16"
    attention: Literal["flash", "unfused"] = "flash"
    schedule: Schedule | None = Field(None, description="default: interleaved when vpp > 1, else 1f1b")
    offload_weights: bool = False
    offload_activations: bool = False
    offload_optimizer: bool = False
    overlap_dp_grad_reduce: bool = Field(True, description="overlap DP gradient reduction with backward")
    overlap_param_gather: bool = Field(True, description="overlap ZeRO parameter all-gather with forward")
    overlap_tp_comm: bool = Field(False, description="overlap TP collectives with GEMMs (userbuffers)")
    placement: str = Field("tp-cp-dp-pp", description="group order on the network, innermost first")

    @model_validator(mode="before")
    @classmethod
    def _infer_dp(cls, data):
        if isinstance(data, dict) and not data.get("dp"):
            data = dict(data)
            denom = data.get("tp", 1) * data.get("pp", 1) * data.get("cp", 1)
            gpus = data.get("gpus")
            if isinstance(gpus, int) and denom and gpus % denom == 0:
                data["dp"] = gpus // denom
        return data

    @model_validator(mode="after")
    def _check_self(self) -> "PlanSpec":
        order = self.placement.split("-")
        if sorted(order) != sorted(GROUP_NAMES):
            raise ValueError(f"placement={self.placement!r} must order tp, cp, dp, pp once each, e.g. 'tp-cp-dp-pp'")
        if self.schedule in ("1f1b", "gpipe") and self.vpp > 1:
            raise ValueError(f"schedule={self.schedule} cannot use vpp={self.vpp}; use 'interleaved'")
        return self

    @property
    def pipeline_schedule(self) -> Schedule:
        if self.schedule is not None:
            return self.schedule
        return "interleaved" if self.vpp > 1 else "1f1b"

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp · micro_batch)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def placement_order(self) -> tuple[str, ...]:
        return tuple(self.placement.split("-"))


def plan_violations(plan: PlanSpec, model: ModelSpec) -> list[Violation]:
    """Every rule the plan breaks for this model, each naming the field, the value and the rule."""
    out: list[Violation] = []
    if plan.dp == 0 or plan.tp * plan.pp * plan.dp * plan.cp != plan.gpus:
        out.append(
            Violation(
                "plan.gpus",
                plan.gpus,
                f"must equal tp·pp·dp·cp = {plan.tp}·{plan.pp}·{plan.dp or '?'}·{plan.cp}",
            )
        )
    if model.heads % plan.tp:
        out.append(Violation("plan.tp", plan.tp, f"must divide heads={model.heads}"))
    elif model.n_kv_heads % plan.tp:
        # Megatron-LM requires whole key/value groups per rank (num_query_groups % tp == 0)
        out.append(Violation("plan.tp", plan.tp, f"must divide kv_heads={model.n_kv_heads}"))
    if model.ffn_hidden % plan.tp:
        out.append(Violation("plan.tp", plan.tp, f"must divide ffn_hidden={model.ffn_hidden}"))
    if plan.pp > model.layers:
        out.append(Violation("plan.pp", plan.pp, f"must not exceed layers={model.layers}"))
    elif plan.vpp > 1 and model.layers % (plan.pp * plan.vpp):
        out.append(
            Violation("plan.vpp", plan.vpp, f"interleaving needs pp·vpp = {plan.pp * plan.vpp} to divide layers={model.layers}")
        )
    if plan.dp and plan.global_batch % (plan.dp * plan.micro_batch):
        out.append(
            Violation(
                "plan.global_batch",
                plan.global_batch,
                f"must be a multiple of dp·micro_batch = {plan.dp}·{plan.micro_batch}",
            )
        )
    if plan.seq_length % (2 * plan.cp if plan.cp > 1 else 1):
        out.append(Violation("plan.seq_length", plan.seq_length, f"must be divisible by 2·cp = {2 * plan.cp}"))
    if plan.sequence_parallel and plan.seq_length // plan.cp % plan.tp:
        out.append(Violation("plan.seq_length", plan.seq_length, f"seq_length/cp must be divisible by tp={plan.tp} with sequence_parallel"))
    if plan.vpp > 1 and plan.pp == 1:
        out.append(Violation("plan.vpp", plan.vpp, "needs pp > 1"))
    if plan.pipeline_schedule == "interleaved" and plan.dp and plan.global_batch % (plan.dp * plan.micro_batch) == 0:
        if plan.microbatches % plan.pp:
            out.append(
                Violation(
                    "plan.global_batch",
                    plan.global_batch,
                    f"interleaved schedule needs micro-batches ({plan.microbatches}) to be a multiple of pp={plan.pp}",
                )
            )
    if plan.ep != 1:
        out.append(Violation("plan.ep", plan.ep, "expert parallelism needs a mixture-of-experts model; dense models use ep=1"))
    return out
