"""Memory per GPU: weights, gradients, optimizer state, activations, working buffers.

Mixed-precision Adam byte counts (Rajbhandari et al. 2020, ZeRO, §3.1, with Megatron-LM's fp32
main gradients, Korthikanti et al. 2022 Fig. 1 uses the same 18 bytes/parameter):

| dtype          | weights | gradients | optimizer state                     | total |
|----------------|---------|-----------|-------------------------------------|-------|
| fp16/bf16/fp8/fp4 | 2    | 4 (fp32)  | 12 (fp32 master, Adam m and v)      | 18    |
| fp32, tf32     | 4       | 4         | 8 (Adam m and v)                    | 16    |
| bf16 compute, fp32 parameters (MaxText, FSDP2) | 4 | 4 (any reduce dtype) | 8 (Adam m and v; the parameters are the master) | 16 |
| bf16, Megatron-Core precision-aware optimizer | 2 | 4 | 8 (fp32 master, bf16 m and v) or 6 (master remainders) | 14 / 12 |

ZeRO shards over the data-parallel group: stage 1 (= Megatron's distributed optimizer) the
optimizer state, stage 2 also the gradients, stage 3 also the weights (ZeRO §5).

Activations generalise Korthikanti et al. 2022 §4 (their Eq. 1-5: s·b·h·(34 + 5·a·s/h) bytes per
layer without parallelism) to GQA (separate q / kv widths), SwiGLU (three f-wide tensors instead of
two), models without dropout (no masks), fused flash attention (no score matrix; keeps the
softmax log-sum-exp) and context parallelism (s/c tokens per GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paraplan.cost.elementwise import where
from paraplan.graph.eager_modules import composite, gelu_new, rmsnorm_upcast
from paraplan.graph.losses import FP32, loss_impl
from paraplan.graph.megatron_softmax import scores_family
from paraplan.graph.mla import attention_output_bytes
from paraplan.graph.ops import activation_kernel
from paraplan.graph.tp_collectives import gathered_kv_bytes
from paraplan.graph.transformer import ACTIVATION_BYTES, LayerShape, mlp_intermediate_bytes
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import QUANTISED_INPUT_BYTES


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each training-state component before ZeRO sharding."""

    weights: float
    gradients: float
    optimizer: float


GRAD_BYTES = {"fp32": 4.0, "bf16": 2.0}  # bytes per gradient element by gradient dtype

# Megatron-Core's precision-aware optimizer (--use-precision-aware-optimizer, distributed optimizer and
# Transformer Engine's FusedAdam only; megatron/core/optimizer/optimizer_config.py at core_v0.14.0:
# use_precision_aware_optimizer, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype, store_param_remainders):
# optimizer_state -> (master, exp_avg, exp_avg_sq) bytes per parameter. bf16_moments: fp32 master,
# --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 with store_param_remainders off (or TE < 2.1, where the config
# turns it off); bf16_moments_remainders: the same moments with store_param_remainders (its default, TE >= 2.1,
# bf16 parameters): the fp32 master kept as the 16 low bits the bf16 parameter does not hold.
PRECISION_AWARE_STATES = {
    "bf16_moments": (4.0, 2.0, 2.0),
    "bf16_moments_remainders": (2.0, 2.0, 2.0),
}


def state_bytes_per_param(
    dtype: str, grad_dtype: str = "fp32", optimizer_state: str = "fp32_master"
) -> StateBytes:
    """Mixed precision: 2 + g + 12 B/param with g = 4 for fp32 main gradients (Korthikanti Fig. 1's 18 B;
    ZeRO §3.1; Megatron-LM accumulate_allreduce_grads_in_fp32) or g = 2 for gradients kept and reduced in
    bf16 (ZeRO §3.1's 2 + 2 + 12 = 16 B); fp32 training (fp32 or tf32 GEMMs): 4 + 4 + 8. fp8 and FP4
    recipes keep bf16 weights beside the fp32 master (Transformer Engine; NVFP4 pretraining,
    arXiv:2509.25149 §4), so they count as mixed precision. ``optimizer_state`` (specs.framework):
    ``fp32_master`` as above; ``param_dtype``, no fp32 master (a model cast to bf16 and trained by
    torch.optim.AdamW, which creates exp_avg and exp_avg_sq with torch.zeros_like(param), torch/optim/adamw.py
    ``_init_group``): Adam's m and v in the parameter's 2 bytes, 2 + g + 4; ``fp32_params``, the parameters
    themselves fp32 and cast to the compute dtype where a layer uses them (MaxText weight_dtype float32, dtype
    bfloat16: google/maxtext 3075bbe MaxText/layers/linears.py DenseGeneral, ``kernel = jnp.asarray(kernel,
    self.dtype)``), so no separate master and no persistent half-precision copy, and optax.adamw's moments in
    the parameters' dtype (``mu_dtype`` None: ``jnp.zeros_like(params)``): 4 + 4 + 8, the kept gradient in the
    parameters' fp32 whatever ``grad_dtype`` (which then sets only the reduction's bytes,
    ``grad_reduce_bytes_per_param``): FSDP2's foreach_reduce casts the reduce-scatter output to the sharded
    parameter's dtype before assigning or adding it to its gradient (``_to_dtype_if_needed(new_sharded_grad,
    orig_dtype)``, torch/distributed/_composable/fsdp/_fsdp_collectives.py, PyTorch 2.4-2.6; ``_fully_shard``
    since), and a JAX gradient has the primal's dtype (the transpose of the bf16 cast converts back).
    Megatron-Core's precision-aware optimizer (PRECISION_AWARE_STATES): 2 + g + (master + exp_avg +
    exp_avg_sq), 2 + g + 8 with an fp32 master and bf16 moments, 2 + g + 6 with the master's remainders."""
    if dtype in ("fp32", "tf32"):
        return StateBytes(4.0, 4.0, 8.0)
    if optimizer_state == "fp32_params":
        return StateBytes(4.0, 4.0, 8.0)
    if optimizer_state in PRECISION_AWARE_STATES:  # the bf16 weights beside master and moments
        return StateBytes(2.0, GRAD_BYTES[grad_dtype], sum(PRECISION_AWARE_STATES[optimizer_state]))
    return StateBytes(
        2.0, GRAD_BYTES[grad_dtype], 12.0 if optimizer_state == "fp32_master" else 4.0
    )


def precision_aware_step_bytes(optimizer_state: str, fused_moments: bool = True) -> float:
    """HBM bytes per owned parameter of the optimizer step under Megatron-Core's precision-aware optimizer
    (PRECISION_AWARE_STATES: master M bytes, bf16 moments), in the passes of OPTIMIZER_BYTES_PER_PARAM
    (specs.system): zero the fp32 gradient buffer (4), unscale and inf check (4 + 4), the gradient norm (4), then
    Transformer Engine's FusedAdam, one multi-tensor kernel reading the fp32 gradient (4) and the fp32 value of
    the master (4: the fp32 master, or the bf16 parameter and its int16 remainder,
    multi_tensor_adam_param_remainder) and writing the master and the bf16 parameter (M + 2; no separate
    master-to-parameter copy). Each bf16 moment: read and written in the kernel, 2 + 2, where TE fuses their
    unscaling (``fused_moments``: fuse_unscale, TE v2.13 on); TE v2.1-v2.12 (get_unscaled_state
    ``state.float()``, the kernel on the fp32 copy, _apply_scale ``scaled_state.copy_(unscaled.bfloat16())``)
    moves 2 + 4, 4 + 4, 4 + 2 and 2 + 2 = 24 (transformer_engine/pytorch/optimizers/fused_adam.py at v2.4 and
    v2.13). Fused: 16 + 8 + (M + 2) + 8 = 38 B (fp32 master) or 36 B (remainders); unfused 78 or 76 B; against
    Megatron's fp32 step, 54 B."""
    master, exp_avg, exp_avg_sq = PRECISION_AWARE_STATES[optimizer_state]
    per_moment = (lambda b: 2.0 * b) if fused_moments else (lambda b: 4.0 * b + 16.0)
    return 16.0 + 4.0 + 4.0 + (master + 2.0) + per_moment(exp_avg) + per_moment(exp_avg_sq)


def compute_copy_bytes(dtype: str) -> float:
    """Bytes per element of the copy a layer computes with: 2 (the bf16 / fp16 weights and GEMM outputs of
    mixed precision, fp8 and FP4 recipes included, whose GEMMs take bf16 weights and write bf16 outputs) or 4 in
    fp32 / tf32 training. What a ZeRO-3 / FSDP gather moves and holds unsharded (the weights' own bytes, but
    for fp32 parameters cast to the compute dtype on the shard before the gather: ``state_bytes_per_param``'s
    fp32_params, where XLA's sharding propagation gives the elementwise cast its operand's sharding, so the
    partitioner gathers the cast's bf16 output, as jax 0.4.26's SPMD pass emits it; later XLA's
    CollectiveQuantizer pass, openxla/xla xla/service/collective_quantizer.h at 2dbe02fb, also turns an
    all-gather followed by a narrowing convert into convert then all-gather), and what a gradient reduced in
    the compute dtype moves (``grad_reduce_bytes_per_param``): the op graph's activation bytes of ``dtype``
    (graph.transformer.ACTIVATION_BYTES)."""
    return float(ACTIVATION_BYTES[dtype])


def grad_reduce_bytes_per_param(dtype: str, grad_dtype: str, reduce_dtype: str = "kept") -> float:
    """Bytes per parameter of the data-parallel gradient reduction: in the dtype the gradients are kept in
    (``reduce_dtype`` kept: GRAD_BYTES[grad_dtype], fp32 main grads 4 B; Megatron-LM, DeepSpeed, FSDP), or in
    the compute dtype (``compute``: ``compute_copy_bytes``, 2 B in mixed precision), where the reduction runs on
    the weight-gradient GEMM's half-precision output before its cast to the kept dtype. The latter is what XLA's
    SPMD partitioner emits for a jitted JAX step whose fp32 parameters are cast to bf16 in the layers: the wgrad
    dot's bf16 partial sums are all-reduced over the data-sharded batch and sliced to the parameter's shard
    (GSPMD, Xu et al. 2021 arXiv:2105.04663 §3.2; a reduce-scatter after xla/service/reduce_scatter_creator.cc),
    then converted to fp32; the GPU backend's float normalization keeps bf16 reductions (openxla/xla
    xla/service/gpu/gpu_float_support.cc at 0edf2026, GpuFloatSupport::IsSupported: kAllReduce,
    kReduceScatter), so nothing widens it before the wire."""
    if reduce_dtype == "compute":
        return compute_copy_bytes(dtype)
    return state_bytes_per_param(dtype, grad_dtype).gradients


def fp8_weight_copy_bytes_per_param(dtype: str, cached_copies: bool) -> float:
    """Extra bytes per GEMM weight parameter in FP8 training with Transformer Engine: 2 when TE caches
    fp8 copies beside the bf16 weight — the rowwise copy (1 B: forward, wgrad) and the physically
    transposed columnwise copy (1 B: dgrad), which Hopper's FP8 GEMMs need because they take only the
    TN layout (Transformer Engine docs, "Low precision training: performance considerations —
    handling transposes"; kept across micro-batches, "FP8 weight caching"); 0 with fp8 primary
    weights, where those two fp8 tensors replace the 2-byte bf16 weight (NeMo 2.0's
    bf16_with_fp8_mixed recipe sets fp8_params=True; Megatron-LM --fp8-param-gather) and 0 for other
    datatypes. MXFP8 on Blackwell keeps rowwise and columnwise data too (its E8M0 scales, 1/32 B
    each, are neglected), as is delayed-scaling state (1024-entry fp32 amax history per tensor,
    3 tensors per GEMM: 12 KiB per GEMM). FP4 recipes cache both orientations too, each at the dtype's
    stored bytes with its block scales (specs.system.QUANTISED_INPUT_BYTES: NVFP4 2 × (0.5 + 1/16) = 1.125 B,
    TE ``NVFP4Tensor`` rowwise and columnwise data and scales; a run without FP4 primary weights always caches
    them: Megatron-Bridge v0.3.0 ``bf16_with_nvfp4_mixed`` sets fp8_param_gather False)."""
    if not cached_copies or dtype not in QUANTISED_INPUT_BYTES:
        return 0.0
    return 2.0 * QUANTISED_INPUT_BYTES[dtype]


def peak_residents(
    gradients: Any, activations: Any, lazy: Any, microbatches: Any, ddp_buckets: Any
) -> tuple[Any, Any]:
    """(gradient bytes, activation bytes) resident at the step's memory peak, beside the weights, optimizer
    state and working buffers W + O + B, which every phase holds (floats or numpy arrays).

    Gradients in a buffer allocated up front (``lazy`` 0: Megatron-Core's DistributedDataParallel allocates
    its contiguous grad buffer when it wraps the model, megatron/core/distributed/distributed_data_parallel.py
    ``_ParamAndGradBuffer`` at core_r0.9.0; DeepSpeed's ZeRO optimizers their flat fp32 gradient partitions
    at construction, deepspeed/runtime/zero/stage_1_and_2.py) exist at the forward's activation peak:
    peak = W + O + B + G + A.

    Gradients allocated by autograd during backward (``lazy`` 1) and freed by
    ``Optimizer.zero_grad(set_to_none=True)``, the default since PyTorch 2.0 (torch/optim/optimizer.py;
    transformers' Trainer calls ``model.zero_grad()``, trainer.py ``_inner_training_loop``, also set_to_none
    by default; FSDP2 assigns each sharded gradient in its post-backward reduce-scatter,
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_reduce``, torchtitan calls
    ``optimizers.zero_grad()``): with one micro-batch per step the forward ends holding A and no gradient;
    backward allocates each layer's gradients as it frees that layer's activations, so what it holds moves
    from A to G and is largest at an end; the fused AdamW step updates in place with G and no activations
    (aten/src/ATen/native/cuda/fused_adamw_impl.cu: no temporaries): peak = W + O + B + max(A, G), and
    the parts returned are the phase's, (0, A) when A ≥ G, else (G, 0). With m ≥ 2 micro-batches the second
    forward runs with the first's gradients held: W + O + B + G + A, as with a buffer; so too where
    ``ddp_buckets`` (unsharded gradients all-reduced over more than one GPU: torch DistributedDataParallel's
    Reducer allocates its gradient-sized buckets at construction, torch/csrc/distributed/c10d/reducer.cpp
    ``initialize_buckets``)."""
    lazy_now = (where(microbatches <= 1, lazy, 0.0) > 0.0) & (ddp_buckets <= 0.0)
    forward_end = activations >= gradients
    grads = where(lazy_now, where(forward_end, 0.0, gradients), gradients)
    acts = where(lazy_now, where(forward_end, activations, 0.0), activations)
    return grads, acts


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one layer keeps for backward, per micro-batch, split by what tensor parallelism divides."""

    replicated: float  # norms' inputs, linear inputs and dropout masks outside the TP region
    tensor_parallel: float  # Q, K, V, attention internals, MLP intermediates (already divided by t)
    attention_internals: float  # the part selective recomputation drops (already divided by t)


def layer_activation_parts(model: ModelSpec, shape: LayerShape) -> LayerActivations:
    """Per-layer stored activations (Korthikanti et al. 2022, §4.1, generalised).

    Outside the TP region (s·b·h each): two norm inputs 2+2, QKV and MLP inputs (GEMM inputs, g each),
    two dropout masks 1+1 → (6 + 2g) s·b·h with dropout. Inside: Q 2·q, K 2·kv, V 2·kv (the core
    attention's inputs), attention-projection input g·q (a GEMM input, per token); MLP intermediates
    (``mlp_intermediate_bytes``: 4·f GeLU, 6·f SwiGLU in bf16); unfused attention 5·a·s per token
    (softmax output 2, dropout mask 1, dropout output 2; without dropout only the softmax 2); flash
    attention keeps the fp32 log-sum-exp, 4·a bytes per token. g = gemm_input_bytes: 2 in bf16 and 1 in
    fp8 recipes (Transformer Engine saves the fp8 copy of each GEMM input). The attention output
    (graph.mla.attention_output_bytes) counts once in bf16 and where the projection saves it as it is (2·q);
    where the projection keeps its quantised copy, that copy (g·q) and, beside flash attention, the kernel's
    own output (2·q, an attention internal: core_attn recomputation drops it). With GPT shapes (q = kv = h,
    f = 4h) in bf16 this is s·b·h·(10 + 24/t + 5as/(ht)); in fp8 with the projection's fp8 copy,
    s·b·h·(8 + 19/t + 5as/(ht)).
    """
    ab, gin = shape.act_bytes, shape.gemm_input_bytes
    proj_copy, attention_copy = attention_output_bytes(shape)
    tokens = shape.local_tokens
    h, f, t = model.hidden, model.ffn_hidden, shape.tp
    mask = 1.0 if model.has_dropout else 0.0
    replicated = (
        tokens * h * (2 * ab + 2 * gin + 2 * mask)
    )  # norm inputs (2), QKV and MLP inputs (GEMM inputs), masks
    tp_part = tokens * (
        ab * (model.q_width + 2 * model.kv_width)
        + proj_copy * model.q_width
        + f * mlp_intermediate_bytes(model, shape)
    )
    extra_replicated, extra_tp = eager_module_bytes(model, shape)
    replicated, tp_part = replicated + extra_replicated, tp_part + extra_tp * t
    heads = model.heads
    if shape.attention == "flash":
        internals = tokens * (heads * 4.0 + attention_copy * model.q_width)
    else:
        internals = tokens * heads * shape.seq_length * score_bytes(model, shape)
    return LayerActivations(replicated, tp_part / t, internals / t)


def score_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Bytes kept per element of the unfused attention scores: the softmax output (a, the activation bytes),
    the dropout mask (1) and the dropout output (a, the second batched GEMM's input), 2a + 1 (Korthikanti
    et al. 2022 §4.1; a without dropout); where the stack runs the scores as a composite (shape.module_impl
    ``scores``, graph.eager_modules), that composite's saved bytes and the dropout output: transformers' GPT-2
    under autocast keeps its softmax output in fp32 (graph.hf_scores), 4 + 1 + a, as BigScience's fallback does
    where its check fails (graph.megatron_softmax)."""
    ab, dropout = shape.act_bytes, model.has_dropout
    family = scores_family(model, shape)
    found = composite(family, dict(shape.module_impl), ab, ab)
    if found is None:
        return (2 * ab + 1) if dropout else ab
    return found.saved + (ab if dropout else 0)


def eager_module_bytes(model: ModelSpec, shape: LayerShape) -> tuple[float, float]:
    """(replicated, tensor-parallel ÷ t) bytes one layer keeps beyond ``layer_activation_parts`` where the
    stack runs modules as composites (shape.module_impl, graph.eager_modules; the saved tensors each composite
    lists): transformers' RMSNorm keeps its fp32 input and its output (4 + 4 B per element: the residual
    stream is fp32 under autocast over fp32 parameters and in fp32), of which the layer terms count the norm
    input at a (the activation bytes), so 8 − a per element of each of the two norms; its q/k norms keep 4 + a
    per q/k element, counted nowhere else; NewGELUActivation keeps 12 + a per element of the MLP width where
    the fused GeLU's input counts a: 12 more. The rotary composite keeps nothing per element (0)."""
    impl, a = dict(shape.module_impl), shape.act_bytes
    replicated = tensor_parallel = 0.0
    tokens, t = shape.local_tokens, shape.tp
    if impl.get("norm") == "transformers-rmsnorm" and model.norm == "rmsnorm":
        replicated += 2 * tokens * model.hidden * (rmsnorm_upcast(FP32).saved - a)
        if model.qk_norm:
            qk = tokens * (model.q_width + model.kv_width) / t
            tensor_parallel += qk * rmsnorm_upcast(a).saved
    if (
        impl.get("activation") == "transformers-act2fn"
        and activation_kernel(model, 1, 1)[0] == "gelu_new"
    ):
        tensor_parallel += tokens * model.ffn_hidden / t * (gelu_new(a, a).saved - a)
    return replicated, tensor_parallel


def layer_activation_bytes(model: ModelSpec, shape: LayerShape, recompute: str) -> float:
    """Bytes kept per layer per micro-batch under the recompute mode.

    none: everything; selective: drops what the recomputed modules would store
    (``recomputed_module_bytes``; by default the attention internals, Korthikanti §5: 34·s·b·h/t with
    SP); full: only the layer input, 2·s·b·h (÷t with SP) (Korthikanti §4.3).
    With sequence parallelism the replicated part is divided by t too (Korthikanti §4.2.2)."""
    sp_div = shape.tp if shape.sequence_parallel else 1
    if recompute == "full":
        return shape.act_bytes * shape.local_tokens * model.hidden / sp_div
    parts = layer_activation_parts(model, shape)
    if recompute == "selective" and "op_sac" in shape.recompute_modules:
        return op_sac_kept_bytes(model, shape, parts)
    if recompute == "selective" and "save_dots" in shape.recompute_modules:
        return save_dots_kept_bytes(model, shape, parts)
    kept = parts.replicated / sp_div + parts.tensor_parallel + parts.attention_internals
    if recompute == "selective":
        kept -= recomputed_module_bytes(model, shape, shape.recompute_modules or ("core_attn",))
    return kept


def saved_outputs_kept_bytes(
    model: ModelSpec,
    shape: LayerShape,
    parts: LayerActivations,
    split_width: float,
    full_width_outputs: float,
) -> float:
    """Bytes a layer keeps per micro-batch under a policy that saves chosen op outputs and re-runs the rest in
    backward (``op_sac_kept_bytes``, ``save_dots_kept_bytes``), per token (a = activation bytes): the layer input
    a·h (÷t with SP), the tensor-parallel outputs a·``split_width``/t, ``full_width_outputs`` outputs of full width
    a·h each (a row-parallel GEMM's un-reduced output on each TP rank); plus the flash statistics of ``parts``
    (``layer_activation_parts``: attention_internals, less the attention output's own copy, which these policies
    count among the saved outputs: graph.mla.attention_output_bytes)."""
    a, h, t = shape.act_bytes, model.hidden, shape.tp
    sp_div = t if shape.sequence_parallel else 1
    per_token = a * h / sp_div + a * split_width / t + full_width_outputs * a * h
    attention_copy = attention_output_bytes(shape)[1] * model.q_width / t
    return shape.local_tokens * (per_token - attention_copy) + parts.attention_internals


def op_sac_kept_bytes(model: ModelSpec, shape: LayerShape, parts: LayerActivations) -> float:
    """Bytes a dense swiglu layer keeps per micro-batch under torchtitan's per-op SAC (graph.ops.OP_SAC_SOURCE:
    the outputs of the saved ops, the rest re-run in backward; graph.ops.op_sac_split): the block input the
    checkpoint keeps, a·h (÷t with SP); the saved mm outputs wq a·q/t, wv a·kv/t, w1 a·f/t and w2 a·h (the
    row-parallel GEMM's un-reduced output, full width on each TP rank); SDPA's output a·q/t and its statistics
    (``attention_internals``: the fp32 log-sum-exp of flash attention); with sequence parallelism (t > 1) the two
    saved reduce-scatter outputs, 2·a·h/t; abs / max save scalars (0). Per token, a = activation bytes
    (saved_outputs_kept_bytes)."""
    split = 2 * model.q_width + model.kv_width + model.ffn_hidden
    if shape.sequence_parallel and shape.tp > 1:
        split += 2 * model.hidden
    return saved_outputs_kept_bytes(model, shape, parts, split, 1)


def save_dots_kept_bytes(model: ModelSpec, shape: LayerShape, parts: LayerActivations) -> float:
    """Bytes a dense layer keeps per micro-batch under MaxText's remat_policy minimal_flash (graph.ops.SAVE_DOTS:
    google/maxtext 3075bbe MaxText/layers/models.py:255-261, every weight GEMM output and the attention
    ``context`` saved, the element-wise ops re-run): the layer input, a·h (÷t with SP); the q/k/v projections
    a·(q + 2·kv)/t, the context a·q/t, the output projection a·h (un-reduced, full width on each TP rank), the
    MLP input projections a·p·f/t (p = mlp_input_projections) and the MLP output projection a·h; and the flash
    statistics (``attention_internals``). Per token, a = activation bytes (saved_outputs_kept_bytes)."""
    split = 2 * model.q_width + 2 * model.kv_width + model.mlp_input_projections * model.ffn_hidden
    return saved_outputs_kept_bytes(model, shape, parts, split, 2)


def recomputed_module_bytes(model: ModelSpec, shape: LayerShape, modules: tuple[str, ...]) -> float:
    """Bytes of a dense layer's stored activations that selective recomputation by module drops
    (Megatron-LM --recompute-modules; the terms of ``layer_activation_parts``): core_attn the
    attention internals (5·a·s/t per token unfused, 4·a/t flash statistics; Korthikanti §5);
    mlp the MLP intermediates (f/t × mlp_intermediate_bytes per token); layernorm the two norms'
    outputs, recomputed from their kept inputs (gemm_input_bytes·h each, ÷t with SP). Modules a dense layer
    does not have (moe_act, shared_experts, mla_up_proj, moe) drop nothing."""
    parts = layer_activation_parts(model, shape)
    sp_div = shape.tp if shape.sequence_parallel else 1
    tokens = shape.local_tokens
    dropped = 0.0
    if "core_attn" in modules:
        dropped += parts.attention_internals
    if "mlp" in modules:
        dropped += tokens * model.ffn_hidden / shape.tp * mlp_intermediate_bytes(model, shape)
    if "layernorm" in modules:
        dropped += 2 * shape.gemm_input_bytes * tokens * model.hidden / sp_div
    return dropped


def embedding_activation_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """First stage: the embedding dropout mask, s·b·h bytes (÷t with SP) (Korthikanti §4.3); 0 without dropout."""
    if not model.has_dropout:
        return 0.0
    sp_div = shape.tp if shape.sequence_parallel else 1
    return shape.local_tokens * model.hidden / sp_div


def lm_head_activation_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Last stage: final-norm input and LM-head input (2·s·b·h each, ÷t with SP) and what the loss holds
    for its backward, held_bytes per logit of the implementation the stack runs (shape.module_impl's loss,
    graph.losses.LOSS_IMPLS) × s·b·V/t: by default the fp32 softmax, 4 (Korthikanti §4.3, output
    layer term); a loss that materialises the fp32 logits (fp32-logits: transformers' ForCausalLMLoss)
    graph.losses.LOGIT_BYTES; Inductor's fused loss the bf16 logits and their gradient, 2 + 2; DTensor's
    loss_parallel over vocabulary-sharded logits (t > 1) its tp_held_bytes, 16."""
    sp_div = shape.tp if shape.sequence_parallel else 1
    tokens = shape.local_tokens
    impl = loss_impl(shape.module_impl)
    split = shape.tp > 1 and impl.tp_held_bytes is not None
    per_logit = impl.tp_held_bytes if split else impl.held_bytes
    return (
        2 * shape.act_bytes * tokens * model.hidden / sp_div
        + per_logit * tokens * model.vocab / shape.tp
    )


def classifier_activation_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """ViT's classification head (graph.encoder.classifier_block): the final-norm input over every token,
    2·s·b·h (÷t with SP), and the fp32 logits of each sample's class token, 4·b·V (the head is replicated
    over TP; Dosovitskiy et al. 2021 Eq. 4)."""
    return (
        2 * shape.act_bytes * shape.sp_tokens * model.hidden + 4.0 * shape.micro_batch * model.vocab
    )


def layout_buffer_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Working buffer of a 2D tensor-parallel layout beside the kept activations (graph/summa.py): the
    all-gathered K and V the fused kernel reads — 2d: the grid column's T tokens, ab·T·2·kv_width/c;
    2d-seq: the whole sequence, ab·b·s·2·kv_width/t (NERSC model FusedLASeqp's gathered K/V); 0 for 1d.
    SUMMA's panel buffers ((T/r + f/c)·e/nb elements per linear) are left out: below 1/nb of a block.
    The gathered bytes: graph.tp_collectives.gathered_kv_bytes, which the layouts' collectives move."""
    return gathered_kv_bytes(model, shape)
