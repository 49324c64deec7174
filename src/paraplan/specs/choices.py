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
