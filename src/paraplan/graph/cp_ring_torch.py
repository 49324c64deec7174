"""PyTorch's ring attention (torch.distributed.tensor.experimental context_parallel) as torchtitan runs it:
the K/V the ring carries and the HBM passes of its partial-output merges, per GPU.

Source: pytorch/pytorch torch/distributed/tensor/experimental/_attention.py (read at 0123248a; the ring loop,
the merger and the load-balanced chunking below are those of the torch 2.6 development line that torchtitan's
December 2024 benchmarks ran, torch 1963fc8), ``_templated_ring_attention`` / ``_SDPAMerger`` (forward) and
``_templated_ring_attention_backward`` with ``_ContextParallelOptions`` defaults convert_to_f32 True,
enable_load_balance True, and torchtitan's default rotate method "allgather" (torchtitan config_manager.py
``experimental.context_parallel_rotate_method`` at 9dec370).

What the ring carries: torchtitan's Llama repeats K and V to the query heads before calling SDPA
(torchtitan/models/llama/model.py ``repeat_kv`` at 9dec370), so each GPU's K/V chunk is
ab·(b·s/c)·2·(a/t)·d bytes, not the grouped-query a_kv heads; the backward sends the dK/dV sums on in
float32 (``dkv_rotater``, accumulators ``torch.zeros_like(..., dtype=float32)``), twice the bytes of K/V.

Merges, on the rank that does every step whole (rank c − 1 under load balancing: at steps i ≤ rank it runs
all its queries against the first half of the K/V, so its merges span the whole output; the ranks wait
for one another at each step), E_o output elements, E_kv K/V elements (with the repeated heads), ab bytes
per activation element, rows = b·(a/t)·(s/c) LSE rows, c steps:

both directions: ``key.contiguous()`` and ``value.contiguous()`` before the ring loop copy K and V (2·ab·E_kv)
  where SDPA receives them as views: torchtitan's Llama transposes the (b, s, heads, d) output of ``repeat_kv``
  to (b, heads, s, d) before the call (torchtitan/models/llama/model.py ``Attention.forward`` at 9dec370,
  ``xk = keys.transpose(1, 2)``), and the backward receives the same views as saved inputs;
forward (``_SDPAMerger.step`` each step, ``results`` once)
  - each step's output converted to float32: (ab + 4)·E_o, c times;
  - at steps 1 … c−1, ``out − sigmoid(lse_i − lse)·(out − out_i)``: three float32 passes over E_o
    (difference 12 B, product 8 B, update 12 B): 32·E_o; the LSE update ``lse − logsigmoid(lse − lse_i)``
    and the sigmoid's argument, about 52 B per row;
  - the LSE converted to float32 each step, 8 B per row; ``results``: the output back to ab, (4 + ab)·E_o;
  - at steps 0 … c−2, ``torch.cat([key.flatten(), value.flatten()])`` before the send: 2·ab·E_kv;
backward
  - float32 zeroed accumulators for dq, dk, dv: 4·(E_o + E_kv);
  - dq ``+=`` each step's bf16 dq: (8 + ab)·E_o, c times; cast back once: (4 + ab)·E_o;
  - dk, dv: at step 0 ``+=`` (8 + ab)·E_kv; at steps 1 … c−1 ``_partial_update`` adds into the first half,
    (8 + ab)·E_kv/2, then ``torch.cat`` of the halves, 8·E_kv; every step ``torch.cat`` of dk and dv for
    the send, 8·E_kv; the received sums cast back once, (4 + ab)·E_kv;
  - the K/V ``torch.cat`` before each send but the last, 2·ab·E_kv, c − 1 times;
  - the flash backward is called once per ring step (``op(...)`` inside ``for i in range(size)``), and each
    call of FlashAttention-2's backward (the flash SDPA backend: ``aten._scaled_dot_product_flash_attention_
    backward``) runs two memory-bound kernels around its main kernel (flash-attention csrc/flash_attn/src/
    flash_bwd_launch_template.h ``run_flash_bwd_seqk_parallel``, read at 073afd59: ``flash_bwd_dot_do_o_kernel``
    with Clear_dQaccum reads dO and O and zeroes the float32 dQ accumulator, ``flash_bwd_convert_dq_kernel``
    reads the accumulator and writes dQ), (3·ab + 8)·E_o a call; the attention op is priced as one call
    (graph.transformer.attention_ops), so the ring adds c − 1 such calls (torch_ring_merge_bytes' backward).
Each is one eager kernel in the source; under torch.compile Inductor may fuse the element-wise chains
(not credited: an assumption, docs/model.md); the flash kernels are extern calls Inductor does not fuse.

The same loop, merger and rotaters are in the torch 2.6 line's copy of the file (the version with
``_RotateMethod.PRE_ALL_GATHER`` and ``_sdpa_backward_handler``), whose handlers dispatch only the flash and
memory-efficient SDPA ops to the ring, and torchtitan 9dec370 enters ``sdpa_kernel([FLASH_ATTENTION,
EFFICIENT_ATTENTION])`` with the CP context (torchtitan/utils.py ``get_train_context``): the flash backend,
FlashAttention-2, runs every step (the cuDNN backend was opt-in on the December 2024 nightlies,
pytorch/pytorch#138522, #142132). Per step on rank c − 1: step 0 causal on the s/c local queries and keys,
steps 1 … c − 1 full blocks of s/c queries on s/(2c) keys (``key.chunk(2, dim=2)[0]``), so
(s/c)·(s + 1)/2 query-key pairs in all, which graph.transformer.attention_ops' causal share counts as
(s/c)·(s + c)/2 (relative difference (c − 1)/(s + 1)).
"""

from __future__ import annotations

from paraplan.specs.model import ModelSpec

TORCH_RING = "torch-sdpa"  # LayerShape.cp_ring of this ring
# Collective.name of this ring's K/V pass: step.block_sums reads from it that the chunks arrive by all-gather
TORCH_RING_COLLECTIVE = "cp_kv_ring_torch"
# backward calls of one K/V chunk's transfer per step: the K/V all-gathered again (1) and the float32 dK/dV
# sums sent on (2, twice the bytes); step.block_terms.gathered_cp_exposure_s splits cp_backward by them
TORCH_RING_BACKWARD_UNITS = 3
FP32_BYTES = 4.0  # the merger's running output and the gradient sums are float32 (convert_to_f32)
MERGE_UPDATE_BYTES = 32.0  # per output element: the difference, the product and the update, float32
LSE_UPDATE_BYTES = (
    52.0  # per LSE row: sigmoid / logsigmoid arguments, results and the update, float32
)
LSE_CAST_BYTES = 8.0  # per LSE row: one cast to float32 (read and write)
# per query element, each FlashAttention-2 backward call: dO and O read (ab each) and the float32 dQ
# accumulator zeroed (dot_do_o), the accumulator read and dQ written (convert_dq): 3·ab + ACCUM_BYTES
DQ_ACCUM_BYTES = 8.0


def torch_ring_kv_bytes(
    model: ModelSpec, shape, tokens: float, widths: tuple[int, int], split: int
) -> float:
    """Bytes of one GPU's K/V chunk on torch's ring under torchtitan: K and V with the query heads (repeat_kv
    before SDPA), ab·tokens·(w_k + w_v)·(a/a_kv)/``split``, ``widths`` (w_k, w_v) the layer's key and value
    widths over all heads and ``split`` the GPUs its heads are split over; for GQA 2·ab·tokens·q_width/t
    (module docstring). MLA's keys and values are per query head already: no repeat."""
    repeat = 1 if model.is_mla else model.heads // model.n_kv_heads
    return float(shape.act_bytes * tokens * (widths[0] + widths[1]) * repeat / split)


def torch_ring_merge_bytes(
    steps: int, out_elements: float, kv_elements: float, rows: float, ab: float
) -> tuple[float, float]:
    """(forward, backward) HBM bytes of torch's ring-attention merges of one layer and micro-batch on the
    GPU that merges every step whole, over ``steps`` = c (module docstring):

    forward = E_o·[(ab + 4)·c + 32·(c − 1) + (4 + ab)] + rows·[52·(c − 1) + 8·c] + 2·ab·E_kv·c
    backward = E_o·[4 + (8 + ab)·c + (4 + ab)]
             + E_kv·[4 + (8 + ab) + (c − 1)·((8 + ab)/2 + 8) + 8·c + (4 + ab) + 2·ab·c]
             + (c − 1)·(3·ab + 8)·E_o

    (2·ab·E_kv·c: the c − 1 K/V concatenations before the sends and the one ``contiguous()`` copy of K and V;
    (c − 1)·(3·ab + 8)·E_o: the flash-backward calls the ring adds over the one call the attention op is
    priced as, FlashAttention-2's ``flash_bwd_dot_do_o_kernel`` reading dO and O and zeroing the float32 dQ
    accumulator and ``flash_bwd_convert_dq_kernel`` reading it and writing dQ at every call, DQ_ACCUM_BYTES.)

    0 for c ≤ 1."""
    if steps <= 1:
        return 0.0, 0.0
    c, f = float(steps), FP32_BYTES
    forward = (
        out_elements * ((ab + f) * c + MERGE_UPDATE_BYTES * (c - 1.0) + (f + ab))
        + rows * (LSE_UPDATE_BYTES * (c - 1.0) + LSE_CAST_BYTES * c)
        + 2.0 * ab * kv_elements * c  # c − 1 concatenations + the contiguous() copy
    )
    accumulate = 2.0 * f + ab  # fp32 += ab: read both, write fp32
    backward = out_elements * (f + accumulate * c + (f + ab)) + kv_elements * (
        f
        + accumulate
        + (c - 1.0) * (accumulate / 2.0 + 2.0 * f)
        + 2.0 * f * c
        + (f + ab)
        + 2.0 * ab * c  # c − 1 concatenations + the contiguous() copy
    )
    # the c − 1 flash-backward calls beyond the one the attention op is priced as
    backward += (c - 1.0) * (3.0 * ab + DQ_ACCUM_BYTES) * out_elements
    return forward, backward
