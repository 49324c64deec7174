"""Autograd work a measured fwd+bwd row did on leaf tensors that a training step's kernels do not (issue 32).

A benchmark that times ``op(x).backward(g)`` on inputs made with ``requires_grad=True`` (leaves) also runs
autograd's AccumulateGrad for each of them: from the second timed call on ``x.grad`` exists and the new
gradient is added into it in place (PyTorch torch/csrc/autograd/functions/accumulate_grad.h,
``AccumulateGrad::accumulateGrad``: ``variable_grad += new_grad`` when the grad is defined and grad mode is
off, as inside backward), one element-wise pass reading two tensors of x's shape and writing one. In a step
the op's inputs are other ops' outputs, not leaves: their gradients flow on to the op that made them and no
such pass runs. The shared gpu_components.py times its attention rows this way (``out.backward(g)`` on leaf
q, k, v; bwd = (fwd+bwd) − fwd), and its norm, SwiGLU and cross-entropy rows (``op(x).backward(g)`` on a leaf
x; cost.eager_kernels). A table.yaml names the attention files whose bwd rows were timed so in
``leaf_gradients`` (LEAF_FIELD).

Each pass is priced at the system's analytical HBM rate (specs.system.AcceleratorSpec.hbm_rate), not from a table
row, so that no slower measured kernel makes an op faster (the property of cost.kernel_tables).
"""

from __future__ import annotations

LEAF_FIELD = (
    "leaf_gradients"  # table.yaml: the attention kinds whose bwd rows hold q, k, v's accumulation
)
MEASURED_BYTES = 2  # the measured rows' tensors are bf16 (gpu_components.py)


def accumulation_bytes(elements: float, element_bytes: float = MEASURED_BYTES) -> float:
    """Bytes of AccumulateGrad's in-place add into a leaf's gradient of ``elements``: 3 · e · elements (read
    the gradient held and the new one, write the sum)."""
    return 3.0 * element_bytes * elements


def attention_leaf_bytes(batch: float, heads: float, seq: float, head_dim: float) -> float:
    """Bytes of the accumulations of a fused attention row's three leaf inputs q, k, v (each b × h × s × d
    bf16, gpu_components.py section_attention): 3 × accumulation_bytes(b·h·s·d)."""
    return 3.0 * accumulation_bytes(batch * heads * seq * head_dim)


def sliced_halves_bytes(elements: float, element_bytes: float = MEASURED_BYTES) -> float:
    """Bytes autograd moves for a leaf u of (rows, 2w) used as two halves ``u[:, :w]``, ``u[:, w:]`` (the SwiGLU
    row of gpu_components.py: ``F.silu(u[:, :f]) * u[:, f:]``), n = rows · w the elements of one half: each
    half's SliceBackward0 runs ``slice_backward`` (PyTorch aten/src/ATen/native/TensorShape.cpp:
    ``at::zeros(input_sizes)`` then ``grad_input.slice(...).copy_(grad)``), a fill writing 2n elements and a
    copy reading and writing n; the two full-width gradients are then summed before accumulation (autograd's
    InputBuffer::accumulate, torch/csrc/autograd/input_buffer.cpp), reading 2 × 2n and writing 2n:
    2 × (2n + 2n) + 6n = 14 n elements of e bytes. A model that takes the gate and the up projection from two
    linears (transformers' LlamaMLP ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``, torchtitan's FeedForward
    ``w2(F.silu(w1(x)) * w3(x))``) runs none of it."""
    return 14.0 * element_bytes * elements
