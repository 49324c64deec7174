"""The pipeline's point-to-point rules, written once for both paths: the uniform builder
(step.layout.build_step_inputs, for the estimator and the search) and the per-stage one
(step.per_stage, whose links come from step.stage_links).

- ``exchanges``: how many exchanges a pipeline rank has with each neighbour per micro-batch, by the
  schedules of Megatron-LM (megatron/core/pipeline_parallel/schedules.py, p2p_communication.py);
- ``boundary_crosses``: on which link each stage boundary sits, for a uniform plan's pp group;
- ``uniform_group_p2p``: the per-micro-batch seconds of a uniform split group's stages, in at most two
  classes (the stages of a group differ only in which of their links cross a node);
- ``overlapped_p2p_exposed_s``: what the interleaved schedule's asynchronous transfers leave exposed
  (Megatron-Core overlap_p2p_comm);
- ``tied_embedding_sync_s``: the all-reduce of the tied word-embedding gradient between the first and
  the last stage (Megatron-LM finalize_model_grads.py, _allreduce_embedding_grads).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from paraplan.cost.elementwise import maximum, where

from paraplan.cost.comm import GroupSpan, LinearCollective, collective_time_s, linear_collective
from paraplan.graph.transformer import LayerShape
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.blocks import p2p_bytes

Num = Any

# two neighbouring ranks on one node (NVLink / PCIe domain), and on two nodes
ONE_NODE, TWO_NODES = GroupSpan(2, 2, 1), GroupSpan(2, 1, 2)


class PipelineLinks(NamedTuple):
    """What a uniform plan's pp group fixes for its point-to-point and tied-embedding traffic (floats, or
    arrays over a search's rows): one exchange of an activation between neighbours on one node and across
    nodes, the pp group's span (``per_domain`` consecutive stages per node, ``domains`` nodes), and the
    tied-embedding all-reduce between the first and the last stage (its form and its elements per GPU)."""

    inner_s: Num
    outer_s: Num
    per_domain: Num
    domains: Num
    tied: LinearCollective
    tied_elements: Num


def tied_embedding_elements(model: ModelSpec, tp: int) -> float:
    """Elements of the tied word-embedding gradient one GPU all-reduces with its peer stage: V·h/t when
    the input and output embeddings share one table (Megatron-LM share_embeddings_and_output_weights;
    ViT's classifier is not tied), else 0."""
    if not model.tie_embeddings or model.is_vit:
        return 0.0
    return model.vocab * model.hidden / tp


def pipeline_links(
    model: ModelSpec, system: SystemSpec, shape: LayerShape, pp_span: GroupSpan
) -> PipelineLinks:
    """PipelineLinks of a uniform plan: one exchange is one activation each way at once (p2p_bytes: the
    forward activation out, the gradient of the same size in) on the link, S/B + α (send_recv), times the
    runtime's transfers per exchange (specs.runtime: 2 where send and receive are separate blocking calls,
    DeepSpeed's PipelineEngine, cost.runtimes.DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE); the first and the
    last stage are on different nodes when the pp group spans several. The shape enters through the bytes and
    the tp degree only (``links_of``: the search's rows share one costing per (bytes, tp, span))."""
    return links_of(model, system, p2p_bytes(model, shape), shape.tp, pp_span)


def links_of(
    model: ModelSpec, system: SystemSpec, size: float, tp: int, pp_span: GroupSpan
) -> PipelineLinks:
    """``pipeline_links`` of an exchange of ``size`` bytes at tensor-parallel degree ``tp``."""
    crossing = pp_span.domains > 1
    transfers = system.accelerator.efficiency.runtime.p2p_transfers_per_exchange
    return PipelineLinks(
        transfers * collective_time_s("send_recv", size, ONE_NODE, system),
        transfers * collective_time_s("send_recv", size, TWO_NODES, system),
        pp_span.per_domain,
        pp_span.domains,
        linear_collective("all_reduce", TWO_NODES if crossing else ONE_NODE, system),
        tied_embedding_elements(model, tp),
    )


def exchanges(position: Num, pp: Num, vpp: Num) -> tuple[Num, Num]:
    """(exchanges with the previous rank, with the next rank) per micro-batch of the pipeline rank at
    ``position``; an exchange sends one tensor to the neighbour and receives one from it at once.

    Megatron-LM's 1F1B (schedules.py forward_backward_pipelining_without_interleaving): each steady-state
    micro-batch runs send_forward_recv_backward with the next rank and send_backward_recv_forward with the
    previous one (p2p_communication._communicate batches each pair into one batch_isend_irecv); the first
    rank has no previous and the last no next (is_pipeline_first_stage / is_pipeline_last_stage: the calls
    return without communicating), so the ends make one exchange and the middle ranks two — the
    2·(pp − 1) transfers a micro-batch's forward and backward cross. Interleaved (vpp chunks per rank,
    forward_backward_pipelining_with_interleaving): every chunk exchanges with both neighbours, the
    previous and next ranks wrapping around (rank pp − 1 feeds rank 0's next chunk), except the first
    chunk of rank 0 (nothing to receive) and the last chunk of rank pp − 1 (the loss): vpp exchanges with
    each neighbour, one fewer on the wrapping side of the two end ranks. GPipe, ZB-H1 and DualPipe send
    the same tensors (DualPipe's end ranks are the two directions' first and last stage). pp = 1: none."""
    multi = pp > 1
    first = position == 0
    last = position == pp - 1
    return where(multi, vpp - 1.0 * first, 0.0), where(multi, vpp - 1.0 * last, 0.0)


def stage_p2p_s(prev_s: Num, next_s: Num, position: Num, pp: Num, vpp: Num) -> Num:
    """Point-to-point seconds per micro-batch of the rank at ``position``: its exchanges (``exchanges``)
    with the previous rank at ``prev_s`` each and with the next at ``next_s`` each (for the end ranks of
    an interleaved pipeline the wrapping neighbour's link)."""
    with_prev, with_next = exchanges(position, pp, vpp)
    return where(with_prev > 0, with_prev * prev_s, 0.0) + where(
        with_next > 0, with_next * next_s, 0.0
    )


def _multiples(lo: Num, hi: Num, step: Num) -> Num:
    """How many multiples of ``step`` lie in [lo, hi] (lo ≥ −1)."""
    return hi // step - (lo - 1) // step


def uniform_group_p2p(
    links: PipelineLinks, index: Num, count: Num, pp: Num, vpp: Num
) -> tuple[tuple[Num, Num], tuple[Num, Num]]:
    """((seconds, stages), (seconds, stages)): the point-to-point seconds per micro-batch of the ``count``
    stages from position ``index`` of a uniform plan, in two classes by their links.

    Ranks r·s + k hold stage r (s: the pp stride of the placement), so with a = ``per_domain`` stages per
    node the boundary after stage i crosses nodes when (i + 1) mod a = 0 and the pp group spans several
    (``domains`` > 1), and so does the wrapping one between the last and the first stage (an interleaved
    pipeline's): rank i's link to its previous rank crosses when i mod a = 0, to its next when
    (i + 1) mod a = 0 or i = pp − 1 (exact when the stages tile the nodes: s divides the node or the node
    divides s; where they do not, step.placement lays the stages out one by one, and step.stage_links prices a
    per-stage plan's links one by one). With a ≥ 2 no middle rank
    has both links across, so a group of middle ranks holds C ranks with one crossing link and the rest
    with none; a group holding an end rank is one stage (specs/split.py). Class 2 is empty but for such
    a group of several middle ranks."""
    inner, outer, a, o = links.inner_s, links.outer_s, links.per_domain, links.domains
    spans = o > 1
    last = index + count - 1
    crossing_prev, crossing_next = _multiples(index, last, a), _multiples(index + 1, last + 1, a)
    prev_out = spans & (crossing_prev > 0)
    next_out = spans & ((crossing_next > 0) | (last == pp - 1))
    single = stage_p2p_s(
        where(prev_out, outer, inner), where(next_out, outer, inner), index, pp, vpp
    )
    mixed = (count > 1) & (a >= 2) & spans
    one = where(mixed, crossing_prev + crossing_next, count)
    return (
        (where(mixed, vpp * (inner + outer), single), one),
        (where(pp > 1, 2.0 * vpp * inner, 0.0), count - one),
    )


def tied_embedding_sync_s(tied: LinearCollective, elements: Num, grad_bytes: Num, pp: Num) -> Num:
    """The all-reduce of the tied word-embedding gradient between the first and the last stage once the
    data-parallel reduction is done (Megatron-LM finalize_model_grads.py: finish_grad_sync, then
    _allreduce_embedding_grads over the embedding group when pp > 1 and the embeddings are shared;
    DeepSpeed's ReduceTiedGrads), on the 2-member group's link: ``elements`` (tied_embedding_elements) at
    ``grad_bytes`` each (the gradient's dtype); it follows every stage's tail (step.compose.compose_step)."""
    return where(pp > 1, tied.time_s(elements * grad_bytes), 0.0)


def overlapped_p2p_exposed_s(p2p_s: Num, forward_s: Num, backward_s: Num) -> Num:
    """Exposed point-to-point seconds per micro-batch of a stage whose interleaved schedule overlaps its
    transfers with compute: max(0, P/2 − B) + max(0, P/2 − F), P the stage's transfers per micro-batch
    (``stage_p2p_s``), F and B its forward and backward.

    With overlap_p2p_comm Megatron-Core's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving, NVIDIA/Megatron-LM at 4dabc623) posts each chunk's
    send_forward_recv_forward as isend / irecv right after its forward and waits on them only before the
    next forward, the backward step running in between; the backward's send_backward_recv_backward is
    likewise hidden behind the next forward. Half of the transfers (the activations) hide behind the
    backward, the other half (their gradients) behind the forward; what outlasts its window stays exposed.
    Megatron-LM turns the overlap off without interleaving (megatron/training/arguments.py: "Overlap P2P
    communication is disabled if not using the interleaved schedule"), so 1F1B keeps P."""
    half = 0.5 * p2p_s
    return maximum(0.0, half - backward_s) + maximum(0.0, half - forward_s)
