"""The partial-output merges of ring attention (context parallelism by K/V ring exchange), per GPU.

With the K/V ring each GPU runs the fused attention kernel once per ring step, on its s/c queries against
one s/c chunk of keys and values, and merges the steps' partial results with their softmax log-sum-exp
(LSE): the output is Σ_i exp(lse_i − lse)·o_i with lse = log Σ_i exp(lse_i) (Liu et al. 2023, Ring
Attention, §3; the online-softmax rescaling of Milakov & Gimelshein 2018). These merges are separate
memory-bound kernels beside the attention kernel. Their passes, counted from Transformer Engine's
implementation at the releases Megatron-Core / NeMo 24.09-era stacks ran (transformer_engine/pytorch/attention.py,
sbhd / bshd layouts: ``AttnFuncWithCP`` at commit 7d576ed, the v1.8 development TE_TAG that NeMo r2.0.0-based
images pin, and ``AttnFuncWithCPAndKVP2P`` at v1.10; the merges below are the same in both):

forward
  - ``out = torch.empty_like(q).zero_()`` (v1.10: ``torch.zeros_like(q)``): one write of the output,
    ab·E_o bytes (E_o = b·(s/c)·(a/t)·d elements);
  - ``flash_attn_fwd_softmax_lse_correction`` after every step but the first (c − 1 calls): the running LSE
    (fp64) read and written, the step's (fp32) read, 20 B per row (rows = b·(a/t)·(s/c));
  - the LSE's ``clone().to(torch.double)`` and final ``.to(torch.float)``: 12 B per row each;
  - ``flash_attn_fwd_out_correction`` once per step (c calls, one fused kernel under ``jit_fuser``): the
    step's partial output read, the running output read and written, 3·ab·E_o bytes, and both LSEs read
    (8 B per row);
backward
  - dq: ``dq.copy_(dq_)`` at the first step (2·ab·E_q) and ``dq.add_(dq_)`` at the c − 1 others (3·ab·E_q);
  - dk, dv: the same copy / add into the ring's gradient buffer, on E_kv = 2·b·(s/c)·(a_kv/t)·d elements.

With the causal load-balanced split (each rank holds chunks i and 2c−1−i) rank c−1 merges every step over
its whole output, the others half of the output on some steps; the ring synchronises the ranks at every
step, so the slowest rank's count (every step whole) is the one priced. The cuDNN path's extra
``torch.cat`` of dk and dv is not counted (kernel-specific). No merge without context parallelism
(c = 1: the kernel writes the output itself) nor under Ulysses (each GPU runs whole sequences).
"""

from __future__ import annotations

from paraplan.graph.cp_ring_torch import (
    TORCH_RING,
    TORCH_RING_BACKWARD_UNITS,
    TORCH_RING_COLLECTIVE,
    torch_ring_kv_bytes,
    torch_ring_merge_bytes,
)
from paraplan.graph.ops import Collective, Op
from paraplan.specs.model import ModelSpec

LSE_FP64_BYTES = 8.0  # the running LSE is kept in float64 during the forward merges
LSE_FP32_BYTES = 4.0  # a step's LSE as the attention kernel returns it
TE_RING_BACKWARD_UNITS = (
    2  # backward calls of the K/V ring's transfer: the K/V again and their gradients
)


def ring_merge_bytes(
    steps: int, out_elements: float, kv_elements: float, rows: float, ab: float
) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the ring-attention merges of one layer and micro-batch on one GPU,
    over ``steps`` = c ring steps (module docstring; Transformer Engine's ``AttnFuncWithCP`` / ``AttnFuncWithCPAndKVP2P``):

    forward = ab·E_o·(1 + 3c) + rows·(20·(c − 1) + 24 + 8·c)
    backward = ab·(E_q + E_kv)·(3c − 1)     (E_q = E_o: the queries have the output's width)

    ``out_elements`` E_o, ``kv_elements`` E_kv (keys and values together), ``rows`` the LSE rows b·(a/t)·(s/c),
    ``ab`` bytes per activation element. 0 for c ≤ 1."""
    if steps <= 1:
        return 0.0, 0.0
    lse_update = 2.0 * LSE_FP64_BYTES + LSE_FP32_BYTES
    lse_casts = 2.0 * (LSE_FP32_BYTES + LSE_FP64_BYTES)
    forward = ab * out_elements * (1.0 + 3.0 * steps) + rows * (
        lse_update * (steps - 1) + lse_casts + 2.0 * LSE_FP32_BYTES * steps
    )
    backward = ab * (out_elements + kv_elements) * (3.0 * steps - 1.0)
    return forward, backward


def ring_merge_ops(model: ModelSpec, shape) -> list[Op]:
    """The merges of one layer's core attention (graph.transformer.attention_ops, ``shape`` its LayerShape) as
    one memory-bound op, ``ring_attention_merge`` (ring_merge_bytes; torch's ring: torch_ring_merge_bytes,
    its backward with the flash-backward calls the ring adds), re-run with the core attention by
    selective recomputation; none without a K/V ring (c = 1, or Ulysses: ``shape.ring_chunks`` 1) and none
    where the K/V are all-gathered (2d-seq: Megatron-Core's cp_comm_type "all_gather", Transformer Engine's
    AttnFuncWithCPAndKVAllGather, each local query chunk attends to the gathered K/V in one call, its output
    written whole; and the SUMMA grid's attention, graph.summa.attention_shape_2d).
    E_o = b·(s/c)·(a/t)·d, E_kv = 2·b·(s/c)·kv_width/t, rows = b·(a/t)·(s/c)."""
    if shape.tp_layout != "1d":  # K/V all-gathered, not passed on a ring (module docstring)
        return []
    steps = shape.ring_chunks
    queries = shape.micro_batch * shape.attention_queries
    rows = queries * (model.heads // shape.attention_head_split)
    out = rows * model.d_head
    if shape.cp_ring == TORCH_RING:  # graph.cp_ring_torch: K/V with the query heads
        kv = 2.0 * rows * model.d_head
        merge = torch_ring_merge_bytes
    else:
        kv = 2.0 * queries * model.kv_width / shape.tp
        merge = ring_merge_bytes
    forward, backward = merge(steps, out, kv, rows, shape.act_bytes)
    if forward <= 0.0:
        return []
    return [Op("ring_attention_merge", "memory", 0.0, forward, 0.0, backward, None, True)]


def cp_kv_ring(
    model: ModelSpec,
    shape,
    tokens: float,
    widths: tuple[int, int] | None = None,
    split: int | None = None,
) -> Collective:
    """The K/V ring of context parallelism on one GPU: its K and V, ab·(b·s/c)·(w_k + w_v)/t bytes, sent on
    at each of the c − 1 steps, forward once and backward TE_RING_BACKWARD_UNITS times (K/V again, their
    gradients). ``widths`` (w_k, w_v): the key and value widths over all heads (default GQA's kv_width each;
    MLA's specs.moe_model.attention_widths); ``split``: the GPUs the heads are split over (default
    ``shape.tp``; the SUMMA grid's columns). Under torch's ring (``shape.cp_ring`` "torch-sdpa") the K and V
    carry the query heads (graph.cp_ring_torch.torch_ring_kv_bytes) and the gradients travel in fp32:
    TORCH_RING_BACKWARD_UNITS backward calls, as the collective TORCH_RING_COLLECTIVE."""
    k_width, v_width = widths if widths is not None else (model.kv_width, model.kv_width)
    t = shape.tp if split is None else split
    if shape.cp_ring == TORCH_RING:
        kv_chunk = torch_ring_kv_bytes(model, shape, tokens, (k_width, v_width), t)
        name, backward_calls = TORCH_RING_COLLECTIVE, TORCH_RING_BACKWARD_UNITS
    else:
        kv_chunk = float(shape.act_bytes * tokens * (k_width + v_width) / t)
        name, backward_calls = "cp_kv_ring", TE_RING_BACKWARD_UNITS
    return Collective(
        name, "cp", "ring_exchange", kv_chunk, 1, backward_calls, overlaps_with="attention"
    )
