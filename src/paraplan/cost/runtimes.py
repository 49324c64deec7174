"""The runtime costs a training stack adds around the model's kernels (issue 33), each a named function
with its formula and the framework source it reads; ``runtime_costs`` gathers a profile's into
``specs.runtime.RuntimeCosts`` (what the step reads: step.constants.system_terms).

- FSDP2 (``fully_shard``; pytorch/pytorch ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`` at
  010ae4a8, PyTorch 2.9 development): the all-gather copy-in and the post-reduce cast and accumulation run
  on the collectives' streams, in series with the collective; the all-gather copy-out and the
  reduce-scatter copy-in run on the compute stream (``foreach_all_gather_copy_out`` waits for the
  all-gather event on the current stream; ``foreach_reduce`` runs ``chunk_cat`` before
  ``reduce_scatter_stream.wait_stream(current_stream)``), so nothing hides them.
- FSDP1 (``FullyShardedDataParallel``; torch/distributed/fsdp/_flat_param.py and _runtime_utils.py, PyTorch 2.x):
  one FlatParameter per wrapped module, gathered in place and viewed by the module's parameters (no copy-in or
  copy-out); the low-precision shard cast before each all-gather, the flat gradient's cast and pre-divide before
  the reduce-scatter and the post-divide, cast and accumulation after it on the post-backward stream; the split's
  backward concatenating the views' gradients on the compute stream. llm-foundry / Composer run it.
- DeepSpeed's PipelineEngine (microsoft/DeepSpeed ``deepspeed/runtime/pipe/engine.py`` at 0050fdad,
  ``pipe/p2p.py``, ``runtime/bf16_optimizer.py`` at 06e39a56): separate blocking send and receive calls,
  the BF16 optimizer's fp32 gradient accumulation after every micro-batch's backward, and the device
  synchronisation of each micro-batch's batch load on the first and last stage (``batch_sync_idle_s``).
- fp8 primary weights gathered in fp8 (NeMo ``fp8_params``, Megatron-Core ``fp8_param_gather``).

Bytes are counted at the plain HBM rate the step uses (``StepInputs.hbm_rate``: bandwidth · efficiency.hbm);
these copies are one kernel each (a foreach copy, ``split_with_sizes_copy``, ``chunk_cat``), so an eager
stack's ``eager_traffic_factor``, which prices the op graph's unfused element-wise ops
(cost.compute.memory_time_s), does not apply to them, as it does not to the optimizer step
(``cost.frameworks.optimizer_step_bytes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from paraplan.cost.elementwise import where
from paraplan.cost.moe_host import sync_drain_s
from paraplan.specs.runtime import RuntimeCosts, StackRuntimeFields

if TYPE_CHECKING:  # a framework profile's spec loads with a profile (catalog.load_framework)
    from paraplan.specs.framework import FrameworkSpec

# bytes per element of the sharded parameters (FSDP1 and FSDP2): fp32, the optimizer's copy, in every profile
# that runs FSDP (torchtitan, llm-foundry / Composer, Trainer / Accelerate: the model's fp32 parameters are
# sharded as they are and a mixed-precision param dtype exists only while gathered); the param dtype p (what
# the all-gather moves and the layer computes with) and the reduce dtype r are the run's (``fsdp_copy_bytes``)
FSDP_SHARD_BYTES = 4.0
# gathers of one layer's parameters per micro-batch: forward, and backward again after the forward resharded
# (fully_shard reshard_after_forward=True, torchtitan's default for every block but the last, which is
# reshard-free only on its own gather)
FSDP_GATHERS_PER_MICROBATCH = 2.0


# the StepInputs fields fsdp_copy_bytes sets
FSDP_COPY_FIELDS = (
    "zero3_compute_copy_bytes",
    "zero3_gather_copy_bytes",
    "zero3_reduce_copy_bytes",
    "zero3_reduce_unsharded_bytes",
)


def fsdp_copy_bytes(fsdp_runtime: str, param_bytes: float, reduce_bytes: float) -> dict[str, float]:
    """The StepInputs fields of the FSDP runtime's copies (``zero3_compute_copy_bytes``,
    ``zero3_gather_copy_bytes``, ``zero3_reduce_copy_bytes``, ``zero3_reduce_unsharded_bytes``) for
    ``fsdp_runtime`` (fsdp1, fsdp2; none: no copies) over fp32 shards (FSDP_SHARD_BYTES), at the run's param
    dtype p = ``param_bytes`` and reduce dtype r = ``reduce_bytes``. The caller (step.constants.runtime_terms)
    gives p the compute copy's bytes (cost.memory.compute_copy_bytes: 2 in mixed precision, 4 in fp32 / tf32)
    and r the bytes of the run's data-parallel gradient reduction (step.constants.grad_reduce_bytes: the kept
    gradient's bytes, or the compute copy's under ``grad_reduce_dtype`` compute), the one rule of both, so the
    copies follow the dtype the reduce-scatter moves. Every FSDP stack reduces an fp32 run in fp32 (r = 4):
    FSDP1 reduces in the param dtype where MixedPrecision names no reduce_dtype and in the original fp32
    where it names neither (``FlatParamHandle._init_param_reduce_dtypes``, torch/distributed/fsdp/_flat_param.py
    at fe03cf69); FSDP2 reduces in reduce_dtype, else in the param dtype the gradient is computed in
    (``FSDPParam.init_dtype_attrs``, torch/distributed/fsdp/_fully_shard/_fsdp_param.py at 010ae4a8);
    Accelerate sets MixedPrecision(param_dtype, reduce_dtype) only when the run's mixed precision is not "no"
    (accelerate v1.10.0 at 5dcd16e7, state.py: ``if self._mixed_precision != "no"``
    fsdp_plugin.set_mixed_precision, utils/dataclasses.py: param_dtype = reduce_dtype = the precision's
    dtype); Composer's PURE preset takes param and reduce dtype from the run's precision, fp32 for precision
    fp32 (mosaicml/composer v0.17.2 at 7e0e40a7, composer/trainer/mosaic_fsdp_utils.py get_mixed_precision,
    _get_torch_dtype); torchtitan's training.mixed_precision_param takes float32 and its mixed_precision_reduce
    is float32 only (pytorch/torchtitan torchtitan/config_manager.py at 820504e)."""
    s, p, r = FSDP_SHARD_BYTES, param_bytes, reduce_bytes
    if fsdp_runtime == "fsdp2":
        return {
            "zero3_compute_copy_bytes": fsdp2_compute_copy_bytes(p, r),
            "zero3_gather_copy_bytes": fsdp2_gather_copy_bytes(s, p),
            "zero3_reduce_copy_bytes": fsdp2_reduce_copy_bytes(s, r),
            "zero3_reduce_unsharded_bytes": 0.0,
        }
    if fsdp_runtime == "fsdp1":
        return {
            "zero3_compute_copy_bytes": fsdp1_compute_copy_bytes(p),
            "zero3_gather_copy_bytes": fsdp1_gather_copy_bytes(s, p),
            "zero3_reduce_copy_bytes": fsdp1_reduce_copy_bytes(s, r),
            "zero3_reduce_unsharded_bytes": fsdp1_reduce_unsharded_bytes(p, r),
        }
    return dict.fromkeys(FSDP_COPY_FIELDS, 0.0)


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


def fsdp1_compute_copy_bytes(param_bytes: float) -> float:
    """HBM bytes per gathered parameter and micro-batch that FSDP1 runs on the compute stream: 2p.

    FSDP1 (``FullyShardedDataParallel``) keeps each wrapped module's parameters in one FlatParameter; the
    all-gather writes straight into the padded unsharded flat buffer and the module's parameters are views into it
    (torch/distributed/fsdp/_flat_param.py, ``FlatParamHandle._use_unsharded_views``: in training forward the views
    are plain tensors "so that autograd flows gradients to the flat parameter"), so there is no copy-in or copy-out.
    The views' gradients reach the flat parameter through the split's backward, which concatenates them into the
    flat gradient (``split_with_sizes`` backward: read p, write p) once per backward, on the compute stream."""
    return 2.0 * param_bytes


def fsdp1_gather_copy_bytes(shard_bytes: float, param_bytes: float) -> float:
    """HBM bytes per shard element of one FSDP1 all-gather, on its streams in series with it: s + p where a
    mixed-precision param dtype is set (s ≠ p), else 0.

    ``FlatParamHandle.pre_unshard`` → ``_use_low_precision_shard`` copies the full-precision local shard into the
    low-precision ``_mp_shard`` (read s, write p) on the pre-unshard stream, which the unshard stream waits for
    before ``all_gather_into_tensor`` gathers the shards into the unsharded flat parameter in place
    (_flat_param.py, _runtime_utils.py ``_unshard``)."""
    return shard_bytes + param_bytes if shard_bytes != param_bytes else 0.0


def fsdp1_reduce_unsharded_bytes(param_bytes: float, reduce_bytes: float) -> float:
    """HBM bytes per gathered parameter and micro-batch that FSDP1 moves over the unsharded gradient on the
    post-backward stream before its reduce-scatter: (p + r if p ≠ r) + 2r.

    ``_post_backward_hook`` casts the flat gradient to the reduce dtype where it differs (read p, write r), and
    ``_reduce_grad`` divides it in place by the pre-divide factor (``_div_if_needed(padded_unsharded_grad,
    _gradient_predivide_factor)``, a factor > 1 for any world size ≥ 2: read r, write r) before
    ``reduce_scatter_tensor`` (torch/distributed/fsdp/_runtime_utils.py, PyTorch 2.x)."""
    cast = param_bytes + reduce_bytes if param_bytes != reduce_bytes else 0.0
    return cast + 2.0 * reduce_bytes


def fsdp1_reduce_copy_bytes(shard_bytes: float, reduce_bytes: float) -> float:
    """HBM bytes per shard element after one FSDP1 reduce-scatter, on the post-backward stream: 2r + (r + s if
    r ≠ s) + 3s.

    ``_reduce_grad`` divides the sharded gradient by the post-divide factor (read r, write r), then
    ``_accumulate_sharded_grad`` casts it to the sharded parameter's dtype (``_cast_grad_to_param_dtype``: read r,
    write s) and adds it into ``_saved_grad_shard`` (read s twice, write s; the first micro-batch assigns, counted
    on every micro-batch as FSDP2's, ``fsdp2_reduce_copy_bytes``) (_runtime_utils.py, PyTorch 2.x)."""
    return 2.0 * reduce_bytes + fsdp2_reduce_copy_bytes(shard_bytes, reduce_bytes)


# DeepSpeed PipelineEngine: pipe/p2p.py send / recv call torch.distributed.send / recv (blocking) one tensor
# at a time, and the TrainSchedule issues SendActivation, RecvActivation, SendGrad and RecvGrad as separate
# instructions (pipe/schedule.py), where Megatron-LM pairs each send with a receive in one batched exchange.
DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE = (
    2.0  # also the per-stage path's step.engines.ENGINES["deepspeed"]
)


# DeepSpeed PipelineEngine: one device synchronisation per micro-batch on the stages that load a batch
# (batch_sync_idle_s).
DEEPSPEED_PIPE_BATCH_SYNCS = 1.0


def batch_sync_idle_s(syncs, sync_latency_s, launch_s):
    """GPU seconds idle per micro-batch on a stage that loads a batch: sync_drain_s(n, t_sync) + n·t_launch =
    n·(t_sync + t_launch), n the synchronisations (DEEPSPEED_PIPE_BATCH_SYNCS), t_sync the device-to-host round
    trip (``host_sync_latency_s``: .item() of one element on an idle GPU, device and driver latency, not scaled
    by the host CPU's speed), t_launch one kernel issue (``host_launch_s / host_speed``, host time). A
    synchronisation drains the stream: the host waits for the GPU, the round trip passes with the GPU idle,
    which then waits again for the host to issue the next kernel, as cost.host.sync_terms prices a
    synchronisation inside a block (the same drain, cost.moe_host.sync_drain_s). Floats or arrays.

    Source: DeepSpeed's PipelineEngine TrainSchedule runs LoadMicroBatch before every ForwardPass on the first
    stage (inputs) and the last (labels) (deepspeed/runtime/pipe/schedule.py at 0050fdad);
    _exec_load_micro_batch calls the batch function, which in Megatron-DeepSpeed (pretrain_gpt.py
    get_batch_pipe) broadcasts the batch over the tensor-parallel group with Megatron-LM's broadcast_data, whose
    _build_key_size_numel_dictionaries reads the broadcast sizes back to the host (``sizes_cpu =
    sizes_cuda.cpu()``, mpu/data.py): one synchronisation per micro-batch on those
    stages. The engine's other per-instruction host work (_exec_schedule's dispatch, the handlers' Python) runs
    ahead of the GPU: p2p.send / recv are NCCL calls that order streams, not the host, and
    ThroughputTimer.start's synchronize is skipped (global_step_count stays below start_step, the pipeline
    engine never calling tput_timer.stop)."""
    return sync_drain_s(syncs, sync_latency_s) + syncs * launch_s


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


def bf16_optimizer_norm_bytes() -> float:
    """HBM bytes per parameter that DeepSpeed's BF16_Optimizer's gradient norm reads each step: 4, its fp32
    gradient read once.

    ``BF16_Optimizer.step`` computes the global norm over ``get_grads_for_norm()``, the views of the whole
    flat fp32 gradient (``fp32_groups_gradients``, kept unsharded: ``fp32_groups_gradients_flat =
    zeros_like(bf16_groups_flat)``), not only the rank's partition; ``get_global_norm_of_tensors`` runs
    ``t.data.float().norm(2)`` per tensor (a no-op cast of fp32, one read of 4 B; runtime/bf16_optimizer.py
    step 279-312 and get_grads_for_norm 375-415, runtime/utils.py 873-935 at deepspeedai/DeepSpeed
    0050fdad; the same reads at 56c52238, the April-2022 merge, step 337-365, utils.py 895-936). Tensors
    replicated over tensor-parallel ranks are skipped on TP ranks other than 0 (rank 0 reads them all).
    Its clipping (``clip_tensors_by_global_norm``, 8 B: read and write) scales the gradients only where
    the norm exceeds ``gradient_clipping`` (``if clip_coef < 1``, utils.py 950), a data-dependent pass
    left out as Megatron's clip is from ``optimizer_step_bytes``."""
    return 4.0


def param_grad_accumulation_bytes(grad_bytes: float) -> float:
    """HBM bytes per parameter that autograd moves adding one micro-batch's gradient into the ``param.grad``
    held across micro-batches, kept in a dtype of ``grad_bytes`` bytes: 3·g (read the held and the fresh
    gradient, write the sum). PyTorch's AccumulateGrad adds a fresh gradient into a defined ``variable.grad``
    in place (``variable_grad += new_grad``, torch/csrc/autograd/functions/accumulate_grad.h) when no
    optimizer hook takes it first: 6 B for a 2-byte (fp16 / bf16) gradient, 12 B for fp32."""
    return 3.0 * grad_bytes


def separate_grad_accum_bytes() -> float:
    """HBM bytes per parameter that DeepSpeed's ZeRO stage-1 optimizer moves after each micro-batch's
    backward where it keeps an fp32 gradient accumulator beside a 2-byte model (``gradient_accumulation_dtype``
    fp32 differing from the model dtype, gradients not partitioned: ``use_grad_accum_attribute``):
    ``fill_grad_accum_attribute`` runs ``param.grad_accum.add_(param.grad.to(fp32))`` and sets ``param.grad``
    to None ("Only for Stage 1, Mode 2", DeepSpeedZeroOptimizer.backward, deepspeed/runtime/zero/
    stage_1_and_2.py at v0.16.4 e2dc3eeb): the cast and the add of ``bf16_optimizer_accumulation_bytes``,
    2 + 4 + 3·4 = 18."""
    return bf16_optimizer_accumulation_bytes()


def separate_grad_accum_first_bytes() -> float:
    """HBM bytes per parameter ``fill_grad_accum_attribute`` moves on the first micro-batch of a step, where
    ``param.grad_accum`` is None: ``param.grad_accum = param.grad.to(fp32)``, the cast alone (read 2,
    write 4 = 6), no add (deepspeed/runtime/zero/stage_1_and_2.py at 0050fdad, line 860;
    DeepSpeedZeroOptimizer.zero_grad sets ``p.grad_accum = None`` after each step, line 1623). So a step
    of m micro-batches moves 6 + 18·(m − 1) bytes per parameter (``separate_grad_accum_bytes`` the others')."""
    return 2.0 + 4.0


def zero2_bucket_copy_bytes(grad_bytes: float) -> float:
    """HBM bytes per parameter that DeepSpeed's ZeRO stage-2 optimizer moves after each micro-batch's
    backward copying its gradient (kept in a dtype of ``grad_bytes`` bytes, the model's) into the
    contiguous IPG bucket: 2·g (read, write). ``reduce_independent_p_g_buckets_and_remove_grads``, from
    each gradient's hook on the compute stream (``reduce_ready_partitions_and_remove_grads``: every
    micro-batch where ``partition_gradients``), runs ``new_grad_tensor.copy_(grad_reduc.view(-1))`` into
    ``ipg_buffer`` (model dtype) under ``contiguous_gradients`` (default True, zero/config.py), for every
    parameter of at most ``reduce_bucket_size`` elements (deepspeedai/DeepSpeed
    deepspeed/runtime/zero/stage_1_and_2.py 922-949 at 0050fdad, 939-966 at v0.16.4 e2dc3eeb)."""
    return 2.0 * grad_bytes


def zero2_partition_bytes(grad_bytes: float) -> float:
    """HBM bytes per parameter of the GPU's gradient partition that DeepSpeed's ZeRO stage-2 optimizer
    moves after a micro-batch's reduction, but the step's first: 2·g + 3·g = 5·g. ``reduce_ipg_grads``
    copies each reduced gradient of the partition out of the IPG bucket into a fresh model-dtype
    ``grads_in_partition`` (``copy_grads_in_partition``: read, write), and the epilogue
    (``independent_gradient_partition_epilogue``, every micro-batch: DeepSpeedEngine.allreduce_gradients
    calls it where ``zero_optimization_partition_gradients``) adds them into ``averaged_gradients``
    (``accumulated_grad.add_(new_avg_grad)``: read two, write one), on the compute stream (stage_1_and_2.py
    747-790, 1315-1349, 1351-1402 at 0050fdad; engine.py 1914-1928). With overlap_comm the partition copy
    runs on ``reduction_stream`` (1368-1369); priced on the compute stream alike, a simplification. None
    of the two runs where the optimizer is offloaded (step.constants.offloaded_partition_accumulation)."""
    return 2.0 * grad_bytes + 3.0 * grad_bytes


def zero2_partition_first_bytes(grad_bytes: float) -> float:
    """HBM bytes per partition parameter of ZeRO stage 2 on the step's first micro-batch: 2·g, the copy into
    ``grads_in_partition`` alone. ``averaged_gradients[i]`` is None after each step (stage_1_and_2.py 1889 at
    0050fdad), so the epilogue takes ``get_flat_partition``'s views of the gradients (no copy where the
    dtypes agree, ``return_tensor_list=True``) instead of adding (``zero2_partition_bytes`` the others')."""
    return 2.0 * grad_bytes


def accumulation_bytes_per_microbatch(pass_bytes, first_saving_bytes, microbatches):
    """Mean HBM bytes per parameter and micro-batch of a gradient accumulation over a step of m =
    ``microbatches`` micro-batches, each moving ``pass_bytes`` except the first, which moves
    ``first_saving_bytes`` fewer: g − s/m, the step's m·g − s spread over its micro-batches (the
    composition prices the accumulation per micro-batch: step.compose.runtime_work). Where gradients
    are set to None after each step, the first micro-batch's pass is no add: DeepSpeed's FP16 optimizers
    (runtime/fp16/fused_optimizer.py zero_grad(set_to_none=True), line 135 at 0050fdad), DeepSpeedEngine's
    own zero_grad (``param.grad = None``, engine.py line 2054) and the ZeRO-1 optimizer's (stage_1_and_2.py
    line 1623) leave ``param.grad`` undefined, and PyTorch's AccumulateGrad then takes the fresh gradient
    as ``variable.grad`` without a copy or an add (torch/csrc/autograd/functions/accumulate_grad.h,
    accumulateGrad: "if (!variable_grad.defined())", stealing ``new_grad``): s = the whole pass
    (``param_grad_accumulation_bytes``); ``fill_grad_accum_attribute`` casts only
    (s = 18 − ``separate_grad_accum_first_bytes``). Floats or arrays."""
    return pass_bytes - first_saving_bytes / microbatches


def fp16_param_grad_accumulation_bytes() -> float:
    """HBM bytes per parameter that autograd moves adding one micro-batch's fp16 gradient into the fp16
    ``param.grad`` held across micro-batches: 2 + 2 + 2 = 6 (read the held and the fresh gradient, write the
    sum; ``param_grad_accumulation_bytes`` of a 2-byte gradient).

    DeepSpeed's PipelineEngine under fp16 (AMP's stack: DachengLi1/AMP @ 72eeea4, ``DeepSpeed/deepspeed/runtime``)
    converts the module with ``module.half()`` (runtime/engine.py ``_configure_distributed_model``), so its FP16
    optimizer keeps fp16 ``param.grad`` (runtime/fp16/fused_optimizer.py), into which autograd's AccumulateGrad
    adds each micro-batch's gradient in place; the engine calls backward once per micro-batch and reduces only
    after the last (pipe/engine.py ``_exec_backward_pass``, ``_exec_reduce_grads``)."""
    return param_grad_accumulation_bytes(2.0)


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


def grad_accumulation_s(params, bytes_per_param, hbm_rate):
    """Seconds one micro-batch's backward spends adding its fresh gradients into the gradients held across
    micro-batches, the one rule of every path (the uniform estimator and search through StepInputs, the
    per-stage plans through their engine, step.engines): P·g / (B_HBM·η_HBM), g the stack's bytes per
    parameter (GRAD_ACCUMULATION_BYTES), at the plain element-wise HBM rate like every runtime copy here
    (``runtime_copy_s``, module docstring: one in-place kernel per tensor, not the op graph's unfused
    element-wise ops, so no eager traffic factor). Floats or arrays."""
    return runtime_copy_s(params, bytes_per_param, hbm_rate)


# The runtime's overlaps of a collective with independent kernels, void under synchronous kernel launches
# (CUDA_LAUNCH_BLOCKING=1, efficiency.launch_blocking): every launch, an NCCL collective's too, returns only once
# its kernel has completed (CUDA C++ Programming Guide, "Asynchronous Concurrent Execution"), so no kernel runs
# beside another: the K/V ring's transfers are waited before the attention step, the interleaved schedule's
# isend / irecv before the next chunk, and the async TP backward's all-reduce / reduce-scatter before the wgrad
# GEMM is issued (read where the backward TP collectives are placed, step.block_sums.tp_backward_hides, since
# tp_backward_async False also stands for PyTorch DTensor's TP there).
SYNCHRONOUS_LAUNCH_OVERLAPS = {"cp_ring_overlap": False, "p2p_overlap": False}


def runtime_costs(framework: FrameworkSpec) -> RuntimeCosts:
    """The profile's runtime terms (module docstring); bytes at the plain HBM rate."""
    # the mechanisms the profile states as the runtime keeps them (specs.runtime.StackRuntimeFields)
    fields: dict = {name: getattr(framework, name) for name in StackRuntimeFields.model_fields}
    fields |= {
        "fp8_recipe": "delayed" if framework.fp8_recipe == "none" else framework.fp8_recipe,
        "ub_fp8_pipeline": framework.tp_overlap_fp8_reduce_scatter == "pipeline",
        "p2p_overlap": framework.overlap_p2p_comm and framework.pipeline_engine == "megatron",
        "pipeline_engine": framework.pipeline_engine,
    }
    if framework.pipeline_engine == "deepspeed":
        fields["p2p_transfers_per_exchange"] = DEEPSPEED_PIPE_TRANSFERS_PER_EXCHANGE
        fields["batch_syncs"] = DEEPSPEED_PIPE_BATCH_SYNCS
    if framework.launch_blocking:
        fields |= SYNCHRONOUS_LAUNCH_OVERLAPS
    fields["grad_accumulation_bytes"] = GRAD_ACCUMULATION_BYTES[framework.grad_accumulation]
    fields["lazy_gradients"] = framework.gradient_allocation == "backward"
    return RuntimeCosts(**fields)


def tp_layout_copy_bytes(collective_bytes: float) -> float:
    """HBM bytes of the layout copy around one sequence-parallel collective of DTensor TP: 2·S, S the bytes of the
    whole (gathered) tensor the collective produces or reduces: read once, written once.

    DTensor's ``Shard(1)`` ↔ ``Replicate`` / ``Partial`` redistributes (torchtitan's SequenceParallel norms,
    PrepareModuleInput and RowwiseParallel(output_layouts=Shard(1)); torch/distributed/tensor/placement_types.py
    ``Shard._to_replicate_tensor`` / ``_reduce_shard_tensor``) call the functional collectives with gather or
    scatter dim 1, and ``all_gather_tensor`` gathers along dim 0 into a new buffer, then
    ``torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)``, while ``reduce_scatter_tensor`` first
    runs ``torch.cat(torch.chunk(self, group_size, dim=scatter_dim))`` to put the scatter dim in front
    (pytorch/pytorch torch/distributed/_functional_collectives.py): one copy of the whole tensor on the compute
    stream, after the all-gather's wait or before the reduce-scatter, in series with it. AsyncTP's fused
    all-gather-matmul and matmul-reduce-scatter (torch/distributed/_symmetric_memory ``_fused_all_gather_matmul_impl``:
    "if A_shard.movedim(gather_dim, 0) is contiguous, no extra copy") write the shards in place instead."""
    return 2.0 * collective_bytes


# bytes per fp32 element of the foreach kernels below: an in-place unary pass reads and writes 4 + 4, a
# binary one reads 4 + 4 and writes 4, a ternary one reads 12 and writes 4
_UNARY, _BINARY, _TERNARY = 8.0, 12.0, 16.0


def clip_grad_norm_bytes() -> float:
    """HBM bytes per fp32 gradient of torch's foreach gradient clipping: 4 + 8 = 12.

    torchtitan clips every step (training.max_norm 1.0; train.py calls its clip_grad_norm_ with foreach=True,
    torchtitan/utils.py at 9dec370, distributed/utils.py at 820504e): ``torch.nn.utils.get_total_norm``'s
    ``_foreach_norm`` reads each gradient (4), then ``clip_grads_with_norm_`` scales it in place by the clamped
    coefficient, ``_foreach_mul_`` (read 4, write 4)."""
    return 4.0 + _UNARY


def fused_adamw_clip_bytes() -> float:
    """HBM bytes per fp32 parameter of a step of ``torch.optim.AdamW(fused=True)`` after foreach clipping:
    16 + 12 + 12 = 40. The fused kernel reads parameter, gradient, exp_avg and exp_avg_sq and writes parameter,
    exp_avg and exp_avg_sq (aten/src/ATen/native/cuda/fused_adamw_impl.cu); ``clip_grad_norm_bytes``.
    torchtitan's optimizer.implementation default 'fused' (torchtitan/config_manager.py at 820504e)."""
    return 16.0 + 12.0 + clip_grad_norm_bytes()


def foreach_adamw_clip_bytes() -> float:
    """HBM bytes per fp32 parameter of a step of ``torch.optim.AdamW(foreach=True)`` after foreach clipping:
    8 + 12 + 8 + 16 + 8 + 8 + 8 + 16 + 12 = 96.

    ``_multi_tensor_adamw`` (torch/optim/adamw.py, PyTorch 2.x, not capturable) runs one foreach kernel per
    line: the decoupled weight decay ``_foreach_mul_(params)`` (unary, 8); ``_foreach_lerp_(exp_avgs, grads)``
    (binary, 12); ``_foreach_mul_(exp_avg_sqs, beta2)`` (8); ``_foreach_addcmul_(exp_avg_sqs, grads, grads)``
    (ternary, 16); ``exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs)`` (read 4, write 4: 8);
    ``_foreach_div_`` and ``_foreach_add_(eps)`` on it (8 each); ``_foreach_addcdiv_(params, exp_avgs,
    exp_avg_sq_sqrt)`` (ternary, 16); then ``clip_grad_norm_bytes``. torchtitan at 9dec370 builds
    AdamW with ``foreach = not optimizer.fused`` and --optimizer.fused defaults to false
    (torchtitan/optimizer.py, config_manager.py)."""
    adam = _UNARY + _BINARY + _UNARY + _TERNARY + 3 * _UNARY + _TERNARY
    return adam + clip_grad_norm_bytes()


def bf16_optimizer_clear_bytes() -> float:
    """HBM bytes per parameter that DeepSpeed's BF16_Optimizer writes each step clearing its gradients: 4,
    its fp32 gradient zeroed once.

    ``BF16_Optimizer.step`` ends with ``clear_hp_grads`` (runtime/bf16_optimizer.py 312 and 436-440 at
    deepspeedai/DeepSpeed 0050fdad; 315 and 431-436 at 56c52238, the April-2022 merge), which runs
    ``flat_gradients.zero_()`` over every ``fp32_groups_gradients_flat`` buffer, the whole unsharded fp32
    gradient (``torch.zeros_like(bf16_groups_flat[i], dtype=grad_acc_dtype)``, 147-149), not only the
    rank's partition: a memset, one write of 4 B per parameter."""
    return 4.0


def deepspeed_allreduce_copy_bytes(kept_bytes, reduce_bytes, flat):
    """HBM bytes per parameter that DeepSpeed's fallback all-reduce moves around the collective, for
    gradients kept in k = ``kept_bytes`` and reduced in c = ``reduce_bytes`` bytes: 2·c, plus 2·k + 2·c
    where c ≠ k, plus 4·k where the buckets hold several tensors (``flat`` false). Floats or arrays.

    ``buffered_allreduce_fallback`` → ``allreduce_no_retain`` → ``allreduce_and_copy`` → ``allreduce_bucket``
    (deepspeedai/DeepSpeed deepspeed/runtime/engine.py 2336-2379 at 0050fdad): ``self.flatten(bucket)``
    (torch's flatten_dense_tensors: a cat, read k and write k, of several tensors; a view of a single one),
    the cast to ``communication_data_type`` where it differs (read k, write c), the average after the
    all-reduce (postscale_gradients, the default: ``tensor_to_allreduce.mul_(predivide / dp_world_size)``,
    read c, write c), the cast back (``tensor.copy_(tensor_to_allreduce)``: read c, write k), and
    ``buf.copy_(synced)`` of each gradient from the unflattened result (read k, write k; none where
    ``synced`` is the gradient itself, PyTorch's copy_ returning early on the same data). The
    BF16_Optimizer hands it one flat fp32 buffer per parameter group (``get_grads_for_reduction``,
    ``non_expert_gradients``, runtime/bf16_optimizer.py 147-153, 369-372), priced flat; the other
    optimizers their per-parameter ``param.grad`` (``_get_gradients_for_reduction``, engine.py 2381).
    Flat is a simplification (a known limit, docs/model.md): ``allreduce_no_retain`` (2368-2379) packs
    tensors into one bucket until it holds more than 5e8 elements, so the BF16_Optimizer's group buffers
    share a bucket, flattened and copied back (4·k more), wherever a group before the last holds ≤ 5e8
    elements on the GPU (Megatron-DeepSpeed's weight-decay halves and no-decay group)."""
    cast = where(reduce_bytes != kept_bytes, 2.0 * kept_bytes + 2.0 * reduce_bytes, 0.0)
    return 2.0 * reduce_bytes + cast + where(flat, 0.0, 4.0 * kept_bytes)


def runtime_copy_s(elements, bytes_per_element, hbm_rate):
    """Seconds of a runtime copy or cast over ``elements`` elements moving ``bytes_per_element`` HBM bytes each,
    at the achieved element-wise HBM rate: E·b / (B_HBM·η_HBM) (a memory-bound kernel; floats or arrays)."""
    return elements * bytes_per_element / hbm_rate
