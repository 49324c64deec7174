"""The parallel dimensions of a plan: one registry, in the spirit of torchtitan's ``ParallelDims``.

Every place that needs "the list of parallel groups" — plan validation, placement on the network,
group spans, labels, CSV columns, search axes, CLI options — reads it from here:

- ``DIMS``: the dimensions a plan places on the cluster, in Megatron-LM's default rank order,
  innermost first (tp, cp, dp, pp; Narayanan et al. 2021 §3 and Megatron-LM's
  ``RankGenerator`` order "tp-cp-ep-dp-pp"); expert dimensions (ep, etp) will be carved out of
  dp × cp × tp, as Megatron-Core does, and join here;
- ``GRADIENT_GROUPS``: which dimensions reduce which gradients (dense parameters over data ×
  context ranks, Megatron-LM's ``data_parallel_group_with_cp``);
- ``derive_dp``: the one rule that derives dp from the GPU count;
- ``ParallelDims``: one plan's (or one stage's) degrees and their placement order, the value the plan
  rules (specs/rules.py), the placement spans (cost.comm.group_span) and the staged searches read.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class ParallelDim:
    """One parallel dimension: its plan field, what it splits and how it is labelled."""

    name: str  # the plan field (PlanSpec.<name>) and the group's name in the op graph
    title: str  # for help texts and docs
    splits: str  # what the dimension divides


DIMS: tuple[ParallelDim, ...] = (
    ParallelDim(
        "tp", "tensor parallel", "each layer's weight matrices and heads (Shoeybi et al. 2019)"
    ),
    ParallelDim("cp", "context parallel", "the sequence of every sample (Liu et al. 2023)"),
    ParallelDim("dp", "data parallel", "the global batch (replicas of the model)"),
    ParallelDim("pp", "pipeline parallel", "the layers into stages (Narayanan et al. 2021)"),
)
DIM_NAMES: tuple[str, ...] = tuple(d.name for d in DIMS)
DEFAULT_PLACEMENT: tuple[str, ...] = DIM_NAMES  # innermost (fastest-varying rank) first
PLACEMENT_SEPARATOR = "-"
DEFAULT_PLACEMENT_LABEL = PLACEMENT_SEPARATOR.join(DEFAULT_PLACEMENT)

# Gradient groups: name -> the dimensions whose ranks hold the same parameters and reduce their
# gradients together. Context-parallel ranks hold the same weights as data-parallel ones.
# Routed experts ("expert") are reduced over the expert-data-parallel ranks, edp = tp·cp·dp/(ep·etp),
# carved out of the same ranks (Megatron-Core parallel_state; span: cost.moe.expert_dp_span).
GRADIENT_GROUPS: dict[str, tuple[str, ...]] = {"dense": ("cp", "dp"), "expert": ("tp", "cp", "dp")}


def placement_label(order: tuple[str, ...]) -> str:
    """ "tp-cp-dp-pp" from ("tp", "cp", "dp", "pp")."""
    return PLACEMENT_SEPARATOR.join(order)


@lru_cache(maxsize=256)
def parse_placement(label: str) -> tuple[str, ...]:
    """("tp", "cp", "dp", "pp") from "tp-cp-dp-pp"; ValueError unless each dimension appears once.
    Cached: ``PlanSpec.placement_order`` reads it at every access."""
    order = tuple(label.split(PLACEMENT_SEPARATOR))
    if sorted(order) != sorted(DIM_NAMES):
        raise ValueError(
            f"placement={label!r} must order {', '.join(DIM_NAMES)} once each, e.g. {DEFAULT_PLACEMENT_LABEL!r}"
        )
    return order


def derive_dp(gpus: int, degrees: dict[str, int]) -> int | None:
    """dp = gpus / Π(other degrees), or None when that does not divide evenly."""
    other = 1
    for name in DIM_NAMES:
        if name != "dp":
            other *= int(degrees.get(name) or 1)
    if other <= 0 or gpus % other:
        return None
    return gpus // other


# ParallelDims' degrees, each a PlanSpec field of the same name
DEGREE_FIELDS: tuple[str, ...] = (*DIM_NAMES, "ep", "etp")


@dataclass(frozen=True, slots=True)
class ParallelDims:
    """The degrees of one plan, or of one stage of a per-stage plan, and their order on the network.

    ``tp·cp·dp·pp`` GPUs, placed innermost first in ``placement_order`` (DIMS' names). The expert
    dimensions are carved out of the ``tp·cp·dp`` ranks of a stage (Megatron-Core parallel_state):
    ``ep·etp`` of them hold distinct experts, ``edp = tp·cp·dp / (ep·etp)`` replicate each, e.g. tp 2,
    dp 8, ep 4, etp 1: 16 ranks per stage, 4 expert shards, each replicated edp = 4 times.
    Anything that reads ``tp``/``cp``/``dp``/``pp``/``placement_order`` (PlanSpec does) places the
    same way: cost.comm.group_span takes either."""

    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1
    placement_order: tuple[str, ...] = DEFAULT_PLACEMENT

    @property
    def world(self) -> int:
        """GPUs these degrees occupy: tp·cp·dp·pp."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: tp·cp·dp."""
        return self.tp * self.cp * self.dp

    @property
    def edp(self) -> int:
        """Expert-data-parallel degree: tp·cp·dp / (ep·etp) (Megatron-Core parallel_state)."""
        return self.stage_gpus // (self.ep * self.etp)

    def plan_fields(self) -> dict:
        """The PlanSpec fields these set: the degrees and the placement label (PlanSpec.dims' inverse)."""
        degrees = {name: getattr(self, name) for name in DEGREE_FIELDS}
        return {**degrees, "placement": placement_label(self.placement_order)}
