"""Offload to host memory: which share of a stage's activations goes there, and the host-link bytes it moves.

Both are pure rules on numbers (floats or numpy arrays); step.compose composes them into the step time and the
memory sum, and search.blocks into its streaming floor.
"""

from __future__ import annotations

from typing import Any

from paraplan.cost.elementwise import maximum, minimum, where

Num = Any  # float or numpy array, broadcastable (as step.compose)


def offloaded_activation_share(
    offload_activations: Num, offload_activation_layers: Num, layers: Num
) -> Num:
    """Share of a stage's decoder-layer activations kept in host memory: 0 without activation offload,
    min(1, k / layers) when only k of the stage's layers offload (Megatron-LM --cpu-offloading-num-layers;
    plan field ``offload_activation_layers``), 1 when every layer does (k = 0)."""
    k = offload_activation_layers
    return where(
        offload_activations, where(k > 0, minimum(1.0, k / maximum(layers, 1.0)), 1.0), 0.0
    )


def offload_traffic_bytes(activation_bytes: Num, weight_bytes: Num) -> Num:
    """Host-link bytes per micro-batch of one block's offloaded activations and weights: each goes out
    to host memory and comes back (2×; exact in floating point, so summing it per block is the sum's double)."""
    return 2.0 * (activation_bytes + weight_bytes)
