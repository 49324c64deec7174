"""Split-backward pipeline schedules: zero-bubble ZB-H1 and DualPipe (issue 9).

Notation of the sources: F forward of one micro-batch on one stage, B its whole backward, split
into the input-gradient part B_in and the weight-gradient part W (B = B_in + W; the two backward
GEMMs of a linear layer have equal FLOPs, Narayanan et al. 2021 §5.1, so W ≈ the GEMM half of B).

| schedule | bubble | weights held | activations in flight (micro-batches) | source |
|---|---|---|---|---|
| 1F1B | (p−1)·(F+B) | 1× | p | Narayanan et al. 2021 §2.2.1 |
| ZB-H1 | (p−1)·(F+B_in−W) = (p−1)·(F+B−2W) | 1× | p | Qi et al. 2023, arXiv:2401.10241, §3.1, Fig. 3 |
| DualPipe | (p/2−1)·(F&B+B−3W) | 2× | p+1 | DeepSeek-V3 report, arXiv:2412.19437, §3.2.1, Table 2 |

F&B is the time of a forward and a backward chunk of two micro-batches run overlapped; without
communication to hide it is F + B. Unequal stages: the (p−1)·(...) factor becomes the work of
the other stages (pipeline.bubble_from_work_s) scaled by the schedule's share of F + B.
Everything works on floats and numpy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Num = Any  # float or numpy array, broadcastable (as schedule.step)


def zb_h1_bubble_share(forward_s, backward_s, wgrad_s):
    """(F + B − 2W) / (F + B): ZB-H1's bubble relative to 1F1B's (Qi et al. 2023 §3.1); 1/3 when
    B = 2F and W = F."""
    return np.maximum(forward_s + backward_s - 2.0 * wgrad_s, 0.0) / np.maximum(
        forward_s + backward_s, 1e-30
    )


def zb_h1_bubble_s(other_stages_work_s, forward_s, backward_s, wgrad_s):
    """ZB-H1 bubble: the 1F1B bubble (Σ_i W_i − max_i W_i, pipeline.bubble_from_work_s with v = 1)
    times zb_h1_bubble_share."""
    return other_stages_work_s * zb_h1_bubble_share(forward_s, backward_s, wgrad_s)


def dualpipe_bubble_s(pp, forward_s, backward_s, wgrad_s, overlapped_pair_s=None):
    """DualPipe bubble (p/2 − 1)·(F&B + B − 3W) (DeepSeek-V3 Table 2) for the slowest stage's F, B,
    W; F&B defaults to F + B (nothing overlapped)."""
    pair = forward_s + backward_s if overlapped_pair_s is None else overlapped_pair_s
    return np.maximum(pp / 2.0 - 1.0, 0.0) * np.maximum(pair + backward_s - 3.0 * wgrad_s, 0.0)


def in_flight_microbatches(schedule: str, pp, stage, microbatches):
    """Micro-batches whose activations a stage holds at its peak: 1F1B and ZB-H1 min(p − i, m)
    (Narayanan et al. 2021 §2.2.1; Qi et al. 2023 §3.1 keeps 1F1B's peak); DualPipe p + 1 on every
    stage (DeepSeek-V3 Table 2), at most m."""
    if schedule == "dualpipe":
        return np.minimum(pp + 1, microbatches)
    return np.minimum(pp - stage, microbatches)


def weight_copies(schedule: str) -> int:
    """Copies of a stage's parameters a GPU holds: 2 for DualPipe (each GPU runs the stage pair
    (i, p−1−i) from both ends; DeepSeek-V3 Table 2), else 1."""
    return 2 if schedule == "dualpipe" else 1


def split_backward_bubble(
    zb: Num, dualpipe: Num, pp: Num, bubble: Num, work: dict[str, Num], wgrad: Num
) -> Num:
    """The bubble of the split-backward schedules from the slowest stage's per-micro-batch F (forward
    and its exposed communication), B (backward, recompute, exposed communication) and W (weight
    gradients): ZB-H1 scales the 1F1B bubble by (F+B−2W)/(F+B) (Qi et al. 2023 §3.1); DualPipe is
    (p/2−1)·(F&B + B − 3W) over chunks of half a stage, F&B = F + B (DeepSeek-V3 Table 2); other
    schedules keep ``bubble``."""
    forward = work["forward"] + work["tp_forward"] + work["cp_forward"] + work["ep_forward"]
    backward = (
        work["backward"]
        + work["recompute"]
        + work["tp_backward"]
        + work["cp_backward"]
        + work["ep_backward"]
    )
    zero_bubble = bubble * zb_h1_bubble_share(forward, backward, wgrad)
    dual = dualpipe_bubble_s(pp, forward / 2.0, backward / 2.0, wgrad / 2.0)
    return np.where(dualpipe, dual, np.where(zb, zero_bubble, bubble))
