"""Hugging Face transformers' eager GPT-2 attention scores as the 2021 releases run them (issue 33: the stack
as input), one composite of graph.eager_modules for the ``scores`` role.

transformers v4.12.0 (models/gpt2/modeling_gpt2.py, GPT2Attention._attn; GPT2Model.forward builds the mask)
runs, on the b·a·s·s scores the batched Q·Kᵀ GEMM writes in the activations' dtype:

    attn_weights = attn_weights / (float(value.size(-1)) ** 0.5)
    causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length].bool()
    attn_weights = torch.where(causal_mask, attn_weights, self.masked_bias.to(attn_weights.dtype))
    attn_weights = attn_weights + attention_mask
    attn_weights = nn.Softmax(dim=-1)(attn_weights)
    attn_weights = attn_weights.type(value.dtype)
    attn_weights = self.attn_dropout(attn_weights)

where ``attention_mask`` is the extended mask ``(1.0 - mask[:, None, None, :].to(dtype=self.dtype)) *
-10000.0``, ``self.dtype`` the parameters' dtype. run_clm passes the tokenizer's attention_mask (its
group_texts keeps every column, the Trainer keeps those the model's forward names), so under torch.autocast
over fp32 parameters (Trainer --fp16 with native AMP) the mask is fp32 and the add promotes the fp16 scores
to fp32 (PyTorch type promotion: autocast leaves ``add`` alone); softmax, on autocast's fp32 list, runs on
them in fp32 and ``.type`` casts its output back. Backward (tools/autograd/derivatives.yaml at PyTorch
1.9-1.10): dropout's (the saved uint8 mask), the cast's (fp16 → fp32), softmax_backward (its saved fp32
output), the engine's cast of the add's fp32 gradient to the fp16 input's dtype (torch/csrc/autograd/engine.cpp
validate_outputs), where's ``where(condition, grad, zeros_like(grad))``, and the division's. The causal
mask's ``.bool()`` over the s·s buffer slice and ``masked_bias.to`` are kernels whose size does not grow with
b·a (bytes 0 here: the launch floor).
"""

from __future__ import annotations

# (ATen op, bytes read and written per score element): one kernel of the composite (graph.eager_modules.Kernel)
KernelBytes = tuple[str, float]
FP32 = 4  # bytes of the extended mask's elements: the fp32 parameters' dtype


def gpt2_scores_amp(
    i: int, dropout: bool
) -> tuple[tuple[KernelBytes, ...], tuple[KernelBytes, ...], float]:
    """``transformers-gpt2-4.12-amp``: GPT2Attention._attn (module docstring) on scores of ``i`` bytes per
    element with an fp32 extended mask (o = 4). Forward: the division 2i; the causal mask's bool copy and
    masked_bias's cast (0, per layer); where 2i; + mask (i + o, an fp32 result); softmax 2o; .type (o + i);
    dropout (2i + 1, its mask): 33 B at i = 2 (8 kernels). Backward: dropout (2i + 1); the cast's backward
    (i + o); softmax_backward 3o; the add's gradient cast to the input's dtype (o + i); zeros_like i and where
    3i; the division 2i: 41 B at i = 2 (7 kernels). At i = 4 (an fp32 run) the casts drop out. Saved: the
    softmax's fp32 output and the dropout mask, o + 1 (the dropout output, i, is the next GEMM's input).
    Returns (forward kernels, backward kernels, saved bytes), graph.eager_modules.Composite's fields."""
    o = max(FP32, i)
    cast = o > i
    casts_f = (("_to_copy", o + i),) if cast else ()
    drop_f = (("dropout", 2 * i + 1),) if dropout else ()
    drop_b = (("dropout_backward", 2 * i + 1),) if dropout else ()
    forward = (
        ("div", 2 * i),
        ("_to_copy", 0),  # self.bias[...].bool(): s·s bytes, per layer
        ("_to_copy", 0),  # self.masked_bias.to(dtype): one element
        ("where", 2 * i),
        ("add", i + o),
        ("softmax", 2 * o),
        *casts_f,
        *drop_f,
    )
    backward = (
        *drop_b,
        *((("_to_copy", i + o),) if cast else ()),
        ("softmax_backward", 3 * o),
        *((("_to_copy", o + i),) if cast else ()),
        ("zeros", i),
        ("where", 3 * i),
        ("div", 2 * i),
    )
    return forward, backward, float(o + dropout)
