"""The op graph of one transformer layer (and of the embedding / LM head) on one GPU.

Each :class:`Op` carries its own cost facts as named fields (FLOPs, HBM bytes, GEMM shape), next
to each other, for one micro-batch in the forward pass; backward and recompute are derived from
them by rules stated on the fields. Collectives are :class:`Collective` s with their group and
volume. Nothing here knows about hardware.

Notation (Korthikanti et al. 2022, §4): b micro-batch, s sequence length, h hidden, a heads,
t tensor-parallel degree; here also a_kv key/value heads, d head width, f MLP width,
c context-parallel degree (each GPU holds s/c tokens of every sequence).
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from paraplan.specs import recompute
from paraplan.specs.model import ModelSpec

OpKind = Literal["gemm", "grouped_gemm", "attention", "memory", "host_sync"]
CollectiveKind = Literal[
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "send_recv",
    "ring_exchange",
    "all_to_all",
    "all_to_all_dedup",
    "broadcast",
    "reduce",
]


class Op(NamedTuple):
    """One kernel (or fused group of kernels) for one micro-batch on one GPU, forward pass.

    ``bwd_flops`` / ``bwd_bytes`` are the backward cost of the same op; ``selective_recompute`` is
    True for the ops that selective recomputation re-runs (the core attention, Korthikanti §5).
    A NamedTuple, not a dataclass: the graph builders make hundreds of thousands in a large search, and the op
    costings are memoised on them (step.build.block_compute); a tuple is built, hashed and compared without Python calls.
    """

    name: str
    kind: OpKind
    fwd_flops: float
    fwd_bytes: float
    bwd_flops: float
    bwd_bytes: float
    gemm_shape: tuple[int, int, int, int] | None = None  # (batch, m, n, k) of the forward GEMM
    selective_recompute: bool = False
    causal_fraction: float = 1.0  # share of the score matrix actually computed (fused attention)
    # fused attention, one kernel call: (query tokens, key/value tokens, head dim, causal)
    attention_call: tuple[int, int, int, bool] | None = None
    # a memory-bound op an eager stack runs as one measured kernel (cost.eager_kernels): (family: rmsnorm,
    # layernorm, gelu, gelu_new, swiglu, add, dropout_add, cross_entropy, qk_rmsnorm, rotary, rotary_normed;
    # rows; width of the tensor it works on)
    kernel: tuple[str, float, float] | None = None
    # a GEMM run in another dtype than the plan's (cost.compute.op_times_s): "bf16" for a MaxText one-hot
    # embedding in an fp8 run, "tf32" for its fp32 logits dot (graph.transformer.embedding_block / lm_head_block)
    dtype: str | None = None
    # False: the GEMM's input X needs no gradient (a one-hot of token ids), so its backward is dW alone
    input_grad: bool = True
    # a layer block standing for causal-window layers (graph.mla.core_attention_ops): (window w, share of its
    # layers windowed, score share of a windowed layer); its time is the share-weighted mean of its windowed
    # and full layers' (a full layer's score share follows from attention_call: cost.attention_time)
    attention_window: tuple[int, float, float] | None = None
    # the fused kernel a GEMM's data gradient runs as, where a stack prices that kernel apart from the GEMM
    # (cost.compute.op_times_s): "dglu_dbias", the fused grouped MLP's fc2 dgrad with the GLU backward and the
    # fc1 bias gradient reduced in its epilogue (graph.moe_mlp.expert_ops, cost.compute.dglu_dbias_s)
    dgrad_epilogue: str | None = None
    # a grouped GEMM run as one kernel over its experts whatever the stack's grouped_gemm implementation (Transformer
    # Engine's fused grouped MLP, graph.moe_mlp.fuses_grouped_mlp): cost.compute.op_times_s, one_kernel_grouped_s
    one_kernel: bool = False


def norm_kernel(model: ModelSpec, rows: float, width: float) -> tuple[str, float, float]:
    """Op.kernel of a norm over ``rows`` × ``width``: the model's norm (rmsnorm / layernorm)."""
    return (model.norm, float(rows), float(width))


def activation_kernel(model: ModelSpec, rows: float, width: float) -> tuple[str, float, float]:
    """Op.kernel of the MLP activation: the model's mlp (gelu / swiglu), ``gelu_new`` where the model names
    transformers' NewGELUActivation (ModelSpec.activation; a composite for stacks that run it,
    graph.eager_modules)."""
    family = "gelu_new" if model.activation == "gelu_new" and model.mlp == "gelu" else model.mlp
    return (family, float(rows), float(width))


def query_key_kernels(model: ModelSpec, tokens: float, width: float) -> tuple[tuple, tuple]:
    """Op.kernel of the q/k per-head norm (``qk_rmsnorm`` over tokens·width/d rows of d) and of the rotary
    embedding (``rotary``, ``rotary_normed`` after a q/k norm) on ``tokens`` × ``width`` (q and k together)."""
    d = float(model.d_head)
    norm = ("qk_rmsnorm", tokens * width / d, d)
    return norm, ("rotary_normed" if model.qk_norm else "rotary", float(tokens), float(width))


def residual_kernel(model: ModelSpec, rows: float, width: float) -> tuple[str, float, float]:
    """Op.kernel of a residual add (``dropout_add`` where the model has dropout before it)."""
    return ("dropout_add" if model.has_dropout else "add", float(rows), float(width))


# the block's last two ops where they are a dense MLP's output GEMM and its residual add (graph.transformer)
EARLY_STOP_TAIL = ("mlp_out_projection", "mlp_residual")


def early_stop_tail(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """The ops of a block that torch.utils.checkpoint's early stop does not re-run in a full recomputation:
    the dense MLP's output GEMM and the residual add after it, when they end the block (EARLY_STOP_TAIL,
    the add a plain ``add`` kernel), else none. Non-reentrant checkpointing (``use_reentrant=False``; its
    ``early_stop`` argument defaults to True, torch.utils.checkpoint.checkpoint) recomputes inside backward
    and raises ``_StopRecomputationError`` from its pack hook as soon as the recomputation has packed as
    many saved tensors as the forward did (torch/utils/checkpoint.py ``_recomputation_hook``,
    pytorch/pytorch 0008d771a4). Autograd packs an op's saved inputs before its kernel runs
    (tools/autograd/gen_variable_type.py ``emit_body``: setup_derivative, which saves the inputs, before
    emit_call; its outputs after; torch/csrc/autograd/saved_variable.cpp calls the pack hook in the
    constructor): the output GEMM (addmm / mm save only their inputs, mat1 and mat2) is where the last
    tensor is packed, so its kernel and the residual add (AddBackward0 saves nothing) never run. A dropout
    before the add saves its mask after its kernel, so the GEMM runs: no tail then (``dropout_add``); nor
    when an op follows them (an fp8 cast). The one rule of the tail: its time (step.block_sums.
    early_stop_tail_s) and its FLOPs (step.stage_totals.early_stop_flops_per_token) read it here."""
    if len(ops) < 2 or tuple(op.name for op in ops[-2:]) != EARLY_STOP_TAIL:
        return ()
    gemm, residual = ops[-2], ops[-1]
    if gemm.kind != "gemm" or residual.kernel is None or residual.kernel[0] != "add":
        return ()
    return (gemm, residual)


class Collective(NamedTuple):
    """A collective of one micro-batch in one layer: ``count_fwd`` calls in forward, ``count_bwd`` in backward.

    ``bytes`` is the size of the full (un-sharded) buffer of one call, the convention of nccl-tests
    (doc/PERFORMANCE.md): all-reduce input, all-gather output, reduce-scatter input.
    ``overlaps_with`` names the compute that hides it: "attention" (context-parallel ring), or in
    backward the data-gradient ("dgrad") or weight-gradient ("wgrad") GEMMs of the layer, or
    "panels": SUMMA's per-panel broadcasts and reduces (2D tensor parallelism, graph/summa.py), one
    call per panel, each overlapping the previous panel's GEMM. Groups ``tp_row`` / ``tp_col`` are
    the rows and columns of the 2D tensor-parallel grid (cost.summa.grid_spans). A NamedTuple, as Op.
    """

    name: str
    group: Literal["tp", "cp", "pp", "dp", "ep", "etp", "tp_row", "tp_col"]
    kind: CollectiveKind
    bytes: float
    count_fwd: int
    count_bwd: int
    overlaps_with: Literal["none", "attention", "dgrad", "wgrad", "panels"] = "none"


@dataclass(frozen=True, eq=False)
class LayerGraph:
    """Ops and collectives of one block (a layer, the embedding, or the LM head), per GPU, per micro-batch.

    Compared and hashed by identity: graphs are built once per (model, shape) by cached builders,
    and the cost caches key on them, so hashing must not walk every op."""

    name: str
    ops: tuple[Op, ...]
    collectives: tuple[Collective, ...]
    weight_params: float  # parameters of the block held by one GPU (tensor-parallel shard)


class ExpertShape(NamedTuple):
    """The plan knobs that change the expert half of an MoE layer (graph/moe.py). A NamedTuple, not a dataclass: the
    cost caches key on it ~230 K times in a DeepSeek-V3 search, and a tuple hashes without a Python call."""

    ep: int = 1
    etp: int = 1
    dispatcher: str = "alltoall"  # "alltoall" | "allgather" | "deepep" | "hybridep"
    capacity_factor: float | None = None
    balance: str = "learned"  # "forced" | "learned"
    a2a_overlap: bool = False  # dispatch/combine hidden behind another micro-batch's compute
    load_cv: float | None = (
        None  # spread of the experts' routing probabilities; None: the model's published one
    )


# The ops each Megatron-LM --recompute-modules name re-runs (selective recomputation by module), by op name
# in the dense (graph.transformer) and MoE / MLA (graph.moe, graph.mla) layer builders.
RECOMPUTE_MODULE_OPS: dict[str, tuple[str, ...]] = {
    "core_attn": (
        "flash_attention",
        "ring_attention_merge",  # the K/V ring's partial-output merges (graph.cp_ring), inside the attention module
        "attention_scores",
        "softmax_dropout",
        "attention_over_values",
    ),
    "mla_up_proj": ("mla_q_up", "mla_kv_up", "mla_rotary_concat"),
    "layernorm": ("input_norm", "post_attention_norm"),
    # TEGroupedMLP's bias_act_func holds a clamped GLU's clamp (graph.moe_mlp.clamped_glu_ops)
    "moe_act": ("expert_glu_clamp", "expert_activation"),
    "shared_experts": (
        "shared_expert_in_projection",
        "shared_expert_activation",
        "shared_expert_out_projection",
    ),
    "mlp": ("mlp_in_projection", "mlp_activation", "mlp_out_projection"),
    "moe": (
        "router",
        "router_softmax_topk",
        "permute",
        "sort_chunks",
        "expert_fc1",
        "unsort_chunks",
        "dispatch_host_sync",
        "expert_glu_clamp",
        "activation_host_sync",
        "expert_activation",
        "expert_fc2",
        "expert_output_bias",
        "unpermute",
        "shared_expert_in_projection",
        "shared_expert_activation",
        "shared_expert_out_projection",
    ),
}
# The source of the per-op SAC policy: pytorch/torchtitan 9dec370 (Dec 2024),
# torchtitan/parallelisms/parallelize_llama.py:214-266 (_save_list: aten.mm, SDPA flash / efficient,
# reduce_scatter_tensor, abs, max; _custom_policy: MUST_SAVE those except every second mm of a block,
# PREFER_RECOMPUTE the rest) on torchtitan/models/llama/model.py:189,214,253 (the block's mm order: wq, wk,
# wv, wo, w1, w3, w2 -> saved wq, wv, w1, w2; re-run wk, wo, w3).
OP_SAC_SOURCE = "pytorch/torchtitan 9dec370 torchtitan/parallelisms/parallelize_llama.py:214-266"
# The policy's name among the recompute modules: a policy of its own, not a module one may name an op of, nor
# one the non-uniform search offers per stage (it is not in RECOMPUTE_MODULE_OPS). Its re-run ops: every op of
# a dense swiglu layer but the saved mm outputs (q, v, gate w1, out w2: op_sac_split) and SDPA, up to the
# last saved op (mlp_residual's output no backward needs: checkpoint's early stop); the split GEMM parts
# re-run keep their fused op's name and are flagged by op_sac_split, not by name.
OP_SAC = recompute.OP_SAC
OP_SAC_RERUN = (
    "input_norm",
    "qk_norm",
    "rotary_embedding",
    "attention_projection",
    "attention_residual",
    "post_attention_norm",
    "mlp_activation",
    "fp8_casts",
)
# MaxText's remat_policy minimal_flash (google/maxtext 3075bbe, May 2024, MaxText/layers/models.py:255-261):
# jax.checkpoint_policies.save_from_both_policies(checkpoint_dots_with_no_batch_dims,
# save_only_these_names("context")) -- every weight GEMM's output and the attention context are saved, the
# element-wise ops between them re-run in backward (norms, rotary, the attention residual, the MLP activation,
# casts; the layer output is the next layer's saved input). Its re-run ops: OP_SAC_RERUN but the attention
# output projection (a dot, saved).
SAVE_DOTS = recompute.SAVE_DOTS
SAVE_DOTS_RERUN = tuple(name for name in OP_SAC_RERUN if name != "attention_projection")
# the per-op checkpointing policies a recompute_modules list may name beside the modules of
# RECOMPUTE_MODULE_OPS (torchtitan's per-op SAC, MaxText's minimal_flash), with the ops each re-runs
POLICY_MODULES: dict[str, tuple[str, ...]] = {OP_SAC: OP_SAC_RERUN, SAVE_DOTS: SAVE_DOTS_RERUN}

_CORE_ATTENTION_OPS = frozenset(RECOMPUTE_MODULE_OPS["core_attn"])


def _weight_gemms(graph: LayerGraph):
    """(op, batch, n, k) of each GEMM of the block that multiplies by a weight (the forward GEMM's (batch, m, n, k): an
    m×k input times a k×n weight; a grouped GEMM holds batch such weights); the core-attention GEMMs multiply
    activations, not weights, and are left out."""
    for op in graph.ops:
        if _is_weight_gemm(op):
            batch, _, n, k = op.gemm_shape
            yield op, (int(batch) if op.kind == "grouped_gemm" else 1), float(n), float(k)


def _is_weight_gemm(op: Op) -> bool:
    """A GEMM that multiplies by a weight: every GEMM with a shape but the core-attention ones."""
    return (
        op.kind in ("gemm", "grouped_gemm")
        and op.gemm_shape is not None
        and op.name not in _CORE_ATTENTION_OPS
    )


@lru_cache(maxsize=16384)  # graphs hash by identity: one walk per graph
def largest_weight_params(graph: LayerGraph) -> float:
    """The block's largest weight tensor on one GPU: max over its weight GEMMs (_weight_gemms) of k·n, times the
    local experts of a grouped GEMM."""
    return max((n * k * batch for _, batch, n, k in _weight_gemms(graph)), default=0.0)


# DeepSpeed's default stage3_param_persistence_threshold: parameters with fewer elements stay gathered
# (microsoft/DeepSpeed v0.3.14, 0cd9abf, deepspeed/runtime/zero/constants.py, ZERO_OPTIMIZATION_PARAM_PERSISTENCE_THRESHOLD_DEFAULT)
DS_PERSISTENCE_THRESHOLD = 1e5


def weight_stat_fields(width) -> tuple[bool, bool, bool, bool, int]:
    """The model fields ``weight_tensor_stats`` reads after the graph, in its argument order, from a model (or a
    per-stage block's width, graph.encoder): (has_bias, has_qkv_bias, norm is LayerNorm, learned_positions,
    hidden)."""
    return (
        width.has_bias,
        width.has_qkv_bias,
        width.norm == "layernorm",
        width.learned_positions,
        width.hidden,
    )


@lru_cache(maxsize=65536)  # graphs hash by identity: one walk per graph and model
def weight_tensor_stats(
    graph: LayerGraph,
    bias: bool,
    qkv_bias: bool,
    layernorm: bool,
    learned_positions: bool,
    hidden: int,
) -> tuple[float, float, tuple[float, ...]]:
    """(count, largest, small) of the block's weight tensors from one walk over its ops, in op order.
    The tensors are those a per-tensor ZeRO-3 gather issues one all-gather each for (DeepSpeed <= 0.5.4,
    ``_allgather_param`` per parameter; microsoft/DeepSpeed PR #1188 coalesced them): every weight
    GEMM's weight k·n (a grouped GEMM: one per local expert) plus its bias n when the model has
    biases (``qkv_bias`` for the q/k/v projection; not the LM head: Megatron's output layer has none), each
    norm's scale (and shift for LayerNorm) of ``hidden``, and the embedding table plus the learned position
    table (taken as larger than any persistence threshold: inf). ``largest``: largest_weight_params (the
    weight GEMMs are those of _weight_gemms; the first of the greatest k·n·batch, as ``max``). ``small``: the
    sizes (elements, on one GPU) below DS_PERSISTENCE_THRESHOLD, which DeepSpeed's ZeRO-3 keeps gathered
    ("persistent", stage3_param_persistence_threshold; stage3.py ``persistent_parameters``). One block's
    walk: a tied embedding table is counted in the embedding block and as the LM head's weight; a stage
    holding both counts it once (step.blocks.head_tensors_shared_with_embedding)."""
    out: list[float] = []
    largest = None
    norm = [float(hidden)] * (2 if layernorm else 1)
    embedding = [math.inf] * (2 if learned_positions else 1)
    for op in graph.ops:
        kind, name = op.kind, op.name
        if _is_weight_gemm(op):
            batch, _, n, k = op.gemm_shape
            batch, n, k = (int(batch) if kind == "grouped_gemm" else 1), float(n), float(k)
            size = n * k * batch
            if largest is None or size > largest:
                largest = size
            has_bias = qkv_bias if name == "qkv_projection" else (bias and name != "lm_head")
            out += [n * k] * batch + ([n] * batch if has_bias else [])
        elif kind == "memory" and name.endswith("norm"):
            out += norm
        elif name == "embedding_lookup":
            out += embedding
    small = tuple(x for x in out if x < DS_PERSISTENCE_THRESHOLD)
    return float(len(out)), (0.0 if largest is None else largest), small


@lru_cache(maxsize=65536)  # graphs hash by identity
def collective_groups(graph: LayerGraph) -> frozenset[str]:
    """The groups (Collective.group) the block's collectives run on."""
    return frozenset(c.group for c in graph.collectives)


def recompute_modules_of(names: tuple[str, ...]) -> tuple[str, ...]:
    """The modules (RECOMPUTE_MODULE_OPS, Megatron-LM's --recompute-modules names) a per-op recompute list
    re-runs: a module name stands for itself, an op name for the module holding it (the memory model drops
    a module's stored activations as a whole: cost.memory.recomputed_module_bytes)."""
    out: list[str] = []
    for name in names:
        modules = (
            [name]
            if name in RECOMPUTE_MODULE_OPS or name in POLICY_MODULES
            else [m for m, ops in RECOMPUTE_MODULE_OPS.items() if name in ops]
        )
        out += [m for m in modules[:1] if m not in out]
    return tuple(out)


def mark_recomputed(
    ops: list[Op], modules: tuple[str, ...], widths: tuple[float, float] = (0.0, 0.0)
) -> tuple[Op, ...]:
    """The ops with ``selective_recompute`` set exactly for those the modules re-run; under ``op_sac`` the
    fused GEMMs are split first (op_sac_split; ``widths`` the model's (q_width, kv_width))."""
    names = recomputed_op_names(modules)
    if OP_SAC in modules:
        return tuple(op_sac_split(ops, *widths, names))
    # an op whose flag already has the value is kept as is (equal to its replace; no copy)
    return tuple(
        op
        if op.selective_recompute == (op.name in names)
        else _with_recompute_flag(op, op.name in names)
        for op in ops
    )


@lru_cache(maxsize=256)
def recomputed_op_names(modules: tuple[str, ...]) -> frozenset[str]:
    """The op names the modules re-run (RECOMPUTE_MODULE_OPS; POLICY_MODULES: OP_SAC_RERUN for the per-op SAC
    policy, SAVE_DOTS_RERUN for MaxText's minimal_flash)."""
    table = {**RECOMPUTE_MODULE_OPS, **POLICY_MODULES}
    return frozenset(name for module in modules for name in table.get(module, ()))


def _with_recompute_flag(op: Op, flag: bool) -> Op:
    """``op._replace(selective_recompute=flag)``, constructed directly (the graph builders' hot path)."""
    return Op(
        op.name,
        op.kind,
        op.fwd_flops,
        op.fwd_bytes,
        op.bwd_flops,
        op.bwd_bytes,
        op.gemm_shape,
        flag,
        op.causal_fraction,
        op.attention_call,
        op.kernel,
        op.dtype,
        op.input_grad,
        op.attention_window,
        op.dgrad_epilogue,
        op.one_kernel,
    )


# torchtitan's per-op SAC re-runs every second mm (OP_SAC_SOURCE): of q, k, v the k, of gate and up the up
OP_SAC_PART_FLAGS = ((False, True, False), (False, True))


def op_sac_split(ops: list[Op], q_width: float, kv_width: float, names: frozenset[str]):
    """The dense swiglu layer's ops under torchtitan's per-op SAC (OP_SAC_SOURCE): its mm calls counted in
    order (wq, wk, wv, wo, w1, w3, w2), every second one re-run. The fused qkv_projection (n = (q + 2·kv)/t)
    becomes its three mm calls in the ratio q : kv : kv with k re-run; the fused mlp_in_projection (n = 2f/t)
    becomes w1 and w3 (f/t each) with w3 re-run (OP_SAC_PART_FLAGS); each part keeps the fused op's name (the
    name-keyed terms: cost.host scopes, cost.overlap userbuffers). Other ops are flagged by name (``names``):
    separate_projections with these flags."""
    return separate_projections(ops, q_width, kv_width, 2, OP_SAC_PART_FLAGS, names)


def separate_projections(
    ops: list[Op],
    q_width: float,
    kv_width: float,
    mlp_inputs: int,
    flags: tuple[tuple[bool, ...], tuple[bool, ...]] | None = None,
    names: frozenset[str] | None = None,
) -> list[Op]:
    """The fused qkv_projection as its q, k and v GEMMs (n in the ratio q : kv : kv) and the fused
    mlp_in_projection as its ``mlp_inputs`` GEMMs (SwiGLU: gate and up), for a stack whose model code runs
    them apart (module_impl projections separate, graph.xla_modules) or a policy that saves some parts
    (op_sac_split); FLOPs and bytes share out as n does (_gemm_parts). The parts keep the fused op's name;
    their recompute flags are ``flags`` (q, k, v; the MLP inputs), the fused op's without. With ``names``
    every other op is flagged by whether its name is in it (mark_recomputed's rule), else kept."""
    out: list[Op] = []
    for op in ops:
        if op.name == "qkv_projection" and op.gemm_shape is not None:
            parts = flags[0] if flags else (op.selective_recompute,) * 3
            out += _gemm_parts(op, (q_width, kv_width, kv_width), parts)
        elif op.name == "mlp_in_projection" and op.gemm_shape is not None and mlp_inputs > 1:
            parts = flags[1] if flags else (op.selective_recompute,) * mlp_inputs
            out += _gemm_parts(op, (1.0,) * mlp_inputs, parts)
        elif names is not None and op.selective_recompute != (op.name in names):
            out.append(_with_recompute_flag(op, op.name in names))
        else:
            out.append(op)
    return out


def _gemm_parts(op: Op, ratio: tuple[float, ...], flags: tuple[bool, ...]) -> list[Op]:
    """A fused GEMM (batch, m, n, k) as one GEMM per output slice, n split in ``ratio``; FLOPs and bytes
    share out as n does; each part's ``selective_recompute`` from ``flags``."""
    batch, m, n, k = op.gemm_shape
    total = sum(ratio)
    parts = []
    for share, flag in zip(ratio, flags):
        f = share / total
        parts.append(
            op._replace(
                fwd_flops=op.fwd_flops * f,
                fwd_bytes=op.fwd_bytes * f,
                bwd_flops=op.bwd_flops * f,
                bwd_bytes=op.bwd_bytes * f,
                gemm_shape=(batch, m, max(1, round(n * f)), k),
                selective_recompute=flag,
            )
        )
    return parts
