"""The search's options, named: the values ``SearchProblem`` enumerates per axis (search/space.py), the rows of the
canonical space and their grids, and a candidate's plan.

Each is a ``typing.NamedTuple``: a tuple (equal, hashed and ordered as the plain tuple of its fields, so memo keys
and the canonical order are those of tuples) whose fields are read by name instead of ``k[5]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from paraplan.cost.comm import GroupSpan
from paraplan.specs.parallel import ParallelDims, parse_placement, placement_label
from paraplan.specs.plan import STATE_FIELDS, PlanSpec
from paraplan.specs.recompute import plan_fields

# the plan fields every candidate takes from the problem (search.space.SearchProblem), besides its
# run-wide knobs (SearchProblem.runtime, specs.plan.RuntimeFields)
FIXED_FIELDS = (
    "gpus",
    "seq_length",
    "dtype",
    "attention",
    "capacity_factor",
    "moe_balance",
    "expert_load_cv",
)


class LayerKnob(NamedTuple):
    """A row's layer knobs besides the degrees (SearchProblem.layer_knobs): they set the per-layer costs."""

    sequence_parallel: bool
    recompute: str  # a specs.recompute mode name (the plan's recompute and recompute_modules)
    overlap_tp_comm: bool
    tp_layout: str
    tp_rows: int | None

    @property
    def shape_key(self) -> tuple[bool, str, int]:
        """(sequence parallel, layout, grid rows or 0): what the layer shape reads of the knob (table.layer_shape_of)."""
        return (self.sequence_parallel, self.tp_layout, self.tp_rows or 0)


class ExpertOption(NamedTuple):
    """An expert layout of a mixture-of-experts model (SearchProblem.expert_options)."""

    ep: int
    etp: int
    dispatcher: str
    a2a_overlap: bool


NO_EXPERT_OPTION = ExpertOption(1, 1, "alltoall", False)  # a dense model's one expert option


class LayerSplit(NamedTuple):
    """Megatron-LM's accounting switches of the layer split (SearchProblem.split_options)."""

    embedding_as_layer: bool
    loss_as_layer: bool


class ScheduleOption(NamedTuple):
    """A pipeline schedule option of a row's grid (SearchProblem.schedule_options)."""

    vpp: int
    schedule: str
    split: LayerSplit


class StateOption(NamedTuple):
    """A sharding option of a row's grid (SearchProblem.state_options)."""

    zero: int
    overlap_dp_grad_reduce: bool
    overlap_param_gather: bool


class OffloadOption(NamedTuple):
    """An offload option of a row's grid (SearchProblem.offload_options)."""

    weights: bool
    activations: bool
    optimizer: bool


class GridOption(NamedTuple):
    """One candidate of a row's grid: a schedule, a state and an offload option (space.grid_option)."""

    vpp: int
    schedule: str
    split: LayerSplit
    zero: int
    overlap_dp_grad_reduce: bool
    overlap_param_gather: bool
    offload_weights: bool
    offload_activations: bool
    offload_optimizer: bool

    @classmethod
    def of(cls, schedule: ScheduleOption, state: StateOption, offload: OffloadOption) -> GridOption:
        return cls(*schedule, *state, *offload)


class Factorization(NamedTuple):
    """Degrees tp·cp·dp·pp = gpus of the space (SearchProblem.factorizations): ParallelDims' placed degrees, under
    their names and in their order (specs.parallel.DIM_NAMES; tests/unit/test_parallel_dims.py checks), so
    ``ParallelDims(*f)`` reads them. The space lists them nested tp, then pp, then cp (its canonical order), which is
    not this field order: nothing sorts them as tuples."""

    tp: int
    cp: int
    dp: int
    pp: int


class BatchOption(NamedTuple):
    """A (micro-batch, global batch) pair of a data-parallel degree (SearchProblem.micro_batches)."""

    micro_batch: int
    global_batch: int


@dataclass
class Row:
    """One (degrees, placement, layer knobs) combination: everything that sets per-layer costs. ``dims``
    holds the degrees (tp, cp, dp, pp, ep, etp) and the placement order."""

    dims: ParallelDims
    spans: dict[str, GroupSpan]
    micro_batch: int
    global_batch: int
    sequence_parallel: bool
    recompute: str  # a specs.recompute mode name
    overlap_tp_comm: bool
    tp_layout: str = "1d"
    tp_rows: int | None = None
    dispatcher: str = "alltoall"
    a2a_overlap: bool = False

    @property
    def placement(self) -> str:
        """The placement label of ``dims`` ("tp-cp-dp-pp")."""
        return placement_label(self.dims.placement_order)

    @property
    def microbatches(self) -> int:
        return self.global_batch // (self.dims.dp * self.micro_batch)


def row_dims(degrees: Factorization, placement: str, expert: ExpertOption) -> ParallelDims:
    """The ParallelDims of a row: its (tp, cp, dp, pp) factorization, placement label and expert option."""
    return ParallelDims(*degrees, expert.ep, expert.etp, parse_placement(placement))


# the plan fields a row sets under their own names besides its degrees (plan_of: those come from
# ParallelDims.plan_fields; its recompute mode sets two: plan_fields)
ROW_FIELDS = tuple(
    name
    for name in Row.__dataclass_fields__
    if name in PlanSpec.model_fields and name not in ("spans", "recompute")
)


def rows(problem):
    """Yield every row of the canonical space, in canonical order."""
    for degrees in problem.factorizations:
        placements = problem.placements(*degrees)
        for mb, gb in problem.micro_batches(degrees.dp):
            for placement, spans in placements:
                for knob in problem.layer_knobs(degrees.tp, degrees.cp):
                    for expert in problem.expert_options(degrees.tp, degrees.cp, degrees.dp):
                        dims = row_dims(degrees, placement, expert)
                        yield Row(dims, spans, mb, gb, *knob, expert.dispatcher, expert.a2a_overlap)


class GridParts(NamedTuple):
    """The three option lists whose product is a row's grid (``grid_parts``)."""

    schedules: list
    states: list
    offloads: list


def grid_parts(problem, pp: int, microbatches: int, dp_size: int) -> GridParts:
    """The three option lists whose product is a row's grid (it depends on pp, m and dp·cp only):
    schedule options (vpp, schedule, split), state options (zero, overlap_dp,
    overlap_gather), offload options (weights, activations, optimizer)."""
    return GridParts(
        problem.schedule_options(pp, microbatches),
        problem.state_options(dp_size, pp),
        problem.offload_options,
    )


def grid_option(parts: tuple[list, list, list], g: int) -> GridOption:
    """Option ``g`` of the product of ``parts`` (grid's order: schedule outermost, offload innermost)."""
    schedules, states, offloads = parts
    rest, o = divmod(g, len(offloads))
    s, t = divmod(rest, len(states))
    return GridOption.of(schedules[s], states[t], offloads[o])


def grid(problem, row: Row) -> list[GridOption]:
    """The row's candidates, in the grid's order."""
    dims = row.dims
    schedules, states, offloads = grid_parts(problem, dims.pp, row.microbatches, dims.dp * dims.cp)
    return [GridOption.of(a, b, c) for a in schedules for b in states for c in offloads]


def plan_of(problem, row: Row, option: GridOption) -> PlanSpec:
    """The PlanSpec of one candidate."""
    option = GridOption(*option)
    embedding_as_layer, loss_as_layer = option.split
    return PlanSpec(
        **{name: getattr(problem, name) for name in FIXED_FIELDS},
        **problem.runtime.model_dump(),
        **row.dims.plan_fields(),
        **{name: getattr(row, name) for name in ROW_FIELDS},
        **plan_fields(row.recompute),
        **{name: getattr(option, name) for name in STATE_FIELDS},
        vpp=option.vpp,
        schedule=option.schedule,
        embedding_as_layer=embedding_as_layer,
        loss_as_layer=loss_as_layer,
        moe_dispatcher=row.dispatcher,
        moe_a2a_overlap=row.a2a_overlap,
    )
