"""The pipeline's point-to-point rules, written once for both paths: the uniform builder
(step.layout.build_step_inputs, for the estimator and the search) and the per-stage one
(step.per_stage, whose links come from step.stage_links).

- ``exchanges``: how many exchanges a pipeline rank has with each neighbour per micro-batch, by the
  schedules of Megatron-LM (megatron/core/pipeline_parallel/schedules.py, p2p_communication.py);
- ``boundary_crosses``: on which link each stage boundary sits, for a uniform plan's pp group;
- ``uniform_group_p2p``: the per-micro-batch seconds of a uniform split group's stages, in at most two
  classes (the stages of a group differ only in which of their links cross a node);
- ``pipe_tp_gathers_s``: the TP all-gathers a pipeline runtime runs on each side of an exchange to rebuild
  what it split over the TP ranks (DeepSpeed's PipelineEngine: PartitionedTensor.full());
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
from paraplan.step.engines import pipe_tp_gathers

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
    # the pipeline runtime's TP all-gathers per exchange on the receiving and on the sending side
    # (pipe_tp_gathers_s; 0 but on DeepSpeed's PipelineEngine at tp > 1)
    recv_gather_s: Num = 0.0
    send_gather_s: Num = 0.0


def tied_embedding_elements(model: ModelSpec, tp: int) -> float:
    """Elements of the tied word-embedding gradient one GPU all-reduces with its peer stage: V·h/t when
    the input and output embeddings share one table (Megatron-LM share_embeddings_and_output_weights;
    ViT's classifier is not tied), else 0."""
    if not model.tie_embeddings or model.is_vit:
        return 0.0
    return model.vocab * model.hidden / tp


def pipe_tp_gathers_s(
    gathers: Num, whole_bytes: Num, tp_span: GroupSpan, system: SystemSpec
) -> Num:
    """Seconds of ``gathers`` all-gathers of the whole activation (``whole_bytes``: b·(s/c)·h at the
    activation's bytes, as the receiving or sending stage holds it) over one stage's TP group:
    n · ((t_in − 1)/t_in · S/B_nvlink + (o − 1)/o · (S/t_in)/B_nic + latency) (cost.comm.linear_collective's
    all-gather on ``tp_span``; 0 for n = 0 or one TP rank).

    DeepSpeed's PipelineEngine with model parallelism splits the activation it sends and the gradient it
    returns over the TP ranks (pipe_partitioned / grad_partitioned, True by default: runtime/config.py
    get_pipeline_config at 0050fdad) and rebuilds each with PartitionedTensor.full(), an
    all_gather_into_tensor over the slice-parallel (TP) group (runtime/utils.py 699-716), issued without
    async_op before the compute that reads it: once per micro-batch on the receiver (its input,
    pipe/engine.py _exec_forward_pass 660-667) and twice on the sender (its own output, partitioned after the
    forward at 695-700 and rebuilt at 752-759, and the received gradient at 767-774, _exec_backward_pass).
    The counts are the engine's (step.engines.EngineRules.tp_gathers), one rule for the uniform path
    (links_of) and the per-stage one (step.stage_links.p2p_exchange_s)."""
    if not gathers:
        return 0.0
    return gathers * linear_collective("all_gather", tp_span, system).time_s(whole_bytes)


def pipeline_links(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    pp_span: GroupSpan,
    tp_span: GroupSpan | None = None,
) -> PipelineLinks:
    """PipelineLinks of a uniform plan: one exchange is one activation each way at once (p2p_bytes: the
    forward activation out, the gradient of the same size in) on the link, S/B + α (send_recv), times the
    runtime's transfers per exchange (specs.runtime: 2 where send and receive are separate blocking calls,
    DeepSpeed's PipelineEngine, cost.runtimes.DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE); the first and the
    last stage are on different nodes when the pp group spans several; the runtime's TP all-gathers on each
    side on the plan's ``tp_span`` (pipe_tp_gathers_s, where ``link_tp_span`` keeps it). The shape enters
    through the bytes and the tp degree only (``links_of``: the search's rows share one costing per (bytes,
    tp, span, link_tp_span))."""
    size = p2p_bytes(model, shape)
    return links_of(model, system, size, shape.tp, pp_span, link_tp_span(system, tp_span))


def links_of(
    model: ModelSpec,
    system: SystemSpec,
    size: float,
    tp: int,
    pp_span: GroupSpan,
    tp_span: GroupSpan | None = None,
) -> PipelineLinks:
    """``pipeline_links`` of an exchange of ``size`` bytes at tensor-parallel degree ``tp``, with the
    pipeline runtime's TP all-gathers (``pipe_tp_gathers_s`` of the whole activation, size·t, on the
    stages' ``tp_span``; none without one: ``link_tp_span``)."""
    crossing = pp_span.domains > 1
    runtime = system.accelerator.efficiency.runtime
    transfers = runtime.p2p_transfers_per_exchange
    recv, send = pipe_tp_gathers(runtime.pipeline_engine)
    one = 0.0 if tp_span is None else float(pipe_tp_gathers_s(1, size * tp, tp_span, system))
    return PipelineLinks(
        transfers * collective_time_s("send_recv", size, ONE_NODE, system),
        transfers * collective_time_s("send_recv", size, TWO_NODES, system),
        pp_span.per_domain,
        pp_span.domains,
        linear_collective("all_reduce", TWO_NODES if crossing else ONE_NODE, system),
        tied_embedding_elements(model, tp),
        recv * one,
        send * one,
    )


def link_tp_span(system: SystemSpec, tp_span: GroupSpan) -> GroupSpan | None:
    """The TP span a uniform plan's pipeline links read: ``tp_span`` where the plan's pipeline runtime
    gathers over the TP group (step.engines.pipe_tp_gathers), else None (the links then do not depend on
    it, so the search costs one per exchange's bytes, tp and pp span)."""
    gathers = pipe_tp_gathers(system.accelerator.efficiency.runtime.pipeline_engine)
    return tp_span if any(gathers) else None


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
    a group of several middle ranks. Each exchange with the previous rank adds the runtime's receiving-side
    TP gathers (``recv_gather_s``), each with the next its sending-side ones (``send_gather_s``)."""
    inner, outer, a, o = links.inner_s, links.outer_s, links.per_domain, links.domains
    spans = o > 1
    last = index + count - 1
    crossing_prev, crossing_next = _multiples(index, last, a), _multiples(index + 1, last + 1, a)
    prev_out = spans & (crossing_prev > 0)
    next_out = spans & ((crossing_next > 0) | (last == pp - 1))
    recv, send = links.recv_gather_s, links.send_gather_s
    single = stage_p2p_s(
        where(prev_out, outer, inner) + recv, where(next_out, outer, inner) + send, index, pp, vpp
    )
    mixed = (count > 1) & (a >= 2) & spans
    one = where(mixed, crossing_prev + crossing_next, count)
    gathers = vpp * (
        recv + send
    )  # a middle rank's, receiving from its previous and sending to its next
    return (
        (where(mixed, vpp * (inner + outer) + gathers, single), one),
        (where(pp > 1, 2.0 * vpp * inner + gathers, 0.0), count - one),
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
