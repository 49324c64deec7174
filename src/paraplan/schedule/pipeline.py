"""Pipeline schedules: how many micro-batch slots a step takes, and the bubble.

With m micro-batches, p stages, v model chunks per GPU and per-micro-batch stage work W (forward +
backward, whole stage), a step takes (m + (p-1)/v)·W: the bubble is (p-1)·W for GPipe and 1F1B
and (p-1)·W/v for the interleaved schedule (Narayanan et al. 2021, §2.2.1-2.2.2, bubble fractions
(p-1)/m and (p-1)/(v·m)). With unequal stages the slowest stage sets W (the others wait on it).
"""

from __future__ import annotations

import numpy as np


def bubble_from_work_s(total_work_s, slowest_work_s, chunks_per_gpu):
    """(Σ_i W_i − max_i W_i) / v: (p−1)·W (÷v interleaved) for equal stages; with unequal stages the
    fill and drain pass once through every other stage while the slowest one sets the steady state
    ((m−1)·W_max + Σ_i W_i for 1F1B). Works on floats and numpy arrays."""
    return (total_work_s - slowest_work_s) / chunks_per_gpu


def layers_on_stage(layers, pp, stage):
    """Decoder layers on pipeline stage ``stage`` (floats, ints or numpy arrays).

    Each stage gets ⌊L/p⌋; the L mod p extra layers go to the middle stages first (stage 1, 2, ...)
    and only once every middle stage has one, to the first stage; the last stage, which also holds
    the LM head and loss, never gets one. Llama 3 trained with the same idea, one layer fewer on
    the first and last stages (Dubey et al. 2024, §3.3.2). Even splits give L/p everywhere."""
    base = layers // pp
    extra = layers % pp
    extra_middle = np.minimum(extra, np.maximum(pp - 2, 0))
    extra_first = extra - extra_middle
    middle = base + np.where(stage <= extra_middle, 1, 0)
    return np.where(stage == 0, base + extra_first, np.where(stage == pp - 1, base, middle))
