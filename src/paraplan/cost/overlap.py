"""How much of a communication hides behind compute, mechanism by mechanism (issue 8, §1-3, 5).

Each function returns the *exposed* seconds of one mechanism from the alone-times of its parts
(compute and communication costed by cost.compute / cost.comm), so the step composition can use
them on floats or numpy arrays. Sources and the constants each needs are in the docstrings.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost.elementwise import maximum, where


def fair_share_times_s(alone_s):
    """Completion times of flows that start together on one link and share it fairly (processor
    sharing, max-min fairness on a single bottleneck; Bertsekas & Gallager, Data Networks §6.5):
    with alone-times t1 ≤ … ≤ tn, c1 = n·t1 and c_i = c_{i−1} + (n − i + 1)·(t_i − t_{i−1}).
    Returned in the input order. The last flow ends at Σ t_i: the link moves every byte once."""
    times = np.asarray(alone_s, dtype=float)
    order = np.argsort(times, kind="stable")
    sorted_t = times[order]
    n = len(sorted_t)
    done = np.empty(n)
    clock, previous = 0.0, 0.0
    for i, t in enumerate(sorted_t):
        clock += (n - i) * (t - previous)
        done[i] = clock
        previous = t
    out = np.empty(n)
    out[order] = done
    return out


def shared_link_time_s(own_s, other_s):
    """Time of a collective whose bytes cross a link tier (NVLink or NIC) while another collective
    of a different group crosses the same tier (TP or CP across nodes beside DP/ZeRO traffic, PP
    sends beside DP): fair sharing of two flows, own + min(own, other) (fair_share_times_s, n = 2)."""
    return own_s + np.minimum(own_s, other_s)


def chunked_overlap_exposed_s(comm_s, compute_s, chunks, compute_slowdown):
    """Exposed time of a collective pipelined with its dependent GEMM in ``chunks`` pieces
    (TP comm-GEMM overlap: Transformer Engine userbuffers, PyTorch AsyncTP; Wang et al. 2023,
    "Overlap Communication with Dependent Computation via Decomposition", ASPLOS '23, §3):
    one chunk of communication cannot overlap (the first all-gather chunk before any GEMM, the last
    reduce-scatter chunk after the last GEMM), the other n−1 overlap n−1 GEMM chunks and the slower
    stream sets the pace; the communication kernels take SMs and HBM bandwidth from the GEMM
    (``compute_slowdown``, a fraction of the GEMM time):
    exposed = comm/n + max(0, (n−1)/n·(comm − compute)) + slowdown·compute."""
    n = maximum(chunks, 1)
    return (
        comm_s / n + maximum(0.0, (n - 1) / n * (comm_s - compute_s)) + compute_slowdown * compute_s
    )


def bucketed_reduce_exposed_s(reduce_s, backward_s, buckets):
    """Exposed time of data-parallel gradient reduction issued bucket by bucket while backward
    runs (Li et al. 2020, "PyTorch Distributed", VLDB, §3.2.3: gradient buckets, 25 MB default;
    Megatron-Core DDP buckets of max(40M, 1M·dp) parameters): the last bucket is ready only when
    backward ends, the others overlap the remaining backward:
    exposed = reduce/b + max(0, (b−1)/b·(reduce − backward))."""
    b = maximum(buckets, 1)
    return reduce_s / b + maximum(0.0, (b - 1) / b * (reduce_s - backward_s))


def prefetched_gather_exposed_s(gather_s, compute_s, layers, prefetch_layers):
    """Exposed time of per-layer parameter all-gathers (ZeRO-3 / FSDP) over ``layers`` layers with
    ``compute_s`` per layer: without prefetch every gather waits (L·g); with prefetch depth d ≥ 1
    (FSDP2: one layer ahead, Liang et al. 2024 TorchTitan §2.1; DeepSpeed stage3 prefetch bucket)
    the first gather is exposed and each later one overlaps d layers of compute:
    exposed = g + (L−1)·max(0, g − d·c). Small gathers are latency-bound: ``gather_s`` already
    contains the collective's latency (cost.comm)."""
    d = prefetch_layers
    with_prefetch = gather_s + (layers - 1) * maximum(0.0, gather_s - d * compute_s)
    return where(d > 0, with_prefetch, layers * gather_s)


def ring_attention_exposed_s(step_comm_s, step_attention_s, cp, sync_s):
    """Exposed time of context parallelism's K/V ring (Liu et al. 2023, Ring Attention, §3;
    Megatron-Core cp_comm_type "p2p"): c steps, the transfer for step i+1 overlaps step i's
    attention, and each step ends with a stream synchronisation ``sync_s`` (the send/recv of the next block must have landed):
    exposed = (c−1)·max(0, comm − attention) + (c−1)·sync. With causal load balancing (each rank
    holds chunks i and 2c−1−i) every step does the same work, so one step's attention is the
    whole attention / c."""
    steps = maximum(cp - 1, 0)
    return steps * maximum(0.0, step_comm_s - step_attention_s) + steps * sync_s


def gathered_ring_exposed_s(gather_s, sends_s, attention_s, cp):
    """Exposed time of a ring attention whose K/V arrive by one all-gather issued before the first step and
    waited after it (torch's context_parallel with the "allgather" rotate method, _AllGatherRotater:
    torch/distributed/tensor/experimental/_attention.py, module graph.cp_ring_torch), plus ``sends_s`` of
    per-step sends each issued after step i and waited after step i + 1 (the backward's dK/dV all-to-all,
    ``dkv_rotater``, c sends, the last waited after the loop). With load balancing every step has the same
    work, attention/c:
    exposed = max(0, gather − attention/c) + (c − 1)·max(0, send − attention/c) + send,
    send = sends/c (0 without sends): the middle term is ring_attention_exposed_s(send, attention/c, c, 0)."""
    step = attention_s / maximum(cp, 1.0)
    send = sends_s / maximum(cp, 1.0)
    return maximum(0.0, gather_s - step) + ring_attention_exposed_s(send, step, cp, 0.0) + send


# ---- TP comm-GEMM overlap: chunks and SM contention, from Transformer Engine's userbuffers configs ----
# The configurations NeMo runs its performance recipes with (NeMo 24.09 launcher
# conf/training/tp_overlap/ub_cfg_h100_h8192_tp4_mbs1_seqlen8192.yaml; the same values in NeMo 2.0
# nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py, userbuffers_{bf16,fp8}_h100_h8192_tp4_mbs1_seqlen8192,
# which Megatron-Bridge's performance recipes reuse):
# - all-gathers before the column-parallel GEMMs (qkv_fprop, fc1_fprop) and before the row-parallel dgrad
#   (proj_dgrad, fc2_dgrad): method ring_exchange, num_sm 1 (point-to-point pushes between GEMM chunks);
# - reduce-scatters after the row-parallel GEMMs: bf16, method pipeline, num_splits 4, set_sm_margin
#   (the GEMM is launched on sm_count − num_sm SMs), proj_fprop num_sm 24, fc2_fprop num_sm 16; fp8,
#   method ring_exchange, num_sm 1, set_sm_margin;
# - backward bulk overlaps beside the column-parallel dgrad (qkv_dgrad num_sm 4, fc1_dgrad 2: the input
#   all-gather for wgrad) and wgrad (qkv_wgrad 24, fc1_wgrad 4: the dgrad reduce-scatter), no margin
#   (the communication kernel's CTAs share the SMs with the GEMM while it runs).
# PyTorch AsyncTP (Async Tensor Parallelism in PyTorch, dev-discuss.pytorch.org, 2024) moves its chunks with
# copy engines over symmetric memory, which take no SMs; it is priced apart, on DTensor stacks (cost.async_tp).
UB_SPLITS = 4.0  # num_splits of the pipelined reduce-scatters
UB_RING_EXCHANGE_SMS = 1.0
# forward SMs of the reduce-scatter after each row-parallel GEMM, by datatype (bf16: pipeline, fp8: ring exchange)
UB_ROW_FORWARD_SMS = {
    "attention_projection": {"bf16": 24.0, "fp8": 1.0},
    "cross_attention_projection": {"bf16": 24.0, "fp8": 1.0},
    "mlp_out_projection": {"bf16": 16.0, "fp8": 1.0},
}
# backward SMs of the bulk overlaps beside each column-parallel GEMM's (dgrad, wgrad)
UB_COLUMN_BACKWARD_SMS = {
    "qkv_projection": (4.0, 24.0),
    "cross_q_projection": (4.0, 24.0),
    "cross_kv_projection": (4.0, 24.0),
    "mlp_in_projection": (2.0, 4.0),
}


def sm_margin_slowdown(comm_sms, sm_count):
    """Extra time of a GEMM launched with an SM margin of k SMs left to a communication kernel
    (userbuffers set_sm_margin): compute-bound work on S − k of S SMs takes S/(S − k) as long, so the
    extra share of its alone-time is k/(S − k)."""
    return comm_sms / (sm_count - comm_sms)


def shared_sm_slowdown(comm_sms, sm_count):
    """Extra time of a GEMM whose SMs a communication kernel of k CTAs shares while both run
    (no margin): the GEMM loses k of S SMs for at most its whole duration, k/S of its alone-time."""
    return comm_sms / sm_count


def userbuffers_contention_s(
    name: str,
    forward_s: float,
    backward_s: float,
    sm_count: int,
    dtype: str,
    fp8_pipeline: bool = False,
) -> tuple[float, float]:
    """(forward, backward) seconds one GEMM op loses to the SMs of the userbuffers kernels hidden
    beside it when TP comm-GEMM overlap is on (configurations above; no step time enters). Backward
    time is dgrad + wgrad in equal halves (Narayanan et al. 2021 §5.1).
    - column-parallel GEMMs (UB_COLUMN_BACKWARD_SMS): forward beside a ring-exchange all-gather,
      f·k_ring/S; backward ½b·k_dgrad/S + ½b·k_wgrad/S (bulk overlaps);
    - row-parallel GEMMs (UB_ROW_FORWARD_SMS): forward on S − k SMs, f·k/(S − k), k by datatype
      (the bf16 value for 16-bit types, the fp8 value for fp8 and fp4, unless ``fp8_pipeline``: the stack's
      configuration keeps the pipelined reduce-scatter in fp8 too, as NeMo 24.09's launcher configuration
      does, specs.runtime.RuntimeCosts.ub_fp8_pipeline); backward, the dgrad beside a
      ring-exchange all-gather, ½b·k_ring/S;
    - other ops (core attention, the LM head, expert GEMMs): 0.
    HBM: the NVLink traffic of the hidden collective (≤ 450 GB/s per direction on H100, ≤ 900 GB/s on
    B200) is under a seventh of HBM bandwidth and the GEMMs are compute-bound; it is not charged."""
    if name in UB_COLUMN_BACKWARD_SMS:
        k_dgrad, k_wgrad = UB_COLUMN_BACKWARD_SMS[name]
        return (
            forward_s * shared_sm_slowdown(UB_RING_EXCHANGE_SMS, sm_count),
            0.5 * backward_s * shared_sm_slowdown(k_dgrad + k_wgrad, sm_count),
        )
    if name in UB_ROW_FORWARD_SMS:
        low = dtype in ("fp8", "fp4") and not fp8_pipeline
        k = UB_ROW_FORWARD_SMS[name]["fp8" if low else "bf16"]
        return (
            forward_s * sm_margin_slowdown(k, sm_count),
            0.5 * backward_s * shared_sm_slowdown(UB_RING_EXCHANGE_SMS, sm_count),
        )
    return 0.0, 0.0
