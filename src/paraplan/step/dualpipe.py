"""DualPipe's overlapped forward-backward pair: what one pair of chunks costs and how many a step runs.

DualPipe (DeepSeek-V3 technical report, arXiv:2412.19437, §3.2.1, Figure 4) runs the forward chunk of
one micro-batch and the backward chunk of another as one pair: each chunk is attention, all-to-all
dispatch, MLP and all-to-all combine (the backward's split into input and weight gradients), and the
pair is rearranged so that "both all-to-all and PP communication can be fully hidden during
execution", with a share of the SMs given to the communication kernels (20 of the H800's 132, §3.2.2
and §3.5.1). The reference implementation (deepseek-ai/DualPipe, dualpipe/dualpipe.py at 3da1bbe,
read, not copied) runs a pair as one unit: ``_forward_backward_chunk`` posts both receives and waits
for them, runs ``_forward_backward_compute_chunk`` (the module's ``overlapped_forward_backward``) and
posts both sends after it; ``DualPipe.step`` runs them in its steps 4 (two per iteration, the middle
ranks' first one unpaired) and 5 (one per iteration). Our own restatement; every function works on
floats and on numpy arrays.
"""

from __future__ import annotations

from typing import Any

from paraplan.cost.elementwise import maximum, where

Num = Any  # float or numpy array, broadcastable


def pair_compute_share(sm_count, comm_sms):
    """(S − k)/S: the share of a GPU's S SMs left to compute while DualPipe's pair gives k to the
    all-to-all kernels (DeepSeek-V3 report §3.2.2: 20 of the H800's 132 SMs, 10 communication channels;
    DeepGEMM takes the SM count its kernels may use, ``set_num_sms``), at least 1/S. The GEMMs of the pair
    run on S − k SMs for its whole duration, as cost.overlap.userbuffers_contention_s prices a row-parallel
    GEMM beside the userbuffers reduce-scatter (f·S/(S − k))."""
    return max(sm_count - comm_sms, 1) / sm_count


def pair_compute_s(compute: Num, dispatches: Num, compute_share: Num) -> Num:
    """C/s: seconds of a pair's compute C on the share s of the SMs left to it (``pair_compute_share``) where
    the pair has expert-parallel communication (``dispatches``), whose kernels the SMs are given to; C
    elsewhere. The first term of ``overlapped_pair_s``, and the one reading of it in the search's floor of
    what a pair cannot hide, C/s + X (F&B = max(C/s, E + P) + X >= C/s + X: search.table,
    search.bounds.work_floors, search.bounds.expert_floors)."""
    return compute / where(dispatches, compute_share, 1.0)


def overlapped_pair_s(parts: dict[str, Num], ep_comm_s: Num, compute_share: Num) -> Num:
    """F&B: seconds of one forward chunk and one backward chunk of two micro-batches run as one pair
    (DeepSeek-V3 report §3.2.1, Figure 4; Table 2's F&B), from a stage's per-micro-batch parts
    (step.inputs.stage_work):

        F&B = C/s + max(0, E + P − C/s) + X,

    C the compute of both chunks (forward, backward, recomputation), s the share of the SMs left to it
    (``pair_compute_share``; 1 where the pair has no expert-parallel communication, whose kernels the SMs
    are given to), E the expert-parallel dispatch and combine of both chunks with none hidden
    (BlockTerms.ep_comm), P the stage's pipeline sends (its ``pp`` part), hidden up to the compute they
    overlap, and X the exposed TP and CP communication, which stays inside each chunk."""
    compute = parts["forward"] + parts["backward"] + parts["recompute"]
    slowed = pair_compute_s(compute, ep_comm_s > 0.0, compute_share)
    other = parts["tp_forward"] + parts["tp_backward"] + parts["cp_forward"] + parts["cp_backward"]
    return slowed + maximum(0.0, ep_comm_s + parts["pp"] - slowed) + other


def overlapped_pairs(pp, microbatches):
    """Overlapped pairs a middle rank (half-rank h = p/2 − 1) runs in DualPipe.step: 2·(m/2 − p + h + 1)
    in step 4 less its first, which the middle ranks run unpaired, plus p/2 − h − 1 in step 5:
    m − p − 1 (deepseek-ai/DualPipe dualpipe.py at 3da1bbe). With the middle ranks' count the step is
    m·(F + B) − (m − p − 1)·(F + B − F&B) + (p/2 − 1)·(F&B + B − 3W): its placed order, pairs locked,
    ends there when F = B − W = W (tests/unit/test_dualpipe.py)."""
    return maximum(microbatches - pp - 1, 0)


def pair_saving_s(pp, microbatches, work_s: Num, pair_s: Num) -> Num:
    """Seconds the overlapped pairs take off m·S: (m − p − 1)·(S − F&B), S the stage's per-micro-batch
    work (one forward and one backward chunk run apart) and F&B its pair (``overlapped_pair_s``);
    negative where the SMs given to the communication cost the compute more than the pair hides."""
    return overlapped_pairs(pp, microbatches) * (work_s - pair_s)
