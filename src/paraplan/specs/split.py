"""How a plan's decoder layers are split over its pipeline stages: the one statement of the rules.

Four ways, as Megatron-LM offers them (argument names in brackets):
- default: each stage gets ⌊L/p⌋; the L mod p extra layers go to the middle stages first (stage 1,
  2, ...) and only once every middle stage has one, to the first stage; the last stage, which also
  holds the LM head and loss, never gets one. Llama 3 trained with the same idea, one layer fewer
  on the first and last stages (Dubey et al. 2024, §3.3.2). Even splits give L/p everywhere.
- ``layers_first_stage`` / ``layers_last_stage`` [--decoder-first-pipeline-num-layers,
  --decoder-last-pipeline-num-layers]: given counts on the first / last stage, the rest shared by
  the middle stages as evenly as possible (extra layers to the earliest middle stages).
- ``embedding_as_layer`` / ``loss_as_layer`` [--account-for-embedding-in-pipeline-split,
  --account-for-loss-in-pipeline-split]: the embedding and / or the loss count as one layer each;
  the L + e + l units are split by the default rule and the first / last stage hold one decoder
  layer fewer (126 layers of Llama 3.1 405B + 2 = 128 = 8 stages × 16, or 16 × 8).
- ``stage_layers``: the count of every stage, given explicitly.

With interleaving (vpp > 1) each stage's layers are cut into vpp virtual chunks. Megatron-LM's
``--num-virtual-stages-per-pipeline-rank`` alone needs every stage's units to split into equal whole
chunks; its ``--pipeline-model-parallel-layout`` (Megatron-Core PipelineParallelLayerLayout) takes any
number of layers per chunk, empty chunks included, and the Megatron-Bridge recipes use such layouts
(DeepSeek-V3 at PP 4 × VP 4: 61 layers as [16, 16, 16, 13]). A plan may split either way
(``chunk_layer_counts`` gives the chunks); the search enumerates the equal splits only
(specs.plan.interleave_split_rule).

Every split is described as four groups — first stage, the fuller middle stages, the other
middle stages, last stage — whose counts work on ints and on numpy arrays alike (the search splits
millions of candidates at once), except the explicit list, which is one group per stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Num = Any


@dataclass(frozen=True)
class SplitGroup:
    """``count`` consecutive stages from position ``index``, each with ``layers`` decoder layers;
    ``embedding`` / ``head``: whether the group's stages hold the input embedding / the LM head."""

    index: Num
    count: Num
    layers: Num
    embedding: Num
    head: Num


def grouped_split(layers: Num, pp: Num, first: Num, last: Num) -> tuple[SplitGroup, ...]:
    """First stage ``first`` layers, last stage ``last`` (pp > 1), the rest R = L − first − last over
    the pp − 2 middle stages: R mod (pp−2) of them get ⌊R/(pp−2)⌋ + 1, the others ⌊R/(pp−2)⌋."""
    import numpy as np  # here, not at import time: `paraplan --help` stays light (specs load with the CLI)

    single = pp == 1
    middle_stages = np.maximum(pp - 2, 0)
    rest = np.where(single, 0, layers - first - np.where(single, 0, last))
    safe = np.maximum(middle_stages, 1)
    base = rest // safe
    fuller = np.where(middle_stages > 0, rest % safe, 0)
    return (
        SplitGroup(0, 1, np.where(single, layers, first), 1, single),
        SplitGroup(1, fuller, base + 1, 0, 0),
        SplitGroup(1 + fuller, middle_stages - fuller, base, 0, 0),
        SplitGroup(pp - 1, np.where(single, 0, 1), last, 0, 1),
    )


def accounted_units(
    embedding_as_layer: Num, loss_as_layer: Num, mtp_layers: Num = 0
) -> tuple[Num, Num]:
    """(embedding units, loss units) the accounting switches count: 1 for the embedding; 1 for the loss and 1 more per
    MTP module (Megatron-LM's pipeline layout places its 'm' next to the loss 'L'). Ints or numpy arrays."""
    return embedding_as_layer * 1, loss_as_layer * (1 + mtp_layers)


def default_first_last(
    layers: Num, pp: Num, embedding_units: Num = 0, loss_units: Num = 0
) -> tuple[Num, Num]:
    """(first, last) stage layer counts of the default rule applied to L + e + l units, minus the
    units the embedding (e) and the loss (l) stand for (module docstring)."""
    import numpy as np  # see grouped_split

    units = layers + embedding_units + loss_units
    base = units // pp
    extra = units % pp
    if all(x.__class__ in (int, bool) for x in (layers, pp, embedding_units, loss_units)):
        # one plan's Python ints: the same integers without numpy's per-call dispatch
        extra_first = extra - min(extra, max(pp - 2, 0))
        return (layers if pp == 1 else base + extra_first - embedding_units), base - loss_units
    extra_first = extra - np.minimum(extra, np.maximum(pp - 2, 0))
    first = np.where(pp == 1, layers, base + extra_first - embedding_units)
    return first, base - loss_units


def stage_layer_counts(groups: tuple[SplitGroup, ...]) -> list[int]:
    """Decoder layers of every stage, in order (scalar groups only)."""
    out: list[int] = []
    for g in sorted(groups, key=lambda g: int(g.index)):
        out += [int(g.layers)] * int(g.count)
    return out


def explicit_split(stage_layers: tuple[int, ...]) -> tuple[SplitGroup, ...]:
    """One group per stage, as given; the first holds the embedding, the last the LM head."""
    pp = len(stage_layers)
    return tuple(
        SplitGroup(i, 1, n, int(i == 0), int(i == pp - 1)) for i, n in enumerate(stage_layers)
    )


def chunk_units(group: SplitGroup, embedding_units: Num, loss_units: Num) -> Num:
    """Layers a stage interleaves into virtual chunks: its decoder layers plus the embedding / loss
    units counted on it (Megatron-LM requires whole layers per virtual chunk)."""
    return group.layers + group.embedding * embedding_units + group.head * loss_units


def chunk_layer_counts(
    stage_layers: list[int], vpp: int, embedding_units: int = 0, loss_units: int = 0
) -> list[list[int]]:
    """Decoder layers of each of the vpp virtual chunks of every stage (scalar): each layer in turn goes to the chunk
    of its stage with the fewest units (its layers plus the units counted on it: the embedding in stage 0's first
    chunk, the loss and MTP units in the last stage's last chunk), the earliest on a tie. An accounted split that
    divides evenly keeps Megatron-LM's chunks (DeepSeek-V3 at PP 8 × VP 4: 'Et|tt|...|tt|mL'), any other is as even
    as it can be (13 layers over 4 chunks: 4, 3, 3, 3)."""
    out = []
    for stage, n in enumerate(stage_layers):
        units = [0] * vpp
        if stage == 0:
            units[0] += embedding_units
        if stage == len(stage_layers) - 1:
            units[-1] += loss_units
        layers = [0] * vpp
        for _ in range(n):
            chunk = min(range(vpp), key=lambda c: (units[c], c))
            units[chunk] += 1
            layers[chunk] += 1
        out.append(layers)
    return out


def model_part_layers(
    stage_layers: list[int], vpp: int, embedding_units: int = 0, loss_units: int = 0
) -> list[int]:
    """Decoder layers of each of the pp·vpp model chunks in model order, chunk v of stage s at v·pp + s (the
    interleaved schedule's round-robin placement; torchtitan's model parts), each stage cut by chunk_layer_counts
    with the embedding / loss units counted as the plan counts them."""
    return chunks_in_model_order(
        chunk_layer_counts(list(stage_layers), vpp, embedding_units, loss_units)
    )


def chunks_in_model_order(per_stage: list[list[Any]]) -> list[Any]:
    """The model chunks of ``per_stage`` (stage s: its vpp chunks) in model order: chunk v of stage s
    at position v·pp + s, as Megatron-Core's PipelineParallelLayerLayout and torchtitan's
    module_fqns_per_model_part read them (the interleaved schedule's round-robin placement)."""
    vpp = len(per_stage[0]) if per_stage else 0
    return [stage[v] for v in range(vpp) for stage in per_stage]


def stages_of_chunks(per_chunk: list[int], pp: int) -> tuple[int, ...]:
    """The per-stage sums of ``per_chunk`` (a count per chunk, in model order: chunk v of stage s at
    v·pp + s, ``chunks_in_model_order``), for ``pp`` stages."""
    vpp = len(per_chunk) // pp
    return tuple(sum(per_chunk[v * pp + s] for v in range(vpp)) for s in range(pp))
