"""The tensor-parallel collectives of a dense decoder (or encoder) layer's 1D layout, and the bytes per element
its sequence-parallel all-gathers move (graph.transformer builds the layer's ops around them); the K/V
all-gathers of the 2D layouts (graph.summa, graph.transformer's 2d-seq exchange) and the bytes they gather."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paraplan.graph.ops import Collective

if TYPE_CHECKING:
    from paraplan.graph.transformer import LayerShape
    from paraplan.specs.model import ModelSpec


def tp_gather_bytes(shape: LayerShape, ab: int) -> int:
    """Bytes per element of a layer's sequence-parallel all-gathers (the GEMM inputs forward and again for
    wgrad, the row-parallel output gradients backward): 1 in an fp8 run whose stack gathers in fp8
    (``shape.tp_fp8_gather``), else the activations' ``ab``.

    torchao's float8 tensor parallelism, which torchtitan applies with Float8Linear under tensorwise scaling
    (torchtitan/parallelisms/parallelize_llama.py at 9dec370, models/llama3/parallelize_llama.py at 820504e:
    ``Float8ColwiseParallel``, ``Float8RowwiseParallel``, ``PrepareFloat8ModuleInput``;
    torchao/float8/float8_tensor_parallel.py, v0.8.0): ``PrepareFloat8ModuleInput`` and the colwise
    ``_prepare_input_fn`` cast the input to float8 (e4m3) before the Shard(1) → Replicate redistribute, "so
    that ... we perform fp8 allgather only once", and the rowwise ``_prepare_output_fn`` wraps its reduce-scatter's
    output in ``NoopFwToFloat8BwDynamic``, which casts the gradient to float8 (e5m2) before that
    redistribute's backward all-gather. The reduce-scatters (forward: the rowwise outputs; backward: the
    input gradients of the colwise GEMMs) stay in the activations' dtype."""
    return 1 if shape.tp_fp8_gather and shape.dtype == "fp8" else ab


def tp_collectives(
    tokens: int, width: int, ab: int, shape: LayerShape, calls: int = 2, prefix: str = ""
) -> list[Collective]:
    """TP collectives of ``calls`` column-parallel / row-parallel linear pairs over ``width``: a dense layer's two
    (QKV with the attention projection, MLP-in with MLP-out; Shoeybi et al. 2019, Fig. 4, operators f and g), one
    for an attention half (graph.mla) or one tensor-parallel MLP (graph.moe_mlp, names under ``prefix``).

    Without SP: forward all-reduces the row-parallel outputs; backward all-reduces the column-parallel input
    gradients, asynchronously beside the wgrad GEMM (Megatron-LM's async tensor-parallel all-reduce). With SP
    (Korthikanti et al. 2022, §4.2.2): forward all-gathers the column-parallel inputs and reduce-scatters the
    row-parallel outputs; backward all-gathers the row-parallel output gradients, re-gathers the column-parallel
    inputs for wgrad (SP stores them sharded; overlapped with dgrad) and reduce-scatters the input gradients
    (overlapped with wgrad). The all-gathers move ``tp_gather_bytes`` per element, the rest ``ab``."""
    if shape.tp == 1:
        return []
    name = (lambda n: f"{prefix}_{n}") if prefix else (lambda n: n)
    size = float(ab * tokens * width)
    if shape.sequence_parallel:
        gathered = float(tp_gather_bytes(shape, ab) * tokens * width)
        return [
            Collective(name("tp_all_gather"), "tp", "all_gather", gathered, calls, calls),
            Collective(name("tp_reduce_scatter"), "tp", "reduce_scatter", size, calls, 0),
            Collective(
                name("tp_input_regather"),
                "tp",
                "all_gather",
                gathered,
                0,
                calls,
                overlaps_with="dgrad",
            ),
            Collective(
                name("tp_grad_reduce_scatter"),
                "tp",
                "reduce_scatter",
                size,
                0,
                calls,
                overlaps_with="wgrad",
            ),
        ]
    return [
        Collective(name("tp_all_reduce"), "tp", "all_reduce", size, calls, 0),
        Collective(
            name("tp_grad_all_reduce"), "tp", "all_reduce", size, 0, calls, overlaps_with="wgrad"
        ),
    ]


def kv_gather_collectives(group: str, kv_bytes: float, members: int) -> list[Collective]:
    """All-gather K/V before the fused kernel (forward, and again in backward) and reduce-scatter dK/dV
    after it (NERSC model ``FusedLASeqp``); ``kv_bytes`` the gathered (full) buffer, nccl-tests'
    all-gather convention. Nothing hides them: the kernel needs the gathered K/V."""
    if members <= 1:
        return []
    return [
        Collective(f"{group}_kv_all_gather", group, "all_gather", kv_bytes, 1, 1),
        Collective(f"{group}_dkv_reduce_scatter", group, "reduce_scatter", kv_bytes, 0, 1),
    ]


def gathered_kv_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """The K and V a 2D tensor-parallel layout all-gathers for the fused kernel (NERSC model FusedLASeqp), one
    rule for the collectives and the working buffer (cost.memory.layout_buffer_bytes): 2d, the grid column's
    T = b·s/cp tokens, ab·T·2·kv_width/c (graph.summa); 2d-seq with cp > 1, all s tokens for the tp rank's
    heads, ab·b·s·2·kv_width/t (graph.transformer.context_gather_collectives); 0 otherwise."""
    if shape.tp_layout == "2d":
        cols = shape.tp // shape.tp_rows
        return shape.act_bytes * shape.local_tokens * 2 * model.kv_width / cols
    if shape.tp_layout == "2d-seq" and shape.cp > 1:
        return (
            shape.act_bytes * shape.micro_batch * shape.seq_length * 2 * model.kv_width / shape.tp
        )
    return 0.0
