"""The layer shapes of the search's rows: the one rule (step.layer_shape.layer_shape_from) on a row's degrees and knobs,
and the expert knobs of an expert option (search.options.ExpertOption) with the problem's fixed ones."""

from __future__ import annotations

from paraplan.cost.moe import expert_dp_span
from paraplan.graph.ops import ExpertShape
from paraplan.graph.transformer import LayerShape
from paraplan.search.options import ExpertOption, LayerKnob
from paraplan.search.space import SearchProblem
from paraplan.specs.parallel import ParallelDims
from paraplan.step.layer_shape import layer_shape_from
from paraplan.step.constants import stack_shape_fields


def expert_shape_of(problem: SearchProblem, choice: ExpertOption) -> ExpertShape:
    """The ExpertShape of an expert option (space.expert_options) with the problem's fixed knobs."""
    choice = ExpertOption(*choice)
    return ExpertShape(
        choice.ep,
        choice.etp,
        choice.dispatcher,
        problem.capacity_factor,
        problem.moe_balance,
        choice.a2a_overlap,
        problem.expert_load_cv,
    )


def expert_spans(spans: dict, tp: int, cp: int, dp: int, choice: ExpertOption, system) -> dict:
    """A placement's spans with the expert gradient group's span for the option's ep and etp."""
    if "expert" not in spans:
        return spans
    degrees = ParallelDims(tp, cp, dp, ep=choice.ep, etp=choice.etp)
    return {**spans, "expert": expert_dp_span(degrees, system)}


def layer_shape_of(
    problem: SearchProblem,
    tp: int,
    cp: int,
    micro_batch: int,
    sp: bool,
    layout: str,
    rows: int,
    expert: ExpertShape = ExpertShape(),
    modules: tuple[str, ...] = (),
) -> LayerShape:
    """The LayerShape of a row: the one rule (step.layer_shape.layer_shape_from) on its degrees and knobs (a 2D
    grid of ``rows`` rows with the default panel count; MoE-shaped models add the expert knobs and the
    modules selective recomputation re-runs) and the system's stack fields."""
    stack = problem._memo.get("stack_shape_fields")  # the system's, asked ~12,000 times a search
    if stack is None:
        stack = problem._memo["stack_shape_fields"] = stack_shape_fields(problem.system)
    return layer_shape_from(
        tp,
        cp,
        micro_batch,
        problem.seq_length,
        sp,
        problem.attention,
        problem.dtype,
        expert,
        modules,
        layout,
        rows,
        None,
        problem.runtime.cp_algorithm,
        stack,
    )


def shape_keys_of(knobs: list[LayerKnob]) -> list[tuple]:
    """(sequence parallel, layout, grid rows or 0) of each layer-knob option (space.layer_knobs)."""
    return [LayerKnob(*knob).shape_key for knob in knobs]
