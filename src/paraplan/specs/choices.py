"""The allowed values of the plan's choice fields (and the model's activation names), as Literal types: specs.plan's fields read them, and the
command line builds its choice options from them without loading a pydantic model (issue 31: ``--help``
stays light)."""

from __future__ import annotations

from typing import Literal

Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "interleaved", "gpipe", "zb-h1", "dualpipe"]
PlanDtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "nvfp4", "mxfp4"]
Attention = Literal["flash", "unfused"]
# the fused-attention kernels (cost.attention.KERNEL_CURVES): a framework profile's and an efficiency's
AttentionKernel = Literal["fa2", "fa3", "cudnn", "triton_flash"]
GradDtype = Literal["fp32", "bf16"]
CPAlgorithm = Literal["ring", "all-to-all"]
Zero3GatherUnit = Literal["layer", "tensor"]
Zero3ReduceUnit = Literal["layer", "tensor"]
# the MLP activations a ModelSpec names (Hugging Face transformers activations.py ACT2FN keys)
Activation = Literal["gelu", "gelu_new", "gelu_pytorch_tanh", "silu"]
# a stack's CUDA-graph scope (cost.graph_scope): a profile word, or a list of Megatron-Core CudaGraphScope names
# (Megatron-LM core_v0.16.0 megatron/core/transformer/enums.py; full_iteration and mamba aside)
GraphScopeWord = Literal["none", "attention", "layer", "full_iteration"]
GraphRegion = Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess"]
# The implementation a stack runs per module role (graph.eager_modules: "fused", one kernel per op, or eager
# kernels as the model code runs them; MaxText's: graph.xla_modules; scores bigscience-2110: graph.megatron_softmax;
# linear and heads: graph.megatron_eager; loss: graph.losses).
MEGATRON_SCORES = ("fused", "megatron-2019", "megatron-v1.0")
MODULE_IMPLS: dict[str, tuple[str, ...]] = {
    "embedding": ("fused", "one-hot-gemm"),
    "logits": ("fused", "fp32-dot"),
    "projections": ("fused", "separate"),
    "norm": ("fused", "transformers-rmsnorm", "torchtitan-rmsnorm"),
    "activation": ("fused", "transformers-act2fn"),
    "rotary": ("fused", "transformers-rotate-half", "torchtitan-complex"),
    "loss": (
        "fused",
        "fp32-logits",
        "dtensor-loss-parallel",
        "inductor-fused",
        "megatron-2019",
        "megatron-v1.0",
    ),
    "scores": (*MEGATRON_SCORES, "transformers-gpt2-4.12-amp", "bigscience-2110"),
    "linear": ("fused", "bias-pass"),  # graph.megatron_eager
    "heads": ("fused", "bsh-permute"),  # graph.megatron_eager
}
ModuleRole = Literal[tuple(MODULE_IMPLS)]  # type: ignore[valid-type]  # the roles: MODULE_IMPLS's keys
