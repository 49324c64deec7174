"""One block's per-micro-batch time terms (:class:`BlockTerms`) and what it holds (:class:`BlockCost`).

``block_terms`` turns a block's summed op times and collective times (step/build.py) into the
seconds the step composition adds: compute, recomputation, and the communication that stays
exposed after the overlaps each collective gets. Plain arithmetic on floats or numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from paraplan.cost.comm import priced_exposure_s
from paraplan.cost.elementwise import maximum, where
from paraplan.cost.host import host_bound_s
from paraplan.cost.overlap import (
    UB_SPLITS,
    chunked_overlap_exposed_s,
    gathered_ring_exposed_s,
    ring_attention_exposed_s,
)
from paraplan.graph.cp_ring_torch import TORCH_RING_BACKWARD_UNITS

Num = Any  # float or numpy array, broadcastable

# TP comm-GEMM overlap pipelines each GEMM and its collective in this many chunks: the
# num_splits = 4 of the pipelined reduce-scatter overlaps in NeMo's Transformer Engine userbuffers
# configurations (ring-exchange all-gather overlap splits in tp = 4-8 chunks; cost.overlap.UB_SPLITS).
TP_OVERLAP_CHUNKS = UB_SPLITS


@dataclass(frozen=True)
class BlockTerms:
    """Per-micro-batch seconds of one block on one GPU: compute, and communication left exposed.

    Forward and backward communication are kept apart because they sit in different overlap
    windows (``tail_terms``); collectives re-run by recomputation happen in the backward pass and
    are counted in ``tp_backward`` / ``cp_backward``."""

    forward: Num
    backward: Num
    recompute: Num
    tp_forward: Num
    tp_backward: Num
    cp_forward: Num
    cp_backward: Num
    ep_forward: Num = 0.0  # exposed expert-parallel dispatch / combine (graph/moe.py)
    ep_backward: Num = 0.0
    wgrad: Num = (
        0.0  # the weight-gradient share of ``backward`` (split-backward schedules); not added again
    )
    # backward TP communication exposed in addition to ``tp_backward`` when a split-backward schedule
    # defers the weight-gradient GEMMs it would hide behind (``deferred_wgrad_exposure_s``)
    tp_deferred: Num = 0.0
    # the expert-parallel dispatch / combine seconds of one forward and one backward, none hidden: what
    # DualPipe's overlapped forward-backward pair hides behind its compute (step.dualpipe); not added again
    ep_comm: Num = 0.0


# the parts a stage's work sums; ``wgrad`` is a share of ``backward``, ``tp_deferred`` is added
# to ``tp_backward`` under split-backward schedules only (step.inputs.stage_work) and ``ep_comm``
# is read by DualPipe's pair (step.dualpipe.overlapped_pair_s) and the A2A overlap's unpaired passes
# (unpaired_ep_exposure_s) alone
SPLIT_ONLY_TERMS = ("wgrad", "tp_deferred", "ep_comm")
BLOCK_TERM_NAMES = tuple(f.name for f in fields(BlockTerms) if f.name not in SPLIT_ONLY_TERMS)


def block_terms(
    compute, comm, recompute_code: Num, overlap_tp_comm: Num, deferred: bool = True
) -> BlockTerms:
    """Per-micro-batch block time from its summed op times (``compute``: step.build.BlockCompute) and
    collective times and hidden prices (``comm``: step.build.BlockComm); fields may be floats or arrays.

    Recompute (Korthikanti et al. 2022 §5): full (code 2) re-runs the forward, selective (1) the
    core attention. The context-parallel ring exchange hides behind the attention of the chunk
    already received (Liu et al. 2023). Backward TP collectives run beside the GEMMs they do not
    depend on: the SP input re-gather beside dgrad, the gradient all-reduce / reduce-scatter beside
    wgrad (Megatron-LM's async tensor-parallel communication); each half of the backward GEMM time
    is one of the two (equal FLOPs, Narayanan et al. 2021 §5.1). With ``overlap_tp_comm``
    (Transformer Engine's comm-GEMM overlap; the caller allows it only inside one NVLink domain)
    forward and backward TP collectives are pipelined with their GEMMs in TP_OVERLAP_CHUNKS pieces:
    one chunk stays exposed and the slower stream sets the pace (cost.overlap.chunked_overlap_exposed_s),
    and the GEMMs pay the SM contention of the userbuffers kernels (``ub_forward`` / ``ub_backward`` of
    the block's compute: cost.overlap.userbuffers_contention_s); on a DTensor stack (PyTorch AsyncTP,
    ``comm.tp_async``) the block's priced exposure of torch's decomposed collective matmuls instead
    (cost.async_tp.with_async_tp_exposure: ``tp_async_forward``; backward_tp_exposure_s).
    The CP ring exposes, per step, what its transfer outlasts of one step's attention, plus a
    synchronisation per step (cost.overlap.ring_attention_exposed_s, cost.comm.ring_step_sync_s).
    Hidden communication still costs its price (cost.comm.priced_exposure_s): the SMs and HBM the
    communication kernels take from the compute they overlap."""
    c = compute
    full = recompute_code == 2
    forward, backward = host_region_times_s(c)
    rc = recompute_s(c, recompute_code, forward)
    steps = comm.cp_steps
    cp_f = cp_ring_exposure_s(
        comm.cp_forward, c.attention_forward, steps, comm.cp_sync_forward, comm.cp_forward_price
    )
    cp_b = cp_ring_exposure_s(
        comm.cp_backward, c.attention_backward, steps, comm.cp_sync_backward, comm.cp_backward_price
    )
    gathered_f, gathered_b = gathered_cp_exposure_s(comm, c)  # torch's ring (graph.cp_ring_torch)
    cp_f = where(comm.cp_gathered > 0, gathered_f, cp_f)
    cp_b = where(comm.cp_gathered > 0, gathered_b, cp_b)
    waited_f, waited_b = waited_cp_exposure_s(comm)  # a ring waited where issued (compiled torch)
    cp_f = where(comm.cp_waited > 0, waited_f, cp_f)
    cp_b = where(comm.cp_waited > 0, waited_b, cp_b)
    copy_f, copy_b = tp_layout_copies_s(comm, overlap_tp_comm, recompute_code)
    userbuffers_f = chunked_overlap_exposed_s(
        comm.tp_forward, c.gemm_forward, TP_OVERLAP_CHUNKS, 0.0
    ) + where(comm.tp_forward > 0, c.ub_forward, 0.0)
    overlapped_f = where(comm.tp_async > 0, comm.tp_async_forward, userbuffers_f)
    tp_f = where(overlap_tp_comm, overlapped_f, comm.tp_forward) + copy_f
    comm = comm._replace(tp_backward=comm.tp_backward + dtensor_regather_s(comm, recompute_code))
    tp_b = backward_tp_exposure_s(c, comm, overlap_tp_comm, deferred_wgrad=False) + copy_b
    # ``deferred`` False: a caller that reads no split-backward term (search.bounds.work_floors)
    tp_deferred = deferred_wgrad_exposure_s(c, comm, overlap_tp_comm, tp_b) if deferred else 0.0
    tp_rc = where(full, tp_f, 0.0)  # full recompute re-runs the forward collectives, in backward
    cp_rc = where(recompute_code > 0, cp_f, 0.0)  # both recompute modes re-run the core attention
    ep_f, ep_b = expert_exposure(c, comm)
    # W: the weight-gradient GEMMs, half of the backward GEMM time (equal FLOPs, Narayanan et al. 2021 §5.1)
    return BlockTerms(
        forward,
        backward,
        rc,
        tp_f,
        tp_b + tp_rc,
        cp_f,
        cp_b + cp_rc,
        ep_f,
        ep_b,
        c.gemm_backward / 2.0,
        tp_deferred,
        comm.ep_forward + comm.ep_backward,
    )


def gathered_cp_exposure_s(comm, c) -> tuple[Num, Num]:
    """(forward, backward) exposed seconds of torch's ring (graph.cp_ring_torch), hidden part priced: the
    forward's K/V all-gather (``comm.cp_forward``, the c − 1 chunks) behind the first step's attention; the
    backward's ``comm.cp_backward`` is u = TORCH_RING_BACKWARD_UNITS (3) such units (graph.cp_ring.cp_kv_ring):
    the K/V all-gather again (one unit) and the float32 dK/dV sends (u − 1 units over c − 1 chunk transfers, so
    one send of the c is (u − 1)/u·cp_backward/(c − 1)), cost.overlap.gathered_ring_exposed_s; plus the per-step
    synchronisation."""
    cp = comm.cp_steps + 1.0
    forward = gathered_ring_exposed_s(comm.cp_forward, 0.0, c.attention_forward, cp)
    gather, sends = torch_ring_backward_parts(comm)
    backward = gathered_ring_exposed_s(gather, sends, c.attention_backward, cp)
    return (
        priced_exposure_s(comm.cp_forward, forward + comm.cp_sync_forward, comm.cp_forward_price),
        priced_exposure_s(
            comm.cp_backward, backward + comm.cp_sync_backward, comm.cp_backward_price
        ),
    )


def torch_ring_backward_parts(comm) -> tuple[Num, Num]:
    """(gather, sends) seconds of torch's ring backward (graph.cp_ring_torch) from ``comm.cp_backward``, which
    graph.cp_ring.cp_kv_ring prices as u = TORCH_RING_BACKWARD_UNITS (3) K/V-chunk units over the c − 1 ring
    steps: the K/V all-gathered again, one unit, gather = cp_backward/u; the float32 dK/dV sums, two units a
    send, sent at every one of the c steps (``_templated_ring_attention_backward`` calls
    ``dkv_rotater.exchange_buffers`` at each i in range(size) and waits for the last with the
    ``dkv_rotater.next_buffer()`` after the loop: torch/distributed/tensor/experimental/_attention.py, read at
    0123248a, the same loop in the torch 2.6 line), so sends = (u − 1)/u·cp_backward·c/(c − 1)."""
    steps = maximum(comm.cp_steps, 1.0)
    units = float(TORCH_RING_BACKWARD_UNITS)
    gather = comm.cp_backward / units
    sends = (units - 1.0) / units * comm.cp_backward / steps * (comm.cp_steps + 1.0)
    return gather, sends


def waited_cp_exposure_s(comm) -> tuple[Num, Num]:
    """(forward, backward) exposed seconds of a K/V ring whose every transfer is waited where it is issued
    (``comm.cp_waited``: specs.runtime.RuntimeCosts.cp_ring_overlap False): nothing hides it, so each
    direction exposes its whole ring time plus the per-step synchronisation, with no hidden part to price:
    forward = ``cp_forward`` + ``cp_sync_forward``, backward = ``cp_backward`` + ``cp_sync_backward``.

    That is torch's ring traced into a torch.compile graph: the ring functions issue their all-gather and
    all-to-all through torch's functional collectives, whose ``_maybe_wrap_tensor`` calls ``wait_tensor`` at once
    while tracing (dynamo or AOTAutograd), where eager returns an AsyncCollectiveTensor waited at first use
    (torch/distributed/_functional_collectives.py, module docstring "wait_tensor() op is immediately called";
    read at 000f488b, the same ``if _are_we_tracing(): return wait_tensor(self)`` in the later versions), and
    Inductor moves no wait unless torch._inductor.config.reorder_for_compute_comm_overlap is set (default
    False), so the compute stream waits for each transfer before the next attention step. On torch's ring
    (``comm.cp_gathered``) the backward is its all-gather and all c dK/dV sends (torch_ring_backward_parts):
    backward = gather + sends + ``cp_sync_backward``."""
    gather, sends = torch_ring_backward_parts(comm)
    backward = where(comm.cp_gathered > 0, gather + sends, comm.cp_backward)
    return comm.cp_forward + comm.cp_sync_forward, backward + comm.cp_sync_backward


def tp_layout_copies_s(comm, overlap_tp_comm: Num, recompute_code: Num) -> tuple[Num, Num]:
    """(forward, backward) seconds of the layout copies a DTensor stack runs around its sequence-parallel
    collectives (step.block_sums.tp_layout_copy_s, cost.runtimes.tp_layout_copy_bytes; 0 on other stacks), on
    the compute stream in series with them, so exposed whole. Vanilla TP: every forward copy, the backward
    ones and, where per-op SAC re-runs the input all-gathers (recompute code 1, ``dtensor_regather_s``), theirs.
    AsyncTP (``overlap_tp_comm``) fuses the all-gathers with their GEMMs and the forward reduce-scatters with
    theirs, writing the shards in place: only the input-gradient reduce-scatters it leaves unfused
    (``tp_copy_unfused``, as ``backward_tp_exposure_s``) keep their copies. Full recomputation re-runs the
    forward copies with the forward collectives (block_terms' ``tp_rc``)."""
    vanilla = where(overlap_tp_comm, 0.0, 1.0)
    regather = where(recompute_code == 1, comm.tp_copy_regather, 0.0)
    forward = vanilla * comm.tp_copy_forward
    backward = vanilla * (comm.tp_copy_backward + regather) + comm.tp_copy_unfused
    return forward, backward


def dtensor_regather_s(comm, recompute_code: Num) -> Num:
    """Backward seconds of SP input re-gathers a DTensor TP stack runs (``comm.tp_dtensor_regather``, kept out
    of ``comm.tp_backward`` by step.block_sums.block_comm; 0 on other stacks). Megatron-LM's sequence-parallel linear saves its input sharded and re-gathers it for
    wgrad in every mode (Korthikanti et al. 2022 §4.2.2). A DTensor ColwiseParallel GEMM is an aten.mm on the
    gathered (Replicate) input, which autograd saves whole: no re-gather without recomputation, and none under
    full recomputation, whose replayed forward gathers it again (its collectives: ``tp_rc``) and saves it.
    It re-runs only under selective recomputation that does not save the all-gather's output (torchtitan's
    per-op SAC: _save_list holds aten.mm, the SDPA kernels, reduce_scatter_tensor and aten.max, not
    all_gather_into_tensor; torchtitan/models/llama3/infra/parallelize.py at 820504e), so it is added at
    recompute code 1 only."""
    return where(recompute_code == 1, comm.tp_dtensor_regather, 0.0)


def cp_ring_exposure_s(ring: Num, attention: Num, steps: Num, sync: Num, price: Num) -> Num:
    """One direction's exposed context-parallel ring time, hidden part priced: over ``steps`` ring
    steps, exposed = ring_attention_exposed_s(ring / max(steps, 1), attention / (steps + 1),
    steps + 1) + ``sync`` (the per-step synchronisation, cost.comm.ring_step_sync_s), then
    cost.comm.priced_exposure_s(ring, exposed, ``price``) (Liu et al. 2023, ring attention: each
    step's transfer hides behind the attention of the chunk already received)."""
    exposed = ring_attention_exposed_s(
        ring * (1.0 / maximum(steps, 1.0)), attention / (steps + 1.0), steps + 1.0, 0.0
    )
    return priced_exposure_s(ring, exposed + sync, price)


def backward_tp_exposure_s(c, comm, overlap_tp_comm: Num, deferred_wgrad: bool) -> Num:
    """Exposed backward TP communication of one block per micro-batch. The GEMM windows: the data-gradient GEMMs (dgrad) and the
    weight-gradient GEMMs (wgrad), each half of ``gemm_backward`` (equal FLOPs, Narayanan et al.
    2021 §5.1).

    Without comm-GEMM overlap (Megatron-LM's async tensor-parallel backward,
    megatron/core/tensor_parallel/layers.py ``LinearWithGradAccumulationAndAsyncCommunication``):
    the SP input re-gather runs beside dgrad and the input-gradient all-reduce / reduce-scatter
    beside wgrad; each exposes max(0, comm − GEMM/2). With ``overlap_tp_comm`` (Transformer
    Engine userbuffers) the whole backward communication is pipelined with the backward GEMMs in
    TP_OVERLAP_CHUNKS pieces (cost.overlap.chunked_overlap_exposed_s) and the GEMMs pay the SM
    contention of the userbuffers kernels (``ub_backward``: cost.overlap.userbuffers_contention_s)
    in place of the generic price of hidden time, which stays on the async path. On a DTensor stack
    (PyTorch AsyncTP) the input-gradient reduce-scatters (``comm.tp_unfused_backward``) stay out of
    the pipeline, exposed whole: Inductor's micro-pipeline pass fuses a reduce-scatter only when its
    input is one aten.mm (torch/_inductor/fx_passes/micro_pipeline_tp.py fuse_matmul_reduce_scatter,
    "Not matmul" return; read at 00122fb1), and a column-parallel block's input gradient is the sum
    of its GEMMs' dgrads (wq, wk, wv; w1, w3 in torchtitan's Llama). Where the block is priced that way
    (``comm.tp_async``), the fused collectives' time ``tp_async_backward_comm`` is replaced by their exposure
    under torch's decomposition, ``tp_async_backward`` (cost.async_tp), the rest exposed whole.

    ``deferred_wgrad``: a split-backward schedule (ZB-H1, Qi et al. 2023 §2; DualPipe) runs the
    weight-gradient GEMMs later, as separate W passes, while the input gradient must reach the
    previous layer now: what hid behind wgrad is exposed (async path), and the overlapped path
    has the dgrad GEMMs, GEMM/2, as its window."""
    total = comm.tp_backward + comm.tp_hidden_by_dgrad + comm.tp_hidden_by_wgrad
    half = c.gemm_backward / 2.0
    by_dgrad = maximum(0.0, comm.tp_hidden_by_dgrad - half)
    if deferred_wgrad:
        async_s = comm.tp_backward + by_dgrad + comm.tp_hidden_by_wgrad
        window = half
    else:
        async_s = comm.tp_backward + by_dgrad + maximum(0.0, comm.tp_hidden_by_wgrad - half)
        window = c.gemm_backward
    unfused = comm.tp_unfused_backward
    userbuffers = (
        chunked_overlap_exposed_s(total - unfused, window, TP_OVERLAP_CHUNKS, 0.0)
        + unfused
        + where(total > 0, c.ub_backward, 0.0)
    )
    decomposed = total - comm.tp_async_backward_comm + comm.tp_async_backward
    return where(
        overlap_tp_comm,
        where(comm.tp_async > 0, decomposed, userbuffers),
        priced_exposure_s(total, async_s, comm.tp_backward_price),
    )


def deferred_wgrad_exposure_s(c, comm, overlap_tp_comm: Num, tp_backward_s: Num) -> Num:
    """Backward TP seconds a split-backward schedule exposes beyond ``tp_backward_s`` (the
    exposure with wgrad in place): ``backward_tp_exposure_s`` with the wgrad GEMMs deferred, less
    ``tp_backward_s``; >= 0 (a smaller window never hides more, and a price is at most its
    collective's time)."""
    return maximum(
        0.0, backward_tp_exposure_s(c, comm, overlap_tp_comm, deferred_wgrad=True) - tp_backward_s
    )


def recompute_s(compute, recompute_code: Num, forward: Num | None = None) -> Num:
    """Seconds recomputation re-runs per micro-batch (Korthikanti et al. 2022 §5): full (code 2) the
    block's forward (``forward``: its host-bounded time, host_region_times_s; default its device time) less
    the trailing ops an early-stopping checkpoint does not re-run (``early_stop_forward``,
    step.block_sums.early_stop_tail_s; their device time) and the checkpoint function's CUDA RNG state
    copies (``rng_checkpoint``, cost.rng_state), selective (1) its core attention (``attention_forward``),
    none (0) nothing."""
    rerun = (compute.forward if forward is None else forward) - compute.early_stop_forward
    return where(
        recompute_code == 2,
        maximum(0.0, rerun) + compute.rng_checkpoint,
        where(recompute_code == 1, compute.attention_forward, 0.0),
    )


def host_region_times_s(compute) -> tuple[Num, Num]:
    """(forward, backward) GPU seconds of the block per micro-batch with the host's issue time: each direction a
    region the host issues asynchronously, cost.host.host_bound_s(device, host issue, the forward's sync idle and
    wait, the backward's idle under synchronous launches); the device times alone when the profile prices no host."""
    c = compute
    forward = host_bound_s(c.forward, c.host_forward, c.sync_idle, c.sync_wait)
    return forward, host_bound_s(c.backward, c.host_backward, c.backward_idle)


def expert_exposure(c, comm) -> tuple[Num, Num]:
    """Exposed (forward, backward) expert-parallel dispatch/combine of one block. The all-to-alls
    sit between the router and the expert GEMMs and between the GEMMs and the un-permute: nothing
    of the same micro-batch can run beside them, so they are exposed. With ``ep_overlap``
    (moe_a2a_overlap: DeepEP / DualPipe / Megatron-LM's 1F1B A2A overlap run one micro-batch's
    dispatch and combine beside another micro-batch's compute; DeepSeek-V3 report §3.2.1) they
    hide behind the block's compute of the other direction and cost their price
    (cost.comm.priced_exposure_s). The windows are the block's host-bounded region times
    (host_region_times_s): the GPU idle after a dropless dispatch's synchronisation is time the other
    micro-batch's collective runs in too."""
    forward, backward = host_region_times_s(c)
    ep_f = where(
        comm.ep_overlap,
        priced_exposure_s(
            comm.ep_forward, maximum(0.0, comm.ep_forward - backward), comm.ep_forward_price
        ),
        comm.ep_forward,
    )
    ep_b = where(
        comm.ep_overlap,
        priced_exposure_s(
            comm.ep_backward, maximum(0.0, comm.ep_backward - forward), comm.ep_backward_price
        ),
        comm.ep_backward,
    )
    return ep_f, ep_b


def unpaired_ep_exposure_s(terms: BlockTerms) -> Num:
    """Seconds one block's expert-parallel dispatch / combine adds, once a step, where the A2A overlap runs
    without pipelining: Megatron-Core's ``combined_1f1b_schedule_for_no_pipelining`` (moe_a2a_overlap, pp 1)
    runs the first micro-batch's forward and the last one's backward alone ("executed alone, no a2a
    overlapping", megatron/core/pipeline_parallel/combined_1f1b.py, the same at b0cc2706, d7288711b,
    d0b3b7754, 458c8d0ec and cd4afffa6) and the other m − 1 forwards each beside the previous micro-batch's
    backward. Those two passes pay their all-to-alls whole where ``expert_exposure`` priced every pass as
    overlapped: (F_raw + B_raw) − (F_exposed + B_exposed) = ``ep_comm − ep_forward − ep_backward``; exactly 0
    without the overlap, where the exposure is the raw time (the same sum, so the comparison is equal)."""
    return unpaired_pass_s(terms.ep_comm, terms.ep_forward + terms.ep_backward)


def unpaired_pass_s(raw: Num, exposed: Num) -> Num:
    """What a pass run alone adds over its overlapped price: ``raw − exposed`` where the raw (nothing hidden)
    seconds exceed the exposed ones, else 0 (``unpaired_ep_exposure_s``' rule; the search's floors read it with
    floors of a block's work, its dispatch and combine raw and exposed: search.bounds.step_floors)."""
    return where(raw > exposed, raw - exposed, 0.0)


def unpaired_passes_s(pp: Num, unpaired: Num) -> Num:
    """What the A2A overlap's unpaired passes add to a step whose slowest stage's blocks add ``unpaired``
    (``unpaired_ep_exposure_s`` summed, or a floor of it): all of it without pipelining (pp 1, Megatron-Core's
    ``combined_1f1b_schedule_for_no_pipelining``, ``unpaired_ep_exposure_s``), nothing with pp > 1 (the interleaved
    form's warm-up and cool-down passes: not priced, docs/model.md §8)."""
    return where(pp == 1, unpaired, 0.0)


@dataclass(frozen=True)
class BlockCost:
    """One block on one GPU: its time terms per micro-batch and what it holds in memory."""

    kind: str  # "embedding" | "decoder" | "dense_layer" | "moe_layer" | "experts" | "mtp" | "head" (step.blocks.BLOCK_KINDS)
    terms: BlockTerms
    params: Num  # weight parameters held per GPU
    activation_bytes: Num  # kept for backward, per in-flight micro-batch
    held_bytes: Num  # kept once at the stage's peak (the LM head's fp32 logits)
    buffer_bytes: Num  # transient working buffer while the block runs
    gradient_group: str = "dense"  # specs.parallel.GRADIENT_GROUPS
    nic_forward_s: Num = (
        0.0  # NIC-busy seconds of its TP/CP collectives per micro-batch, forward window
    )
    nic_backward_s: Num = 0.0  # the same in the backward window (recompute re-runs included)
    largest_weight_params: Num = (
        0.0  # its largest weight tensor per GPU (graph.ops.largest_weight_params)
    )
    weight_tensors: Num = (
        1.0  # its weight tensors: ZeRO-3 all-gather calls when gathered per tensor
    )
    regathered: Num = (
        0.0  # 1: its forward is re-run in full in backward (full recompute of a recomputed kind)
    )
    small_numels: tuple = ()  # sizes of its weight tensors DeepSpeed keeps gathered (graph.ops.weight_tensor_stats)
