"""The LM head's cross-entropy as the stack runs it (graph.eager_modules' ``loss`` role; issue 32): bytes per logit
read and written forward and backward, kernels, and bytes per logit held for backward, per implementation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

FP32 = 4  # bytes of an fp32 element
# Bytes per logit an fp32-logit loss holds at the start of backward: log_softmax's fp32 output (saved for
# its backward, 4), nll_loss_backward's fp32 gradient (a zero fill and a scatter, 4) and
# log_softmax_backward's fp32 output (4), ForCausalLMLoss; the fp32 copy of the logits is freed once
# log_softmax has read it (log_softmax saves its result, not its input)
LOGIT_BYTES = 12.0


class LossImpl(NamedTuple):
    """One implementation of the LM head's cross-entropy, per logit (b·(s/c)·V/t of them per GPU): HBM bytes
    read and written forward and backward, the kernels each way (cost.host counts a fused stack's op as one
    each way; an eager stack's by cost.host.EAGER_KERNELS), and the bytes per logit the loss holds at the
    start of backward (cost.memory.lm_head_activation_bytes); where the logits are split over t > 1 tensor-parallel
    ranks, ``tp_held_bytes`` instead when the implementation states one."""

    fwd_bytes: float
    bwd_bytes: float
    kernels: tuple[int, int]
    held_bytes: float
    tp_held_bytes: float | None = None


LOSS_IMPLS: dict[str, LossImpl] = {
    # Megatron-LM's vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py
    # _VocabParallelCrossEntropy): the fp32 logits read and written about three times forward (max, exp-sum,
    # the softmax kept for backward) and twice backward (the softmax reused in place as the gradient); the
    # fp32 softmax held, 4 B. The op graph's pricing since issue 1, the default of every profile.
    "fused": LossImpl(3 * FP32, 2 * FP32, (3, 4), FP32),
    # eager ``logits.float()`` then F.cross_entropy (transformers loss/loss_utils.py ForCausalLMLoss;
    # F.cross_entropy under autocast, which keeps cross_entropy on its fp32 list and so upcasts the bf16
    # logits, aten/src/ATen/autocast_mode.cpp): the same analytical bytes as "fused" (with a kernels table
    # the profile's eager_kernels loss role prices it from the measured cross_entropy_fp32_fwd_bwd row,
    # cost.eager_kernels), and in memory LOGIT_BYTES held.
    "fp32-logits": LossImpl(3 * FP32, 2 * FP32, (3, 4), LOGIT_BYTES),
    # torchtitan's eager loss, cross_entropy(pred.flatten(0, 1).float(), ...), under torch's loss_parallel() where
    # tensor parallelism shards the logits on the vocabulary (torchtitan train.py at 9dec370: train_context with
    # loss_parallel when parallel_dims.loss_parallel_enabled, i.e. TP on and --training.disable_loss_parallel
    # off): at t = 1 fp32-logits itself; at t > 1 DTensor's custom handlers (torch/distributed/tensor/parallel/
    # loss.py, 2024-2025) run nll_loss's and log_softmax's backward fused as (grad_input + torch.exp(x)) *
    # grad_output, which holds the saved log_softmax output x, the zeros_like(x) grad_input, exp(x) and the sum
    # at once: 4 · 4 = 16 B per local logit (the forward's peak, bf16 logits 2 + fp32 copy 4 + shifted 4 + exp
    # 4 = 14, is below it). Time as fp32-logits (the same analytical bytes; its extra element-wise passes are
    # not priced apart).
    "dtensor-loss-parallel": LossImpl(3 * FP32, 2 * FP32, (3, 4), LOGIT_BYTES, 4 * FP32),
    # F.cross_entropy on the bf16 logits inside a torch.compile'd graph (TorchInductor, PyTorch 2.x): the
    # decomposed log_softmax + nll_loss fuses the autocast upcast, the row max, the exp-sum and the pick into
    # one generated reduction kernel that reads the bf16 row twice (a looped reduction, the row of a 50k
    # vocabulary exceeding Inductor's persistent-reduction size: the max loop, then the exp-sum loop), 2·2 B,
    # and writes per-row statistics only; backward one point-wise kernel, exp(x − lse) − onehot scaled by the
    # incoming gradient, reading the bf16 logits (2 B) and writing their bf16 gradient (2 B). The partitioner
    # saves the bf16 logits and the per-row statistics for backward, not an fp32 copy (Ansel et al. 2024,
    # PyTorch 2, ASPLOS '24, §5: reductions fused with their point-wise producers and consumers; the min-cut
    # partitioner recomputes point-wise ops rather than saving their outputs, §4.2); held as LOGIT_BYTES
    # counts it, with the gradient backward writes while the saved logits live: 2 + 2 B.
    "inductor-fused": LossImpl(2 * 2, 2 * 2, (1, 1), 2 + 2),
    # Megatron-LM's 2019 code on fp16 logits (NVIDIA/Megatron-LM a0368ddf47: pretrain_gpt2.py forward_step calls
    # mpu.vocab_parallel_cross_entropy(output.contiguous().float(), labels); mpu/cross_entropy.py
    # _VocabParallelCrossEntropy): forward the fp32 copy of the fp16 logits (read 2, write 4), ``clone`` (8),
    # ``torch.max`` (4), ``sub_`` (8), ``exp`` into a new tensor (8), ``sum`` (4), ``exp_logits.div_`` (8): 46 B;
    # backward ``grad_input.mul_`` (8; the target's index_put_ is per row) and the .float()'s backward, the
    # gradient cast to fp16 (read 4, write 2): 14 B; 7 and 2 logit-sized kernels (the per-row masks, gathers and
    # log not counted). The saved softmax, 4 B, is all it holds (the fp32 copy and the clone are freed).
    "megatron-2019": LossImpl(6 + 8 + 4 + 8 + 8 + 4 + 8, 8 + 6, (7, 2), FP32),
    # Megatron-LM v1.0 (tag v1.0, 03d2880: pretrain_gpt2.py the same .float() call; megatron/mpu/cross_entropy.py
    # works in place on it, no clone, ``torch.exp(x, out=x)``): 6 + 4 + 8 + 8 + 4 + 8 = 38 B forward, 14 B
    # backward as the 2019 code, 6 and 2 kernels, the same 4 B held.
    "megatron-v1.0": LossImpl(6 + 4 + 8 + 8 + 4 + 8, 8 + 6, (6, 2), FP32),
}


def loss_impl(impl: Mapping[str, str] | tuple[tuple[str, str], ...]) -> LossImpl:
    """The LOSS_IMPLS entry a stack runs: the ``loss`` of its module_impl (``impl``: the profile's mapping,
    or impl_key's pairs as graph.transformer.LayerShape.module_impl carries them), "fused" where it names
    none."""
    return LOSS_IMPLS[dict(impl).get("loss", "fused")]
