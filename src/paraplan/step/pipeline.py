"""Pipeline schedules: how many micro-batch slots a step takes, and the bubble.

With m micro-batches, p stages, v model chunks per GPU and per-micro-batch stage work W (forward +
backward, whole stage), a step takes (m + (p-1)/v)·W: the bubble is (p-1)·W for GPipe and 1F1B
and (p-1)·W/v for the interleaved schedule (Narayanan et al. 2021, §2.2.1-2.2.2, bubble fractions
(p-1)/m and (p-1)/(v·m)). With unequal stages the slowest stage sets W (the others wait on it).
How layers are split over stages: specs/split.py.
"""

from __future__ import annotations

from paraplan.specs.split import default_first_last, grouped_split, stage_layer_counts


def bubble_from_work_s(total_work_s, slowest_work_s, chunks_per_gpu):
    """(Σ_i W_i − max_i W_i) / v: (p−1)·W (÷v interleaved) for equal stages; with unequal stages the
    fill and drain pass once through every other stage while the slowest one sets the steady state
    ((m−1)·W_max + Σ_i W_i for 1F1B). Works on floats and numpy arrays."""
    return (total_work_s - slowest_work_s) / chunks_per_gpu


def layers_on_stage(layers: int, pp: int, stage: int) -> int:
    """Decoder layers on pipeline stage ``stage`` under the default split (specs/split.py)."""
    first, last = default_first_last(layers, pp)
    return stage_layer_counts(grouped_split(layers, pp, int(first), int(last)))[stage]
