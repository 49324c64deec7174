"""Build the op graph of a decoder layer, the input embedding and the LM head, per GPU.

Shapes follow Megatron-LM's tensor parallelism (Shoeybi et al. 2019, §3): QKV and MLP-in are
column-parallel (outputs split by t), attention-out and MLP-out row-parallel (inputs split by t),
the embedding and LM head vocab-parallel. With sequence parallelism (Korthikanti et al. 2022,
§4.2.2) the norms, dropouts and residuals work on s/t tokens and each all-reduce becomes a
reduce-scatter plus an all-gather. With context parallelism each GPU holds s/c tokens of every
sequence and receives the keys/values of the other c-1 chunks by ring exchange (Liu et al. 2023).
"""

from __future__ import annotations

from typing import NamedTuple
from functools import lru_cache, wraps

from paraplan.graph.ops import Collective, ExpertShape, LayerGraph, Op, mark_recomputed
from paraplan.graph.ops import activation_kernel, norm_kernel, query_key_kernels, residual_kernel
from paraplan.graph.cp_ring import cp_kv_ring, ring_merge_ops
from paraplan.graph.losses import loss_impl
from paraplan.graph.megatron_eager import eager_layer_ops
from paraplan.graph.megatron_softmax import scores_family
from paraplan.graph.tp_collectives import gathered_kv_bytes, kv_gather_collectives, tp_collectives
from paraplan.graph.ops import OP_SAC, separate_projections
from paraplan.graph.xla_modules import FP32_LOGITS, ONE_HOT_GEMM, SEPARATE_PROJECTIONS
from paraplan.graph.xla_modules import fp32_logits_op, one_hot_embedding_op
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import LOW_PRECISION, QUANTISED_INPUT_BYTES
from paraplan.graph.weight_params import (  # noqa: F401 (re-exported: the blocks and the tests read them here)
    LayerParamParts,
    embedding_weight_params,
    layer_param_parts,
    layer_weight_params,
    lm_head_weight_params,
)

# Bytes per activation element: 2 in 16-bit and fp8 training (TE keeps them in bf16 between GEMMs), 4 in fp32.
ACTIVATION_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2, "nvfp4": 2, "mxfp4": 2}

# FlashAttention-2 backward runs 5 matmuls for the forward's 2 (Dao 2023, arXiv:2307.08691, §3.1.2).
FLASH_BACKWARD_FLOP_RATIO = 2.5


class LayerShape(NamedTuple):
    """The plan knobs that change one layer's per-GPU work. A NamedTuple, not a dataclass: the cost caches key on it
    ~90 K times in a DeepSeek-V3 search, and a tuple hashes and compares without a Python call."""

    tp: int
    cp: int
    micro_batch: int
    seq_length: int
    sequence_parallel: bool
    attention: str  # "flash" | "unfused"
    dtype: str
    expert: ExpertShape = ExpertShape()  # MoE knobs (graph/moe.py); the default for dense models
    # modules selective recomputation re-runs (() = core attention)
    recompute_modules: tuple[str, ...] = ()
    # tensor-parallel layout (specs/tp_layout.py): "1d"; "2d" = SUMMA on tp_rows × tp/tp_rows (tp the grid size, SP:
    # activations split over the whole grid) with summa_panels panels; "2d-seq" = K/V all-gathered over cp (graph/summa.py)
    tp_layout: str = "1d"
    tp_rows: int = 1
    summa_panels: int = 1
    cp_algorithm: str = "ring"  # "ring": K/V ring exchange; "all-to-all": DeepSpeed-Ulysses
    # the stack's (role, implementation) pairs other than fused (graph.eager_modules): what autograd keeps
    module_impl: tuple[tuple[str, str], ...] = ()
    # whose K/V ring runs the attention under CP (RuntimeCosts.cp_ring): "transformer-engine" | "torch-sdpa"
    cp_ring: str = "transformer-engine"
    # fp8 runs all-gather the SP GEMM inputs and the row-parallel output gradients in fp8 (torchao)
    tp_fp8_gather: bool = False
    fused_grouped_mlp: bool = False  # TE's fused grouped MLP (graph.moe_mlp.fuses_grouped_mlp)
    hybridep_budget: bool = False  # HybridEP static budget (moe_mlp.host_synchronises)
    paged_stash: float = 0.0  # MoE paged stash's buffer factor, 0 = off (moe_mlp.paged_stash_op)
    proj_quantised_copy: bool = False  # out-projection's own fp8/FP4 input (graph.mla)

    @property
    def ulysses(self) -> bool:
        """Context parallelism by all-to-all over the heads (DeepSpeed-Ulysses) rather than a K/V ring."""
        return self.cp > 1 and self.cp_algorithm == "all-to-all"

    @property
    def attention_head_split(self) -> int:
        """Ways the heads are split for the core attention: t, and c more under Ulysses (Jacobs et al. 2023 §3.1)."""
        return self.tp * (self.cp if self.ulysses else 1)

    @property
    def attention_queries(self) -> int:
        """Queries per sequence the core attention of one GPU handles: s/c chunks of the ring, all s under Ulysses."""
        return self.seq_length if self.ulysses else self.local_tokens // self.micro_batch

    @property
    def ring_chunks(self) -> int:
        """Diagonal chunks the causal attention computes whole: c with the K/V ring, 1 under Ulysses."""
        return 1 if self.ulysses else self.cp

    @property
    def local_tokens(self) -> int:
        """Tokens of one micro-batch on one GPU before the sequence-parallel split: b·s/c."""
        return self.micro_batch * self.seq_length // self.cp

    @property
    def sp_tokens(self) -> float:
        """Tokens handled by norms / dropouts / residuals on one GPU: b·s/c, divided by t with SP."""
        return self.local_tokens / self.tp if self.sequence_parallel else float(self.local_tokens)

    @property
    def act_bytes(self) -> int:
        return ACTIVATION_BYTES[self.dtype]

    @property
    def gemm_input_bytes(self) -> float:
        """Bytes per element of a GEMM input kept for the weight gradient: 1 in fp8 recipes (Transformer
        Engine's Linear / LayerNormLinear quantise the input and save the fp8 copy for backward, not the
        bf16 one: TE documentation, "Using FP8 with Transformer Engine"); FP4 recipes keep the 4-bit
        copy with its block scales (specs.system.QUANTISED_INPUT_BYTES); else the activation width."""
        return QUANTISED_INPUT_BYTES.get(self.dtype, float(self.act_bytes))


@lru_cache(maxsize=65536)
def with_expert(shape: LayerShape, expert: ExpertShape) -> LayerShape:
    """``replace(shape, expert=expert)``, once per (shape, expert): the costing caches derive the same shapes again
    and again (the expert-free one, the one without a2a overlap), and a repeated key compares by identity."""
    return shape if shape.expert == expert else shape._replace(expert=expert)


def cp_free_key(shape: LayerShape) -> tuple:
    """What a layer's ops other than its core attention (graph.mla.core_attention_ops) read of the shape: with the
    K/V ring every GEMM, norm, router and expert op sees the local tokens b·s/c alone, so (cp, micro-batch) enter only
    through them; the whole shape under Ulysses or a 2D layout (the heads they split and SUMMA's grid read cp).
    Two shapes equal on it give the same other ops (tests/search/test_cp_shared_floors.py)."""
    if shape.ulysses or shape.tp_layout != "1d":
        return (shape,)
    return (
        shape.tp,
        shape.local_tokens,
        shape.seq_length,
        shape.sequence_parallel,
        shape.attention,
        shape.dtype,
        shape.expert,
        shape.recompute_modules,
        shape.cp_algorithm,
        shape.module_impl,
        shape.cp_ring,
        shape.tp_fp8_gather,
        shape.fused_grouped_mlp,
        shape.hybridep_budget,
        shape.paged_stash,
    )


CP_FREE_MEMO_MAX = 16384  # entries a cp_free_memo keeps (a bound, as an lru cache's)


def cp_free_memo(builder):
    """``builder(model, shape, *rest)`` memoised on (model, cp_free_key(shape), *rest): for a builder whose result
    reads of the shape only fields of cp_free_key (each use states which), so that shapes equal on the key share one
    result, the same object (the graph caches keyed by identity, ops.weight_tensor_stats, then walk it once). Has
    ``cache_clear``, as an lru cache (step.build.COLD_CACHES)."""
    memo: dict = {}

    @wraps(builder)
    def built(model, shape: LayerShape, *rest):
        key = (model, cp_free_key(shape), *rest)
        found = memo.get(key)
        if found is None:
            if len(memo) >= CP_FREE_MEMO_MAX:
                memo.clear()
            found = memo[key] = builder(model, shape, *rest)
        return found

    built.cache_clear = memo.clear
    return built


def _gemm(name: str, batch: int, m: int, n: float, k: float, kind: str = "gemm") -> Op:
    """Dense GEMM: forward 2·m·n·k FLOPs; backward = dgrad + wgrad = 2× forward (Narayanan et al. 2021, §5.1)."""
    flops = 2.0 * batch * m * n * k
    return Op(name, kind, flops, 0.0, 2.0 * flops, 0.0, (batch, int(m), int(n), int(k)))


# Vector (non-tensor-core) FLOPs per element of the element-wise kernels, counted from each
# kernel's formula; the roofline (cost.compute.memory_time_s) charges them at the accelerator's
# vector_flops, which matters only where HBM is fast and vector units slow.
FLOPS_PER_ELEMENT = {
    "layernorm": 8.0,  # mean (1), variance (3), normalise (2), affine (2): Ba et al. 2016, Eq. 3-4
    "rmsnorm": 4.0,  # square-sum (2), scale (1), gain (1): Zhang & Sennrich 2019, Eq. 4
    "rotary": 3.0,  # x·cos + rotate(x)·sin: 2 multiplies, 1 add (Su et al. 2021, Eq. 34)
    "softmax": 7.0,  # scale, mask, max-subtract, exp, sum, divide (+1 for the dropout multiply)
    "residual": 2.0,  # dropout scale-multiply and the residual add
    "gelu": 8.0,  # tanh approximation: x³, 3 multiplies, 2 adds, tanh (Hendrycks & Gimpel 2016, §2)
    "swiglu": 5.0,  # SiLU x/(1+e^-x): exp, add, divide, multiply; times the up projection
    "cross_entropy": 4.0,  # max-subtract, exp, sum, log-softmax pick per logit
}


def _memory(name: str, fwd_bytes: float, fwd_flops: float = 0.0, kernel: tuple | None = None) -> Op:
    """Element-wise / normalisation kernel: bound by HBM traffic (or by vector FLOP/s, roofline);
    backward reads saved inputs and incoming gradients and writes gradients, taken as 2× the
    forward bytes and FLOPs (Calculon's convention for element-wise layers, Isaev et al. 2023, §3).
    ``kernel``: the measured eager kernel it is (Op.kernel), for stacks that run it unfused."""
    return Op(name, "memory", fwd_flops, fwd_bytes, 2.0 * fwd_flops, 2.0 * fwd_bytes, kernel=kernel)


def _norm_flops(model: ModelSpec, elements: float) -> float:
    return FLOPS_PER_ELEMENT[model.norm] * elements


def _every_layer_window(model: ModelSpec, keys: int, causal: float):
    """Op.attention_window of a model whose every layer has a causal sliding window shorter than ``keys``
    (not chunked): (w, 1, causal); None otherwise (graph.mla.core_attention_ops sets window patterns')."""
    w = model.sliding_window
    if w is None or w >= keys or model.window_kind == "chunked":
        return None
    return (w, 1.0, causal)


def attention_ops(model: ModelSpec, shape: LayerShape) -> list[Op]:
    """Core attention ops: scores Q·Kᵀ, softmax (+mask, dropout), probabilities·V.

    Unfused (Megatron-LM "core attention"): two batched GEMMs of 2·b·(a/t)·(s/c)·s·d FLOPs each, and
    a fused scale-mask-softmax plus dropout over the b·(a/t)·(s/c)·s scores (or graph.eager_modules' kernels).
    Fused flash attention (Dao et al. 2022): the same matmul FLOPs with only the causal half of
    the score tiles computed, no score matrix in HBM; backward 2.5× forward FLOPs."""
    # ring: s/c queries per sequence on this GPU meet all s keys over the c ring steps; Ulysses: after the
    # all-to-all each GPU holds every token of a/(t·c) heads (Jacobs et al. 2023, §3.1)
    heads_local = model.heads // shape.attention_head_split
    q_tokens = shape.attention_queries
    kv_tokens = shape.seq_length
    batch = shape.micro_batch * heads_local
    d = model.d_head
    ab = shape.act_bytes
    if shape.attention == "flash":
        fwd = 4.0 * batch * q_tokens * kv_tokens * d
        # causal: (n+1)/2n of the n×n scores, (c-1)/2n more for c ring chunks; windows: mean_visible_keys
        causal = (
            model.mean_visible_keys(kv_tokens) / kv_tokens
            + 0.5 * (shape.ring_chunks - 1) / kv_tokens
        )
        qkvo_bytes = ab * shape.local_tokens * (2 * model.q_width + 2 * model.kv_width) / shape.tp
        return [
            Op(
                "flash_attention",
                "attention",
                fwd,
                qkvo_bytes,
                FLASH_BACKWARD_FLOP_RATIO * fwd,
                2.0 * qkvo_bytes,
                selective_recompute=True,
                causal_fraction=causal,
                # with context parallelism each ring step pairs an s/c query chunk with an s/c kv chunk
                attention_call=(q_tokens, kv_tokens // shape.ring_chunks, d, True),
                # a window on every layer: the kernel's tile visits (cost.attention.window_tile_factor)
                attention_window=_every_layer_window(model, kv_tokens, causal),
            )
        ] + ring_merge_ops(model, shape)  # the K/V ring's partial-output merges
    scores = batch * q_tokens * kv_tokens  # elements of the score matrix on this GPU
    dropout_mask = 1.0 if model.has_dropout else 0.0
    family = (scores_family(model, shape), batch * q_tokens, kv_tokens)
    softmax_bytes = ab * scores * 2 + (
        ab * scores * 2 + dropout_mask * scores if model.has_dropout else 0.0
    )
    ops = [
        _gemm("attention_scores", batch, q_tokens, kv_tokens, d),
        _memory("softmax_dropout", softmax_bytes, FLOPS_PER_ELEMENT["softmax"] * scores, family),
        _gemm("attention_over_values", batch, q_tokens, d, kv_tokens),
    ]
    return [o._replace(selective_recompute=True) for o in ops]


def fp8_cast_op(model: ModelSpec, shape: LayerShape) -> Op:
    """FP8 casts of GEMM operands (Transformer Engine's delayed-scaling recipe; Micikevicius et al.
    2022, arXiv:2209.05433): every activation input in forward and every output gradient in
    backward is read in bf16 (2 B) and written in fp8 (1 B; FP4 recipes: its 4-bit bytes with block
    scales, specs.system.QUANTISED_INPUT_BYTES); weights are cast once per step (ignored)."""
    t, h, f = shape.tp, model.hidden, model.ffn_hidden
    tokens = shape.local_tokens
    fwd_elems = tokens * (h + model.q_width / t + h + f / t)
    bwd_elems = tokens * (
        (model.q_width + 2 * model.kv_width) / t + h + model.mlp_input_projections * f / t + h
    )
    per_elem = 2.0 + QUANTISED_INPUT_BYTES.get(shape.dtype, 1.0)
    kernel = ("fp8_cast", float(tokens), fwd_elems / tokens)
    fwd, bwd = per_elem * fwd_elems, per_elem * bwd_elems
    return Op("fp8_casts", "memory", 0.0, fwd, 0.0, bwd, kernel=kernel)


def query_key_ops(model: ModelSpec, qk_elements: float, ab: int, tokens: float) -> list[Op]:
    """Element-wise ops on the q and k heads of one GPU (``qk_elements`` = tokens·(q+kv) there):
    the per-head RMSNorm of Qwen3 / Gemma 3 (transformers Qwen3Attention ``q_norm``/``k_norm``)
    and the rotary embedding (Su et al. 2021), each reading and writing its elements once; ``tokens``
    the rows they work on (their Op.kernel, graph.ops.query_key_kernels)."""
    ops, (norm, rotary) = [], query_key_kernels(model, tokens, qk_elements / tokens)
    if model.qk_norm:
        ops.append(_memory("qk_norm", 2 * ab * qk_elements, _norm_flops(model, qk_elements), norm))
    if not model.learned_positions:
        flops = FLOPS_PER_ELEMENT["rotary"] * qk_elements
        ops.append(_memory("rotary_embedding", 2 * ab * qk_elements, flops, rotary))
    return ops


@lru_cache(maxsize=4096)
def decoder_layer_1d(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """All ops of one decoder layer for one micro-batch on one GPU (pre-norm GPT / Llama block) under
    1D tensor parallelism (and 2d-seq's context exchange); graph.layers.decoder_layer picks this or
    the 2D SUMMA grid's graph/summa.py."""
    before, after = _outer_ops(model, shape)
    h, t, ab, tokens = model.hidden, shape.tp, shape.act_bytes, shape.local_tokens
    extra = eager_layer_ops(model, tokens, t, ab, shape.module_impl, shape.attention)
    ops = [*before, *attention_ops(model, shape), *after, *extra]
    collectives = tp_collectives(tokens, h, ab, shape)
    if shape.cp > 1 and shape.tp_layout == "2d-seq":
        collectives += context_gather_collectives(model, shape)
    elif shape.ulysses:
        collectives += ulysses_collectives(shape, model.q_width, model.kv_width, model.kv_width)
    elif shape.cp > 1:
        collectives.append(cp_kv_ring(model, shape, tokens))
    if SEPARATE_PROJECTIONS in shape.module_impl and OP_SAC not in shape.recompute_modules:
        # q, k, v and the MLP inputs as separate GEMMs (op_sac splits them itself)
        ops = separate_projections(ops, model.q_width, model.kv_width, model.mlp_input_projections)
    if shape.recompute_modules:  # selective recompute by module (Megatron-LM --recompute-modules)
        ops = list(mark_recomputed(ops, shape.recompute_modules, (model.q_width, model.kv_width)))
    return LayerGraph(
        "decoder_layer", tuple(ops), tuple(collectives), layer_weight_params(model, t)
    )


@cp_free_memo
def _outer_ops(model: ModelSpec, shape: LayerShape) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """decoder_layer_1d's ops before and after its core attention (attention_ops). They read the model, t, the local
    tokens b·s/c, SP (sp_tokens) and the dtype (act_bytes, LOW_PRECISION, fp8_cast_op's quantised bytes) alone,
    each a field of cp_free_key: memoised on it (Llama 3.1 405B's search: 880 layer shapes, 120 keys)."""
    h, f, t = model.hidden, model.ffn_hidden, shape.tp
    tokens = shape.local_tokens
    sp_tokens = shape.sp_tokens
    ab = shape.act_bytes
    mask = 1.0 if model.has_dropout else 0.0
    qkv_width = (model.q_width + 2 * model.kv_width) / t
    ops: list[Op] = [
        _memory(
            "input_norm",
            2 * ab * sp_tokens * h,
            _norm_flops(model, sp_tokens * h),
            norm_kernel(model, sp_tokens, h),
        ),
        _gemm("qkv_projection", 1, tokens, qkv_width, h),
    ]
    ops += query_key_ops(model, tokens * (model.q_width + model.kv_width) / t, ab, tokens)
    after: list[Op] = [
        _gemm("attention_projection", 1, tokens, h, model.q_width / t),
        _memory(
            "attention_residual",
            (3 * ab + mask) * sp_tokens * h,
            FLOPS_PER_ELEMENT["residual"] * sp_tokens * h,
            residual_kernel(model, sp_tokens, h),
        ),
        _memory(
            "post_attention_norm",
            2 * ab * sp_tokens * h,
            _norm_flops(model, sp_tokens * h),
            norm_kernel(model, sp_tokens, h),
        ),
        _gemm("mlp_in_projection", 1, tokens, model.mlp_input_projections * f / t, h),
        _memory(
            "mlp_activation",
            ab * tokens * f / t * (3 if model.mlp == "swiglu" else 2),
            FLOPS_PER_ELEMENT[model.mlp] * tokens * f / t,
            activation_kernel(model, tokens, f / t),
        ),
        _gemm("mlp_out_projection", 1, tokens, h, f / t),
        _memory(
            "mlp_residual",
            (3 * ab + mask) * sp_tokens * h,
            FLOPS_PER_ELEMENT["residual"] * sp_tokens * h,
            residual_kernel(model, sp_tokens, h),
        ),
    ]
    if shape.dtype in LOW_PRECISION:
        after.append(fp8_cast_op(model, shape))
    return tuple(ops), tuple(after)


def ulysses_collectives(
    shape: LayerShape, q_width: float, k_width: float, v_width: float
) -> list[Collective]:
    """DeepSpeed-Ulysses (Jacobs et al. 2023, §3.1): all-to-alls over the cp group of this GPU's Q, K, V
    before the attention (sequence-split → head-split) and of the output after it; the same four on the
    gradients in backward. Each buffer is the GPU's local tensor (b·s/c tokens × width/t, half precision),
    of which (c−1)/c leaves (cost.comm.all_to_all_split_bytes); the attention waits for them (exposed)."""
    local = shape.act_bytes * shape.local_tokens / shape.tp
    return [
        Collective("cp_ulysses_q", "cp", "all_to_all", float(local * q_width), 1, 1),
        Collective("cp_ulysses_k", "cp", "all_to_all", float(local * k_width), 1, 1),
        Collective("cp_ulysses_v", "cp", "all_to_all", float(local * v_width), 1, 1),
        # the output: every query head's value-width result, q·(v/k) (a·d for GQA, a·d_v for MLA)
        Collective(
            "cp_ulysses_out", "cp", "all_to_all", float(local * q_width * v_width / k_width), 1, 1
        ),
    ]


@cp_free_memo
def embedding_block(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """Vocab-parallel embedding lookup (+ learned positions, dropout) on the first stage; its output
    is all-reduced over TP (reduce-scattered with SP), Shoeybi et al. 2019 §3. A stack whose embedding is a
    one-hot GEMM (module_impl embedding one-hot-gemm, graph.xla_modules) runs that GEMM instead. Reads of the shape t,
    the local tokens b·s/c, SP, the dtype and module_impl: memoised on cp_free_key (cp_free_memo)."""
    h, ab = model.hidden, shape.act_bytes
    tokens = shape.local_tokens
    lookup_bytes = ab * tokens * h * (3 if model.learned_positions else 2)
    if ONE_HOT_GEMM in shape.module_impl:
        ops = (one_hot_embedding_op(tokens, model.vocab / shape.tp, h, shape.dtype),)
    else:
        ops = (Op("embedding_lookup", "memory", 0.0, lookup_bytes, 0.0, 2.0 * ab * tokens * h),)
    coll: list[Collective] = []
    if shape.tp > 1:
        kind = "reduce_scatter" if shape.sequence_parallel else "all_reduce"
        coll.append(Collective("embedding_" + kind, "tp", kind, float(ab * tokens * h), 1, 0))
    return LayerGraph("embedding", ops, tuple(coll), embedding_weight_params(model, shape.tp))


@cp_free_memo
def lm_head_block(
    model: ModelSpec, shape: LayerShape, shares_stage_with_embedding: bool
) -> LayerGraph:
    """Final norm, vocab-parallel output GEMM and cross-entropy on the last stage.

    The loss works on b·(s/c)·V/t logits per GPU, reading and writing the bytes per logit of the
    implementation the stack runs (shape.module_impl's loss, graph.losses.LOSS_IMPLS: by default
    fp32 logits read and written about three times forward and twice backward, Megatron-LM's
    vocab-parallel cross-entropy), plus small TP all-reduces of per-token statistics. A stack whose logits
    GEMM is an fp32 dot (module_impl logits fp32-dot, graph.xla_modules) runs it at the TF32 rate. Reads of the
    shape t, the local tokens b·s/c, SP (sp_tokens), the dtype and module_impl: memoised on cp_free_key
    (cp_free_memo)."""
    h, ab, t = model.hidden, shape.act_bytes, shape.tp
    tokens = shape.local_tokens
    logits = tokens * model.vocab / t
    loss = loss_impl(shape.module_impl)
    head = _gemm("lm_head", 1, tokens, model.vocab / t, h)
    ops = (
        _memory(
            "final_norm",
            2 * ab * shape.sp_tokens * h,
            _norm_flops(model, shape.sp_tokens * h),
            norm_kernel(model, shape.sp_tokens, h),
        ),
        fp32_logits_op(head) if FP32_LOGITS in shape.module_impl else head,
        Op(
            "cross_entropy",
            "memory",
            FLOPS_PER_ELEMENT["cross_entropy"] * logits,
            loss.fwd_bytes * logits,
            FLOPS_PER_ELEMENT["cross_entropy"] * logits,
            loss.bwd_bytes * logits,
            kernel=("cross_entropy", float(tokens), model.vocab / t),
        ),
    )
    coll: list[Collective] = []
    if t > 1:
        if shape.sequence_parallel:
            coll.append(
                Collective("lm_head_all_gather", "tp", "all_gather", float(ab * tokens * h), 1, 1)
            )
        coll.append(
            Collective("cross_entropy_all_reduce", "tp", "all_reduce", 3 * 4.0 * tokens, 1, 0)
        )
    return LayerGraph(
        "lm_head", ops, tuple(coll), lm_head_weight_params(model, t, shares_stage_with_embedding)
    )


def mlp_intermediate_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Bytes per element of the MLP's inner width kept for backward: the fc1 output at the activation
    width, one per input projection (ModelSpec.mlp_input_projections; SwiGLU: gate and up, 2; GeLU: its input, 1) plus the fc2 GEMM input at gemm_input_bytes (the
    SwiGLU product / the GeLU output): 3·ab (SwiGLU) or 2·ab in bf16, 2·2+1 / 2+1 in fp8 (Korthikanti
    et al. 2022 §4.1; Transformer Engine saves fp8 GEMM inputs)."""
    return shape.act_bytes * model.mlp_input_projections + shape.gemm_input_bytes


def context_gather_collectives(model: ModelSpec, shape: LayerShape) -> list[Collective]:
    """2d-seq's exchange over cp (module docstring): K and V of all s tokens for the tp rank's heads,
    b·s·2·kv_width/t elements gathered (gathered_kv_bytes); replaces the ring (decoder_layer_1d)."""
    return kv_gather_collectives("cp", float(gathered_kv_bytes(model, shape)), shape.cp)
