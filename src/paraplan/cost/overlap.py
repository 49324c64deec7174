"""How much of a communication hides behind compute, mechanism by mechanism (issue 8, §1-3, 5).

Each function returns the *exposed* seconds of one mechanism from the alone-times of its parts
(compute and communication costed by cost.compute / cost.comm), so the step composition can use
them on floats or numpy arrays. Sources and the constants each needs are in the docstrings.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost.elementwise import maximum


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
    d = np.asarray(prefetch_layers, dtype=float)
    with_prefetch = gather_s + (layers - 1) * np.maximum(0.0, gather_s - d * compute_s)
    return np.where(d > 0, with_prefetch, layers * gather_s)


def ring_attention_exposed_s(step_comm_s, step_attention_s, cp, sync_s):
    """Exposed time of context parallelism's K/V ring (Liu et al. 2023, Ring Attention, §3;
    Megatron-Core cp_comm_type "p2p"): c steps, the transfer for step i+1 overlaps step i's
    attention, and each step ends with a stream synchronisation ``sync_s`` (the send/recv of the next block must have landed):
    exposed = (c−1)·max(0, comm − attention) + (c−1)·sync. With causal load balancing (each rank
    holds chunks i and 2c−1−i) every step does the same work, so one step's attention is the
    whole attention / c."""
    steps = maximum(cp - 1, 0)
    return steps * maximum(0.0, step_comm_s - step_attention_s) + steps * sync_s


def ulysses_all_to_all_bytes(local_tensor_bytes, cp):
    """Bytes each GPU sends in one all-to-all of DeepSpeed-Ulysses (Jacobs et al. 2023,
    arXiv:2309.14509, §3.1): a rank keeps 1/c of its local tensor and sends the rest, (c−1)/c·S.
    Forward runs four (Q, K, V before attention, the output after), backward four more; none
    overlaps the attention it feeds."""
    return (cp - 1) / np.maximum(cp, 1) * local_tensor_bytes
