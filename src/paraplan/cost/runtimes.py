"""The runtime costs a training stack adds around the model's kernels (issue 33), each a named function
with its formula and the framework source it reads; ``runtime_costs`` gathers a profile's into
``specs.runtime.RuntimeCosts`` (what the step reads: step.constants.system_terms).

- FSDP2 (``fully_shard``; pytorch/pytorch ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`` at
  010ae4a8, PyTorch 2.9 development): the all-gather copy-in and the post-reduce cast and accumulation run
  on the collectives' streams, in series with the collective; the all-gather copy-out and the
  reduce-scatter copy-in run on the compute stream (``foreach_all_gather_copy_out`` waits for the
  all-gather event on the current stream; ``foreach_reduce`` runs ``chunk_cat`` before
  ``reduce_scatter_stream.wait_stream(current_stream)``), so nothing hides them.
- DeepSpeed's PipelineEngine (microsoft/DeepSpeed ``deepspeed/runtime/pipe/engine.py`` at 0050fdad,
  ``pipe/p2p.py``, ``runtime/bf16_optimizer.py`` at 06e39a56): separate blocking send and receive calls,
  and the BF16 optimizer's fp32 gradient accumulation after every micro-batch's backward.
- fp8 primary weights gathered in fp8 (NeMo ``fp8_params``, Megatron-Core ``fp8_param_gather``).

Bytes are counted at the plain HBM rate the step uses (``StepInputs.hbm_rate``: bandwidth · efficiency.hbm);
these copies are one kernel each (a foreach copy, ``split_with_sizes_copy``, ``chunk_cat``), so an eager
stack's ``eager_traffic_factor``, which prices the op graph's unfused element-wise ops
(cost.compute.memory_time_s), does not apply to them, as it does not to the optimizer step
(``cost.frameworks.optimizer_step_bytes``).
"""

from __future__ import annotations

from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.runtime import RuntimeCosts

# bytes per element: FSDP2's sharded parameters stay in fp32 under MixedPrecisionPolicy (the optimizer's
# copy), param_dtype bf16 is what the all-gather moves and the layer computes with (torchtitan
# training.mixed_precision_param default bfloat16)
FSDP_SHARD_BYTES = 4.0
FSDP_PARAM_BYTES = 2.0
# gathers of one layer's parameters per micro-batch: forward, and backward again after the forward resharded
# (fully_shard reshard_after_forward=True, torchtitan's default for every block but the last, which is
# reshard-free only on its own gather)
FSDP_GATHERS_PER_MICROBATCH = 2.0
GRAD_DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0}


def fsdp2_compute_copy_bytes(param_bytes: float, reduce_bytes: float) -> float:
    """HBM bytes per gathered parameter and micro-batch that FSDP2 runs on the compute stream:
    G·2p + (p + r), with G = 2 gathers, p the param dtype's bytes and r the reduce dtype's.

    - copy-out (``foreach_all_gather_copy_out`` → ``split_with_sizes_copy``): after each all-gather the
      gathered flat buffer is split into every parameter's unsharded tensor, read p and write p per element;
    - reduce-scatter copy-in (``foreach_reduce`` → ``foreach_reduce_scatter_copy_in`` → ``chunk_cat``): the
      unsharded gradients (param dtype) are concatenated into the reduce-scatter input in the reduce dtype
      (a widening cast bf16 → fp32 done by ``_chunk_cat`` itself): read p, write r.
    Both on the current stream (_fsdp_collectives.py at 010ae4a8), so exposed."""
    return FSDP_GATHERS_PER_MICROBATCH * 2.0 * param_bytes + param_bytes + reduce_bytes


def fsdp2_gather_copy_bytes(shard_bytes: float, param_bytes: float) -> float:
    """HBM bytes per shard element of one all-gather's copy-in on the all-gather copy-in stream:
    (s + p if s ≠ p) + 2p.

    ``_get_param_all_gather_inputs`` casts the sharded parameters (s bytes) into one flat buffer of the param
    dtype with ``torch._foreach_copy_`` (read s, write p) where a mixed-precision param dtype is set, then
    ``all_gather_copy_in`` copies the splits into this rank's slice of the all-gather output (read p, write p)
    (_fsdp_collectives.py at 010ae4a8). The all-gather waits for it (``all_gather_stream.wait_stream``)."""
    cast = shard_bytes + param_bytes if shard_bytes != param_bytes else 0.0
    return cast + 2.0 * param_bytes


def fsdp2_reduce_copy_bytes(shard_bytes: float, reduce_bytes: float) -> float:
    """HBM bytes per shard element after one reduce-scatter, on the reduce-scatter stream:
    (r + s if r ≠ s) + 3s.

    ``foreach_reduce`` casts the reduce-scatter output to the sharded parameter's dtype
    (``_to_dtype_if_needed``: read r, write s) and adds it into the sharded gradient
    (``sharded_param.grad._local_tensor += new_sharded_grad``: read s twice, write s) (_fsdp_collectives.py at
    010ae4a8). The addition runs from the second micro-batch of a step on (the first assigns); it is counted
    on every micro-batch, at most 3s per shard element and step too many, a few hundredths of the reduce-scatter
    of that element."""
    cast = reduce_bytes + shard_bytes if reduce_bytes != shard_bytes else 0.0
    return cast + 3.0 * shard_bytes


# DeepSpeed PipelineEngine: pipe/p2p.py send / recv call torch.distributed.send / recv (blocking) one tensor
# at a time, and the TrainSchedule issues SendActivation, RecvActivation, SendGrad and RecvGrad as separate
# instructions (pipe/schedule.py), where Megatron-LM pairs each send with a receive in one batched exchange.
DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE = (
    2.0  # also the per-stage path's step.engines.ENGINES["deepspeed"]
)


def bf16_optimizer_accumulation_bytes() -> float:
    """HBM bytes per parameter that DeepSpeed's BF16 optimizer moves after each micro-batch's backward on the
    PipelineEngine: 2 + 4 + 3·4 = 18.

    ``PipelineEngine._exec_backward_pass`` calls ``optimizer.update_hp_grads`` after every backward ("BF16
    Optimizer is hardcoded for fp32 gradient accumulation", pipe/engine.py at 0050fdad); ``update_hp_grads``
    runs ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))`` per parameter (runtime/bf16_optimizer.py at
    06e39a56): the cast materialises an fp32 copy of the bf16 gradient (read 2, write 4) and the add reads it
    and the fp32 gradient and writes the sum (read 4 + 4, write 4). ``clear_lp_grads`` sets the bf16 gradients
    to None before the next backward, so autograd writes them fresh (no bf16 accumulation)."""
    return 2.0 + 4.0 + 3.0 * 4.0


def fp16_param_grad_accumulation_bytes() -> float:
    """HBM bytes per parameter that autograd moves adding one micro-batch's fp16 gradient into the fp16
    ``param.grad`` held across micro-batches: 2 + 2 + 2 = 6 (read the held and the fresh gradient, write the sum).

    DeepSpeed's PipelineEngine under fp16 (AMP's stack: DachengLi1/AMP @ 72eeea4, ``DeepSpeed/deepspeed/runtime``)
    converts the module with ``module.half()`` (runtime/engine.py ``_configure_distributed_model``), so its FP16
    optimizer keeps fp16 ``param.grad`` (runtime/fp16/fused_optimizer.py), into which autograd's AccumulateGrad
    adds each micro-batch's gradient in place; the engine calls backward once per micro-batch and reduces only
    after the last (pipe/engine.py ``_exec_backward_pass``, ``_exec_reduce_grads``)."""
    return 2.0 + 2.0 + 2.0


# How a stack sums gradients over micro-batches → HBM bytes per parameter and micro-batch (``grad_accumulation_s``):
# - fused: Megatron-LM's gradient_accumulation_fusion, the wgrad GEMM accumulates into main_grad (beta = 1), and
#   every stack whose gradient accumulation is no pass of its own (specs.framework.grad_accumulation "fused");
# - fp16_param_grad: DeepSpeed's PipelineEngine with its FP16 optimizer (``fp16_param_grad_accumulation_bytes``);
# - bf16_optimizer: DeepSpeed's PipelineEngine with its BF16 optimizer (``bf16_optimizer_accumulation_bytes``).
GRAD_ACCUMULATION_BYTES = {
    "fused": 0.0,
    "fp16_param_grad": fp16_param_grad_accumulation_bytes(),
    "bf16_optimizer": bf16_optimizer_accumulation_bytes(),
}


def deepspeed_pipe_accumulation(dtype: str) -> str:
    """How DeepSpeed's PipelineEngine accumulates gradients (a GRAD_ACCUMULATION_BYTES key) for a run of
    ``dtype``: fp16 runs its FP16 optimizer (fp16 param.grad), every other mixed-precision dtype its BF16
    optimizer, which "is hardcoded for fp32 gradient accumulation" (pipe/engine.py at 0050fdad)."""
    return "fp16_param_grad" if dtype == "fp16" else "bf16_optimizer"


def grad_accumulation_s(params, bytes_per_param, hbm_rate):
    """Seconds one micro-batch's backward spends adding its fresh gradients into the gradients held across
    micro-batches, the one rule of every path (the uniform estimator and search through StepInputs, the
    per-stage plans through their engine, step.engines): P·g / (B_HBM·η_HBM), g the stack's bytes per
    parameter (GRAD_ACCUMULATION_BYTES), at the plain element-wise HBM rate like every runtime copy here
    (``runtime_copy_s``, module docstring: one in-place kernel per tensor, not the op graph's unfused
    element-wise ops, so no eager traffic factor). Floats or arrays."""
    return runtime_copy_s(params, bytes_per_param, hbm_rate)


def runtime_costs(framework: FrameworkSpec) -> RuntimeCosts:
    """The profile's runtime terms (module docstring); bytes at the plain HBM rate."""
    fields: dict = {
        "fp8_param_gather": framework.fp8_param_gather,
        "p2p_overlap": framework.overlap_p2p_comm and framework.pipeline_engine == "megatron",
    }
    if framework.fsdp_runtime == "fsdp2":
        reduce = GRAD_DTYPE_BYTES[framework.grad_dtype]
        fields.update(
            zero3_compute_copy_bytes=fsdp2_compute_copy_bytes(FSDP_PARAM_BYTES, reduce),
            zero3_gather_copy_bytes=fsdp2_gather_copy_bytes(FSDP_SHARD_BYTES, FSDP_PARAM_BYTES),
            zero3_reduce_copy_bytes=fsdp2_reduce_copy_bytes(FSDP_SHARD_BYTES, reduce),
        )
    if framework.pipeline_engine == "deepspeed":
        fields["p2p_transfers_per_exchange"] = DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE
    fields["grad_accumulation_bytes"] = GRAD_ACCUMULATION_BYTES[framework.grad_accumulation]
    fields["lazy_gradients"] = framework.gradient_allocation == "backward"
    fields["fp32_master"] = framework.optimizer_state == "fp32_master"
    return RuntimeCosts(**fields)


def runtime_copy_s(elements, bytes_per_element, hbm_rate):
    """Seconds of a runtime copy or cast over ``elements`` elements moving ``bytes_per_element`` HBM bytes each,
    at the achieved element-wise HBM rate: E·b / (B_HBM·η_HBM) (a memory-bound kernel; floats or arrays)."""
    return elements * bytes_per_element / hbm_rate
