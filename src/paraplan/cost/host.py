"""Host (CPU) issue time of a block's kernels, and the GPU time it bounds (docs/model.md, "Host time").

CUDA launches are asynchronous: the host issues kernels into a stream queue and runs ahead of the GPU, so a region
of K kernels with device time D and host issue time H = Σ kernels × t_issue takes max(D, H) on the GPU (the GPU
starves when the host issues slower than it executes; NVIDIA, "Getting Started with CUDA Graphs", A. Gray, 2019:
back-to-back launches of a short kernel run at the launch rate, not the kernel's time). t_issue is the stack's
per-kernel host time outside a CUDA graph (``efficiency.host_launch_s``, from the framework profile) or its
per-kernel share of a graph replay inside one (``efficiency.graph_kernel_s``); the profile's ``cuda_graph_scope``
says which ops a graph holds (``graphed``). A device-to-host synchronisation drains the queue: the host waits for the
GPU, then the GPU waits for the host to issue what follows (``sync_terms``). A region here is one block's forward
or backward for one micro-batch (step.block_terms.host_bound_s); the host may run further ahead across blocks,
so this overstates host-boundness only where host-bound and device-bound blocks alternate.

Kernel counts are read off the op graph (``op_kernels``): a GEMM is one kernel forward, two backward (data and
weight gradient, Narayanan et al. 2021 §5.1); a grouped GEMM one GEMM per local expert (Transformer Engine
GroupedLinear: transformer_engine/common/include/transformer_engine/multi_streams.h); fused attention one kernel
forward and three backward (FlashAttention-2, csrc/flash_attn/src/flash_bwd_launch_template.h: the dO·O
pre-processing, the main loop, the dQ conversion); a fused element-wise op one kernel each way, an eager one the
ATen kernels its PyTorch module runs (``EAGER_KERNELS``) with autocast's activation casts (cost.autocast). An eager
op's zero-kernel aten calls (views, transposes, splits: ``eager_views``) cost the host too, ``host_view_s`` each.
An eager profile that states ``host_dispatch_s`` prices these counts call by call, by kind (cost.host_kinds).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from paraplan.cost.autocast import activation_casts
from paraplan.cost.eager_kernels import ROLE
from paraplan.cost.elementwise import maximum, where
from paraplan.cost.graph_scope import (
    EXPERT_SECTION,
    OUTSIDE_LAYERS,
    ROUTER_OPS,
    graphed,
    graphs_anything,
    whole_iteration,
)
from paraplan.cost.host_kinds import CXX_LAUNCH_S, kind_host_s
from paraplan.cost.moe_host import (
    graph_launches,
    post_clamp_sequence,
    post_sync_sequence,
    reissue_idle_s,
    sync_drain_s,
)
from paraplan.graph.eager_modules import autocast_runs, composite_kernels
from paraplan.graph.losses import loss_impl
from paraplan.graph.moe_mlp import ACTIVATION_SYNC
from paraplan.graph.ops import Op
from paraplan.graph.transformer import ACTIVATION_BYTES
from paraplan.specs.system import EfficiencySpec

Num = Any  # float or numpy array

# (forward, backward) kernels of an element-wise op run eagerly as PyTorch 2.x's modules run it (ATen CUDA kernels):
# - norms: LayerNorm and RMSNorm are one fused ATen kernel forward (native_layer_norm; _fused_rms_norm from
#   PyTorch 2.9, native_functions.yaml) and two backward: the input gradient and the gain (and bias) gradient
#   (aten/src/ATen/native/cuda/layer_norm_kernel.cu: layer_norm_grad_input_kernel and the gamma/beta kernel);
#   LayerNorm's backward adds the zero fill of its gain/bias gradients (LAYERNORM_ZERO_FILL);
# - residual add: one add forward; backward one add where the two gradient paths meet (autograd accumulation);
# - rotary embedding on q and k, rotate-half form x·cos + cat(−x₂, x₁)·sin: neg, cat, two muls and an add per
#   tensor (Su et al. 2021, Eq. 34 as in Hugging Face transformers' apply_rotary_pos_emb), and as many backward;
# - unfused softmax with mask (Megatron-LM's eager path: masked_fill, softmax) two kernels each way;
# - cross-entropy: the kernels of the loss implementation the profile names (graph.losses.LOSS_IMPLS);
#   on fp32 logits the cast to fp32, log_softmax, nll_loss forward; backward nll_loss_backward (a zero fill and
#   a scatter), log_softmax_backward and the cast back (aten/src/ATen/native/cuda/Loss.cu, SoftMax.cu);
# - embedding lookup: one gather forward; backward embedding_dense_backward's sort-based kernels (index sort,
#   segment offsets, partial sums, gradient write, aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu) and the
#   zero fill of the gradient, six;
# - the MLP activation: GeLU one kernel each way; SwiGLU silu and a multiply forward, silu_backward and two
#   multiplies backward (an activation op whose kernel family, ``Op.kernel[0]``, is "swiglu": the dense MLP's
#   and the experts' alike).
EAGER_KERNELS: dict[str, tuple[int, int]] = {
    "input_norm": (1, 2),
    "post_attention_norm": (1, 2),
    "final_norm": (1, 2),
    "mla_q_norm": (1, 2),
    "mla_kv_norm": (1, 2),
    "cross_attention_norm": (1, 2),
    "mtp_norms": (2, 4),
    "attention_residual": (1, 1),
    "mlp_residual": (1, 1),
    "cross_attention_residual": (1, 1),
    "rotary_embedding": (10, 10),
    "softmax_dropout": (2, 2),
    "cross_softmax_dropout": (2, 2),
    "embedding_lookup": (1, 6),
    "mtp_embedding_lookup": (1, 6),
}
SWIGLU_KERNELS = (2, 3)
# LayerNorm's backward zero-fills the gain/bias gradients its gamma/beta kernel accumulates into: one "Memset
# (Device)" per LayerNorm backward in a profiled eager GPT step on H100, PyTorch 2.11 (25 layer_norm_grad_input,
# 25 GammaBetaBackward and 25 Memset kernels for its 25 LayerNorms: benchmarks/gpu/measured/
# h100-2026-11-27-hostprobe/host_probe2.json fwd_bwd_names).
LAYERNORM_ZERO_FILL = 1
# Eager attention around F.scaled_dot_product_attention (a fused q/k/v projection, as graph.transformer's
# qkv_projection): the head split's view, its transpose to (batch, heads, sequence, head dim), the q/k/v split,
# the output's transpose back and its reshape, five zero-kernel aten calls each recording an autograd node
# (EAGER_ATTENTION_VIEWS), and two kernels: the reshape of the transposed output copies it to (batch, sequence,
# heads · head dim) forward, and the split's backward concatenates the q, k and v gradients (CatArrayBatchedCopy,
# 12 per 12-layer step, host_probe2.json fwd_bwd_names; as benchmarks/gpu/train_steps.py Block.forward runs it).
EAGER_ATTENTION_EXTRA = (1, 1)
EAGER_ATTENTION_VIEWS = 5

# FlashAttention-2 backward kernels (flash_bwd_launch_template.h) and a GEMM's backward (dgrad + wgrad)
ATTENTION_KERNELS = (1, 3)
GEMM_KERNELS = (1, 2)


def op_kernels(
    op: Op,
    eager: bool,
    autocast: bool = False,
    bias: bool = False,
    qkv_bias: bool = False,
    impl: tuple[dict, dict] = ({}, {}),
    wide_roles: frozenset[str] = frozenset(),
    act_bytes: int = 2,
) -> tuple[int, int]:
    """(forward, backward) kernels one op launches (module docstring): GEMM (1, 2), grouped GEMM (b, 2b) over its
    b local experts ((1, 2) run as one kernel, Op.one_kernel), fused attention (1, 3), a host synchronisation
    (0, 0); an element-wise op (1, 1) when fused
    (1, 0 without backward bytes), EAGER_KERNELS by name when ``eager`` (a LayerNorm's backward with its
    LAYERNORM_ZERO_FILL, attention with EAGER_ATTENTION_EXTRA). A weight GEMM with a bias (``bias``; the q/k/v
    projection by ``qkv_bias``; never the LM head) adds the bias-gradient reduction backward. With ``autocast``
    (AMP over fp32 parameters) a weight GEMM adds one cast each way for its weight and for its bias (the fp32
    parameter to half precision forward, torch.amp autocast's cast, and its gradient back, ToCopyBackward); the
    batched GEMMs of unfused attention multiply activations and add none. A module the stack runs as a composite
    (``impl``: the profile's module_impl and eager_kernels) launches the composite's kernels with the activation
    casts around it, as its GPU time counts them (graph.eager_modules.composite_kernels). Another eager op whose
    role (cost.eager_kernels.ROLE of its kernel family) runs wider than the activations (``wide_roles``) adds the
    activation casts of cost.autocast.activation_casts. ``autocast``: whether autocast's casts run
    (graph.eager_modules.autocast_runs, as the device time decides it), ``act_bytes`` the activations' width."""
    if op.kind == "gemm":
        fwd, bwd = GEMM_KERNELS
        if op.gemm_shape and op.gemm_shape[0] == 1:  # a weight GEMM
            has_bias = qkv_bias if op.name == "qkv_projection" else bias and op.name != "lm_head"
            casts = (1 + has_bias) if autocast else 0
            fwd, bwd = fwd + casts, bwd + casts + has_bias
        return fwd, bwd
    if op.kind == "grouped_gemm":  # one GEMM per expert, or one over all (Op.one_kernel)
        experts = op.gemm_shape[0] if op.gemm_shape and not op.one_kernel else 1
        return experts * GEMM_KERNELS[0], experts * GEMM_KERNELS[1]
    if op.kind == "attention":
        extra = EAGER_ATTENTION_EXTRA if eager else (0, 0)
        return ATTENTION_KERNELS[0] + extra[0], ATTENTION_KERNELS[1] + extra[1]
    if op.kind == "host_sync":
        return 0, 0
    backward = 1 if op.bwd_bytes > 0 or op.bwd_flops > 0 else 0
    family = op.kernel[0] if op.kernel is not None else None
    mixed = composite_kernels(family, *impl, autocast, act_bytes) if family is not None else None
    # a composite's count has its activation casts, decided by its input's width; a fused stack runs the
    # composites its module_impl names too (Megatron-LM 2019 / v1.0 scores)
    if mixed is not None:
        return mixed
    if not eager:
        return 1, backward
    role = ROLE.get(family) if family is not None else None
    casts = activation_casts(role, autocast and role in wide_roles)
    if family == "swiglu":  # the graph's kernel family (Op.kernel)
        return SWIGLU_KERNELS
    if op.name == "cross_entropy":  # the LM head's loss (graph.transformer.lm_head_block)
        return loss_impl(impl[0]).kernels
    fwd, bwd = EAGER_KERNELS.get(op.name, (1, backward))
    zero_fill = LAYERNORM_ZERO_FILL if family == "layernorm" else 0
    return fwd + casts[0], bwd + casts[1] + zero_fill


def eager_views(op: Op, eager: bool) -> int:
    """Zero-kernel aten calls (views, transposes, splits, reshapes that alias) an eager op makes forward, each
    recording an autograd node that backward runs: EAGER_ATTENTION_VIEWS for attention, none otherwise (a weight
    GEMM's transpose of its weight is inside the measured per-kernel figure, host_launch_s)."""
    return EAGER_ATTENTION_VIEWS if eager and op.kind == "attention" else 0


def counted_kernels(
    ops, eff: EfficiencySpec, bias: tuple[bool, bool] = (False, False), dtype: str = "bf16"
) -> tuple[int, int]:
    """(forward, backward) kernels ``op_kernels`` counts over ``ops`` under the profile ``eff`` (eager or fused,
    autocast's casts, the profile's composites), for a model with ``bias`` = (bias, qkv_bias) in a run of
    ``dtype`` (``_op_counts``, as op_host_s counts them): the count that t_issue (``kernel_issue_s``) multiplies,
    and so the count a per-kernel host figure is measured over (``per_kernel_host_s``)."""
    context = eager_context(eff)
    pairs = [_op_counts(op, eff, bias, context, dtype) for op in ops]
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def per_kernel_host_s(step_growth_s: float, counted: float) -> float:
    """Host seconds per counted kernel, t_issue = ΔT / K: ΔT the growth per layer of a host-bound step (its
    slope over layer count), K the kernels ``counted_kernels`` counts for that layer, not the profiler's count.
    The profiler also sees kernels a library launches from inside one call (such as cuBLASLt's split-K
    reduction beside a small-output weight-gradient GEMM, FlashAttention-2's split-KV combine at few
    batch·heads blocks: C++ launches of a few µs, CXX_LAUNCH_S, with no Python dispatch or autograd node of
    their own), so ΔT over the profiled count understates what each counted kernel costs the host by the
    ratio of the two counts. The
    profiles' ``host_launch_s`` is this figure for a tiny residual MLP stack (LayerNorm, Linear, GeLU, Linear
    under autocast): 960.7 µs per layer over 27 counted kernels eager, 35.6 µs (28.1 profiled), and 863.2 µs
    over 22 compiled by Inductor, 39.2 µs (23.2 profiled; benchmarks/gpu/measured/h100-2026-11-27c/modules/
    inductor_host.csv, tests/unit/test_host.py)."""
    return step_growth_s / counted


def kernel_issue_s(eff: EfficiencySpec, in_graph: bool) -> float:
    """Host seconds to issue one kernel: graph_kernel_s inside a replayed CUDA graph, host_launch_s outside one,
    divided by the host CPU's relative speed (host_speed)."""
    return (eff.graph_kernel_s if in_graph else eff.host_launch_s) / eff.host_speed


def wide_roles(eff: EfficiencySpec) -> frozenset[str]:
    """The eager roles that run wider than the activations under AMP autocast (``autocast_casts``): those the
    profile's eager_kernels runs in fp32 (cost.autocast)."""
    if not eff.autocast_casts:
        return frozenset()
    return frozenset(role for role, precision in eff.eager_kernels.items() if precision == "fp32")


def eager_context(eff: EfficiencySpec) -> tuple[tuple[dict, dict], frozenset[str]]:
    """What op_kernels reads of a profile beyond the op: (module_impl, eager_kernels) and ``wide_roles``,
    computed once per op list (host_sums)."""
    return (eff.module_impl, eff.eager_kernels), wide_roles(eff)


def op_host_s(
    op: Op,
    eff: EfficiencySpec,
    dropless: bool,
    bias: tuple[bool, bool] = (False, False),
    context: tuple[tuple[dict, dict], frozenset[str]] | None = None,
    dtype: str = "bf16",
    moe_layer: bool = False,
    counts: tuple[int, int] | None = None,
) -> tuple[float, float]:
    """(forward, backward) host issue seconds of one op: in an eager stack whose profile states host_dispatch_s,
    outside a CUDA graph, its calls by kind (cost.host_kinds.kind_host_s); else op_kernels × kernel_issue_s,
    plus, in an eager stack, its zero-kernel calls (eager_views) × host_view_s / host_speed, split evenly
    between forward (the call and its node) and backward (the node run); a grouped GEMM is one dispatch and
    its other per-expert GEMMs C++ launches (CXX_LAUNCH_S, no slower than a dispatch); 0 when the profile
    prices no host (host_launch_s 0).
    ``bias``: the model's (bias, qkv_bias), op_kernels; ``context``: eager_context(eff), when the caller has it;
    ``moe_layer``: the op is in an MoE layer (cost.graph_scope.graphed); ``counts``: its _op_counts, when the
    caller has them (host_sums)."""
    if eff.host_launch_s <= 0.0:
        return 0.0, 0.0
    in_graph = graphed(op, eff.cuda_graph_scope, dropless, moe_layer)
    per_kernel = kernel_issue_s(eff, in_graph)
    fwd, bwd = _op_counts(op, eff, bias, context, dtype) if counts is None else counts
    if eff.host_eager and eff.host_dispatch_s and not in_graph and op.kind != "grouped_gemm":
        composite = _composite(op, eff, context, dtype)
        zero_fill = LAYERNORM_ZERO_FILL if op.kernel and op.kernel[0] == "layernorm" else 0
        return kind_host_s(op, eff, (fwd, bwd), eager_views(op, True), composite, zero_fill)
    if op.kind == "grouped_gemm" and fwd > 0:
        launch = min(per_kernel, CXX_LAUNCH_S / eff.host_speed)
        return per_kernel + (fwd - 1) * launch, per_kernel + (bwd - 1) * launch
    views = 0.5 * eager_views(op, eff.host_eager) * eff.host_view_s / eff.host_speed
    return fwd * per_kernel + views, bwd * per_kernel + views


def _composite(
    op: Op,
    eff: EfficiencySpec,
    context: tuple[tuple[dict, dict], frozenset[str]] | None,
    dtype: str,
) -> bool:
    """Whether the stack runs ``op``'s module as a composite of eager calls (graph.eager_modules.composite_kernels
    under the profile's module_impl), as op_kernels counts it."""
    if op.kind != "memory" or op.kernel is None:
        return False
    impl = (eager_context(eff) if context is None else context)[0]
    act = ACTIVATION_BYTES[dtype]
    runs = autocast_runs(eff.autocast_casts, act)
    return composite_kernels(op.kernel[0], *impl, runs, act) is not None


def _op_counts(
    op: Op,
    eff: EfficiencySpec,
    bias: tuple[bool, bool],
    context: tuple[tuple[dict, dict], frozenset[str]] | None,
    dtype: str,
) -> tuple[int, int]:
    """(forward, backward) kernels of ``op`` under ``eff`` in a run of ``dtype``: op_kernels with autocast's
    casts as graph.eager_modules.autocast_runs decides them at the run's activation width (ACTIVATION_BYTES);
    ``context``: eager_context(eff), None to compute it. The one count op_host_s prices and counted_kernels
    reports."""
    impl, wide = eager_context(eff) if context is None else context
    act = ACTIVATION_BYTES[dtype]
    return op_kernels(
        op, eff.host_eager, autocast_runs(eff.autocast_casts, act), *bias, impl, wide, act
    )


class HostSums(NamedTuple):
    """Host terms of one op list for one micro-batch (additive over disjoint op lists): issue seconds forward and
    backward, GPU idle after the forward's synchronisations and the host's own wait on them, and the kernels
    the list launches forward and backward (_op_counts: launch_blocking_idle_s's round trips)."""

    forward: float = 0.0
    backward: float = 0.0
    sync_idle: float = 0.0
    sync_wait: float = 0.0
    kernels_forward: int = 0
    kernels_backward: int = 0
    # GPU idle in the backward after the activation synchronisations a selective recomputation re-runs (host_sums)
    recompute_sync_idle: float = 0.0


def host_sums(
    ops,
    eff: EfficiencySpec,
    device: dict,
    bias: tuple[bool, bool] = (False, False),
    dtype: str = "bf16",
) -> HostSums:
    """HostSums of ``ops`` with their (forward, backward) device seconds in ``device`` (op -> pair), for a
    model with ``bias`` = (bias, qkv_bias) (op_kernels), in a run of ``dtype`` (op_host_s); a CUDA graph's
    regions add one Python-issued launch each (cost.moe_host.graph_launches), a dropless dispatch and a
    clamped GLU's activation copy their sync terms (sync_terms over post_sync_sequence /
    post_clamp_sequence). One walk over ``ops``: each op's kernels (_op_counts) are counted once, priced by
    op_host_s and summed for the round trips of synchronous launches (launch_blocking_idle_s); not counted
    (0) where neither reads them (host_launch_s 0 and no launch_blocking)."""
    synced = any(op.kind == "host_sync" for op in ops)  # the expert section is read only then
    dropless = synced and any(op.kind == "host_sync" and op.name != ACTIVATION_SYNC for op in ops)
    calls = graph_calls(ops, eff.compiled_graphs) * eff.host_graph_call_s
    moe_layer = any(op.name in ROUTER_OPS for op in ops)
    scope = eff.cuda_graph_scope
    if eff.host_launch_s > 0.0 and graphs_anything(scope):
        in_graph = [graphed(op, scope, dropless, moe_layer) for op in ops]
        calls += graph_launches(in_graph, whole_iteration(scope)) * eff.host_launch_s
    forward = backward = calls / eff.host_speed
    section: list[tuple[str, float, float]] = []
    syncs = activation_syncs = kernels_forward = kernels_backward = 0
    context = eager_context(eff)
    counted = eff.host_launch_s > 0.0 or eff.launch_blocking  # the counts' only readers
    for op in ops:
        counts = _op_counts(op, eff, bias, context, dtype) if counted else (0, 0)
        f, b = op_host_s(op, eff, dropless, bias, context, dtype, moe_layer, counts)
        forward += f
        backward += b
        kernels_forward += counts[0]
        kernels_backward += counts[1]
        if op.name == ACTIVATION_SYNC:
            activation_syncs += 1
        elif op.kind == "host_sync":
            syncs += 1
        elif synced and op.name in EXPERT_SECTION:
            section.append((op.name, f, device[op][0]))
    idle = wait = again = 0.0
    if syncs:
        call_s = eff.host_launch_s / eff.host_speed
        idle, wait = sync_terms(syncs, post_sync_sequence(section, call_s, dtype == "fp8"), eff)
    if activation_syncs:
        more = sync_terms(activation_syncs, post_clamp_sequence(section), eff)
        idle, wait = idle + more[0], wait + more[1]
        # moe_act recomputation re-runs the clamp and its copy in the backward (TEGroupedMLP bias_act_func): the
        # same idle once more there (the backward's re-issue taken as the forward's, the host's wait left out)
        if any(op.name == "expert_glu_clamp" and op.selective_recompute for op in ops):
            again = more[0]
    return HostSums(forward, backward, idle, wait, kernels_forward, kernels_backward, again)


def graph_calls(ops, compiled: str) -> int:
    """Calls of a torch.compile'd graph one block makes per pass (forward, and backward alike: AOTAutograd runs
    the compiled backward as one more graph): with ``compiled`` "layer" (torchtitan compiles each TransformerBlock
    apart, torchtitan/models/llama3/infra/parallelize.py apply_compile) one per transformer layer block (a block
    with an op outside OUTSIDE_LAYERS); with "model" (torch.compile of the whole model) one, carried by the block
    holding the embedding lookup (a later pipeline stage's own call is not counted); none uncompiled."""
    if compiled == "layer":
        return int(any(op.name not in OUTSIDE_LAYERS for op in ops))
    if compiled == "model":
        return int(any(op.name == "embedding_lookup" for op in ops))
    return 0


def sync_terms(
    syncs: int, sequence: tuple[list[float], list[float]], eff: EfficiencySpec
) -> tuple[float, float]:
    """(GPU idle, host wait) of ``syncs`` host synchronisations per micro-batch forward (cost.moe_host):
    idle = n·t_sync (sync_drain_s) + n·(I + host_sync_s / host_speed), I the GPU idle while the host re-issues
    what follows the sync (reissue_idle_s over ``sequence``, the (host, device) seconds per call after it:
    post_sync_sequence for the dropless dispatch's, post_clamp_sequence for a clamped GLU's activation copy);
    the host waits n·t_sync. efficiency.host_sync_s is the fitted remnant per sync beyond this mechanism
    (validate.fitted moe.host_sync_s), host time, so a slower host CPU (host_speed) stretches it as it does
    the issue; the activation's synchronisation takes the dispatch's remnant."""
    drain = sync_drain_s(syncs, eff.host_sync_latency_s)
    remnant = eff.host_sync_s / eff.host_speed
    return drain + syncs * (reissue_idle_s(*sequence) + remnant), drain


def host_bound_s(device_s: Num, host_s: Num, sync_idle_s: Num = 0.0, sync_wait_s: Num = 0.0) -> Num:
    """GPU seconds of a region the host issues asynchronously: max(D + idle, H + wait), D its device time, H its
    host issue time, idle / wait what its synchronisations cost the GPU / the host (sync_terms). Never below D."""
    return maximum(device_s + sync_idle_s, host_s + sync_wait_s)


def launch_blocking_idle_s(
    host_s: Num, blocking: Num, kernels: Num = 0.0, round_trip_s: Num = 0.0
) -> Num:
    """GPU idle seconds of a region whose n kernels are launched synchronously: H + n·t_sync when ``blocking``
    (efficiency.launch_blocking), else 0; H its host issue time, t_sync the device round trip of one
    synchronisation (efficiency.host_sync_latency_s). With CUDA_LAUNCH_BLOCKING=1 every kernel launch returns
    only once the kernel has completed (CUDA C++ Programming Guide, "Asynchronous Concurrent Execution": the
    variable "globally disable[s] asynchronicity of kernel launches"), so each launch is a launch and a
    synchronisation: the host issues kernel i + 1 only after kernel i ran and it has seen it complete, and the GPU
    idles for that round trip (launch to start, completion to the host's return: the .item() round trip on an
    idle GPU that host_sync_latency_s measures) and for the host's issue of the next kernel. Passed as
    host_bound_s's idle, the region takes D + H + n·t_sync (max(D + idle, H + wait)) instead of max(D, H).
    ``kernels`` 0 (the optimizer's few multi-tensor launches, step.tail): H alone."""
    return where(blocking, host_s + kernels * round_trip_s, 0.0)


# torch.optim's multi-tensor kernels (foreach and fused AdamW) process up to 36 tensors or 320 blocks of 65 536
# elements per launch at depth 4 (param, grad, exp_avg, exp_avg_sq: aten/src/ATen/native/cuda/
# MultiTensorApply.cuh, depth_to_max_tensors / depth_to_max_blocks, kChunkSize): a few launches per step, so
# the optimizer is priced on the host by its Python (a fixed part and a part per tensor), not by launches.


def step_host_overhead_s(weight_tensors: Num, tensor_s: Num, step_s: Num) -> Num:
    """Fixed host seconds of one optimizer step: t_step + T · t_tensor, T the weight tensors one GPU holds,
    t_step and t_tensor the profile's measured fixed and per-tensor host time of zero_grad(set_to_none) and the
    optimizer's step (torch/optim/adamw.py: state look-ups and list building per parameter, grouping by device
    and dtype, torch/optim/optimizer.py _group_tensors_by_device_and_dtype). The optimizer step is then a region
    of its own (step.tail: max(device time, this))."""
    return step_s + weight_tensors * tensor_s
