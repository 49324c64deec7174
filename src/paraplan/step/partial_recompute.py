"""Full recomputation of only some layers: Megatron-LM's block method, torchtitan's every k-th layer.

Megatron-LM ``--recompute-granularity full --recompute-method block --recompute-num-layers N``
checkpoints the first N transformer layers of each pipeline chunk (each virtual stage under the
interleaved schedule) and keeps every activation of the others (Megatron-LM arguments.py; the
trade-off is Korthikanti et al. 2022 §5: a recomputed layer keeps 2·s·b·h bytes and re-runs its
forward, a kept one stores everything and re-runs nothing). torchtitan's layer-level selective
activation checkpointing with frequency k checkpoints every k-th block, ⌊L/k⌋ of L layers
(torchtitan ``activation_checkpoint.selective_ac_option``); for memory and time sums only the number
of recomputed layers matters, so it is the same plan with N = ⌊layers per chunk / k⌋.

A stage of n decoder layers (the kinds step.blocks marks ``counted_recompute``) in vpp chunks then holds min(N·vpp, n) recomputed layers and the rest
as layers without recomputation: two block entries instead of one, each with its own time terms
(recompute seconds, TP re-runs) and its own kept activations; ``step.compose`` composes them as it
composes any mix of blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from paraplan.step.blocks import COUNTED_RECOMPUTE_KINDS
from paraplan.step.compose import BlockCost, Stage, StepInputs
from paraplan.step.layout import with_stage_blocks

Num = Any


def split_recompute_layers(
    inp: StepInputs, kept_at: Callable[[int], BlockCost], layers_per_chunk: int, vpp: int
) -> StepInputs:
    """``inp`` (built with full recomputation) with each stage's n decoder layers split into
    min(N·vpp, n) fully recomputed layers and n − that many kept layers, ``kept_at(stage index)`` (no
    recomputation; a stage laid out on its own spans, step.placement, has its own); the stages rebuilt by
    step.layout.with_stage_blocks."""

    def split(stage: Stage) -> tuple[tuple[BlockCost, Num], ...]:
        kept_layer = kept_at(int(stage.index))
        blocks = []
        for block, n in stage.blocks:
            if block.kind not in COUNTED_RECOMPUTE_KINDS:
                blocks.append((block, n))
                continue
            recomputed = np.minimum(n, layers_per_chunk * vpp)
            blocks += [(block, recomputed), (kept_layer, n - recomputed)]
        return tuple(blocks)

    return with_stage_blocks(inp, split)


def recomputed_layer_share(inp: StepInputs) -> float:
    """Recomputed decoder layers / all decoder layers over every stage of ``inp`` (after
    ``split_recompute_layers``: the first decoder entry of each stage is the recomputed one)."""
    recomputed = total = 0.0
    for stage in inp.stages:
        first = True
        for block, n in stage.blocks:
            if block.kind not in COUNTED_RECOMPUTE_KINDS:
                continue
            total += float(stage.count * n)
            if first:
                recomputed += float(stage.count * n)
                first = False
    return recomputed / total if total else 0.0
