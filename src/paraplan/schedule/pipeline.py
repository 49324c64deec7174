"""Pipeline schedules: how many micro-batch slots a step takes, and the bubble.

With m micro-batches, p stages, v model chunks per GPU and per-micro-batch stage work W (forward +
backward, whole stage), a step takes (m + (p-1)/v)·W: the bubble is (p-1)·W for GPipe and 1F1B
and (p-1)·W/v for the interleaved schedule (Narayanan et al. 2021, §2.2.1-2.2.2, bubble fractions
(p-1)/m and (p-1)/(v·m)). With unequal stages the slowest stage sets W (the others wait on it).
"""

from __future__ import annotations


def bubble_slots(schedule: str, pp: int, vpp: int) -> float:
    """Idle micro-batch slots per step: (p-1) for gpipe / 1f1b, (p-1)/v for interleaved."""
    if pp <= 1:
        return 0.0
    if schedule == "interleaved":
        return (pp - 1) / vpp
    return float(pp - 1)


def pipeline_bubble_s(schedule: str, pp: int, vpp: int, stage_work_s: list[float]) -> float:
    """Idle time per step: (Σ_i W_i − max_i W_i)·slots/(p−1), i.e. (p−1)·W (÷v interleaved) for equal
    stages; with unequal stages the fill and drain pass once through every other stage while the
    slowest one sets the steady state ((m−1)·W_max + Σ_i W_i for 1F1B)."""
    if pp <= 1:
        return 0.0
    return bubble_slots(schedule, pp, vpp) / (pp - 1) * (sum(stage_work_s) - max(stage_work_s))


def p2p_transfers_per_microbatch(pp: int, vpp: int) -> int:
    """Activation sends on a stage's critical path per micro-batch: one forward, one backward per chunk."""
    return 0 if pp <= 1 else 2 * vpp
