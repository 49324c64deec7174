"""Activation casts AMP autocast adds around an op that runs wider than the activations: one definition, read
by cost.host (the kernels the host issues) and cost.eager_kernels (their device time).

Under torch.autocast(bf16) over fp32 parameters the residual stream is fp32 (the embedding's fp32 output; the add
of a bf16 linear output to it promotes to fp32, torch type promotion) and norms run in fp32 (layer_norm is on
CUDA autocast's fp32 list, aten/src/ATen/autocast_mode.cpp, PyTorch 2.4-2.11). Around such an op:
- a norm: its fp32 output is cast to bf16 by the next GEMM (autocast's cast of a linear's input, one kernel)
  and that GEMM's input gradient back to fp32 (ToCopyBackward, one kernel): (1, 1);
- a residual add: the forward add takes the bf16 branch and the fp32 stream in one kernel, and backward the
  stream's fp32 gradient is cast to the branch's bf16 (the autograd engine casts a gradient to its input's
  dtype, torch/csrc/autograd/engine.cpp validate_outputs): (0, 1).
A weight GEMM's own casts (its fp32 weight and bias) are the GEMM's (cost.host.op_kernels)."""

from __future__ import annotations

# defined in graph.eager_modules, below cost, so that a composite's kernel list carries its casts
from paraplan.graph.eager_modules import ROLE_CASTS, activation_casts

__all__ = ["ROLE_CASTS", "activation_casts"]
