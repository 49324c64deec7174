"""The element-wise passes of a GPT-2 layer outside its GEMMs, its core-attention scores
(graph.eager_modules.megatron_scores, graph.hf_scores) and its loss (graph.losses), as PyTorch 1.1-1.10 runs
Megatron-LM's 2019 and v1.0 code and transformers' 2021 GPT-2 (issues 32/33: the stack as input). Two module_impl
roles (specs.choices.MODULE_IMPLS) a profile or a case states (the megatron-lm-2019 and -v1.0 profiles; the
transformers 4.12 cases of dsexamples-hf-v100 do not yet, docs/model.md); graph.transformer's 1-D dense
decoder layer reads them (``eager_layer_ops``), MoE layers (graph.moe) and the SUMMA 2-D layout do not:

- ``linear: bias-pass``: each linear's bias applied in a pass of its own over the output. Megatron-LM calls
  torch.nn.functional.linear on the 3-D [b, s, h] activations, and PyTorch's torch/nn/functional.py (1.1 to
  1.5) fuses the bias into ``addmm`` only for a 2-D input (``if input.dim() == 2 and bias is not None``);
  otherwise ``output = input.matmul(weight.t())`` then ``output += bias`` (read and write the output).
  ColumnParallelLinear calls ``F.linear(input, weight, bias)`` (QKV and MLP-in: outputs split by t);
  RowParallelLinear calls ``F.linear(input, weight)``, all-reduces and adds ``output_ + self.bias`` out of place
  on the whole [b, s, h] output (attention dense and MLP-out, replicated on every tensor-parallel rank):
  a0368ddf47 mpu/layers.py, v1.0 megatron/mpu/layers.py. transformers' Conv1D (v4.12.0 modeling_utils.py:
  ``torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)``) runs on PyTorch's CUDA addmm, which before
  its cuBLASLt bias epilogue (PyTorch 1.13) copies the broadcast bias into the output (``copy_(result,
  self)``, aten/src/ATen/native/cuda/Blas.cpp addmm_out_cuda_impl) and then runs the GEMM with beta 1, reading
  it back: the same 2 + 2 bytes per output element. Backward, each bias's gradient is a sum of the output
  gradient over the tokens (read once; the add's pass-through gradient moves nothing).
- ``heads: bsh-permute``: the attention heads as views of the [b, s, h/t] QKV output. Megatron's
  ``_transpose_for_scores`` (a0368ddf47 mpu/transformer.py GPT2ParallelSelfAttention; v1.0
  megatron/model/transformer.py ParallelSelfAttention) and transformers' ``GPT2Attention._split_heads``
  (v4.12.0 models/gpt2/modeling_gpt2.py) view q, k, v (chunks of the fused QKV output that ``split`` leaves
  non-contiguous) as [b, s, np, hn] and permute them to [b, np, s, hn]; torch.matmul of two 4-D tensors
  (aten/src/ATen/native/LinearAlgebra.cpp ``matmul``, PyTorch 1.1-1.10) folds the batch dimensions with
  ``expand(...).contiguous().view(...)`` (``reshape`` from 1.7), which must copy a permuted view, so q, kᵀ and
  v are each copied once, and the context is copied back by ``permute(0, 2, 1, 3).contiguous()`` (Megatron's
  context layer, transformers' ``_merge_heads``). Backward, the context gradient arrives permuted and bmm's
  ``_unsafe_view`` reshapes it (one copy); each of q, k and v's gradients leaves the permute as a
  [b, s, np, hn] view that ViewBackward's ``reshape`` to [b, s, hp] must copy (its heads are not adjacent in
  memory), and split's backward concatenates the three (``at::cat``).

Each pass reads and writes its elements once in the activations' dtype, priced at the HBM rate as every
memory-bound op (cost.compute.memory_time_s); the ops stand for several kernels each (cost.host counts one).
"""

from __future__ import annotations

from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec

BIAS_PASS = ("linear", "bias-pass")
BSH_PERMUTE = ("heads", "bsh-permute")


def bias_add_op(model: ModelSpec, tokens: float, tp: int, ab: int) -> Op | None:
    """``linear: bias-pass`` (module docstring) on ``tokens`` local tokens at ``ab`` bytes per activation:
    forward the in-place ``+= bias`` of the column-parallel outputs, 2·ab·(q + 2kv)/t (with q/k/v biases) +
    2·ab·f·p/t (p the MLP's input projections), and the out-of-place ``+ bias`` of the two row-parallel
    outputs, 2·ab·2h; backward one read of each output's gradient for its bias's gradient, half the forward
    bytes. None for a model without biases."""
    if not model.has_bias and not model.has_qkv_bias:
        return None
    qkv = (model.q_width + 2 * model.kv_width) / tp if model.has_qkv_bias else 0.0
    rest = model.ffn_hidden * model.mlp_input_projections / tp + 2 * model.hidden
    width = qkv + (rest if model.has_bias else 0.0)
    return Op(
        "linear_bias_adds", "memory", 0.0, 2.0 * ab * tokens * width, 0.0, ab * tokens * width
    )


def head_copy_op(model: ModelSpec, tokens: float, tp: int, ab: int) -> Op:
    """``heads: bsh-permute`` (module docstring) on ``tokens`` local tokens: forward the copies of q, kᵀ and v
    for the batched GEMMs and of the context back to [b, s, h/t], 2·ab·(q + 2kv + q)/t bytes per token;
    backward the context gradient's reshape, the q/k/v gradients' reshapes and split's concatenation of them,
    2·ab·(q + 2·(q + 2kv))/t."""
    qkv = (model.q_width + 2 * model.kv_width) / tp
    q = model.q_width / tp
    fwd = 2.0 * ab * tokens * (qkv + q)
    bwd = 2.0 * ab * tokens * (q + 2 * qkv)
    return Op("attention_head_copies", "memory", 0.0, fwd, 0.0, bwd)


def eager_layer_ops(
    model: ModelSpec, tokens: float, tp: int, ab: int, impl: tuple, attention: str
) -> list[Op]:
    """The ops the profile's module_impl pairs ``impl`` add to a decoder layer (module docstring): the bias
    adds under ``linear: bias-pass``, the head copies under ``heads: bsh-permute`` with unfused attention
    (the batched GEMMs that need them); none for other stacks."""
    ops: list[Op] = []
    if BIAS_PASS in impl and (op := bias_add_op(model, tokens, tp, ab)) is not None:
        ops.append(op)
    if BSH_PERMUTE in impl and attention == "unfused":
        ops.append(head_copy_op(model, tokens, tp, ab))
    return ops
