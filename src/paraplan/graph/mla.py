"""Attention half of a layer for the MoE block builder: MLA (DeepSeek-V2) or GQA, with windows.

MLA (DeepSeek-V2, arXiv:2405.04434, §2.1.2-2.1.3, Eq. 9-19): the query is compressed to d_q
(``q_lora_rank``) and expanded to a·(d_n+d_r); keys and values share one compressed latent of
width d_c (``kv_lora_rank``) plus a decoupled rotary key of width d_r, expanded to a·(d_n+d_v).
The core attention then runs with query/key head width d_n+d_r and value width d_v.

Tensor parallelism follows Megatron-Core's MLA layer (multi_latent_attention.py): the two down
projections are duplicated on every TP rank (their outputs are small), the up projections are
column-parallel and the output projection row-parallel, so the TP collectives are those of a GQA
layer's attention half. Activations of one micro-batch (bytes, one GPU) are listed per stored
tensor in :func:`attention_activation_bytes`.
"""

from __future__ import annotations

from paraplan.graph.cp_ring import cp_kv_ring
from paraplan.graph.ops import Collective, Op, norm_kernel, residual_kernel
from paraplan.graph.tp_collectives import tp_collectives
from paraplan.graph.transformer import (
    FLASH_BACKWARD_FLOP_RATIO,
    LayerShape,
    _gemm,
    _memory,
    attention_ops,
    query_key_ops,
    ulysses_collectives,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import attention_widths, mla_qk_head_dim


def window_fraction(window: int | None, keys: int, cp: int, chunked: bool = False) -> float:
    """Share of the score matrix a causal (windowed) attention computes: (1 + c/s)/2 for causal
    attention (as graph.transformer.attention_ops), (w·s − w(w−1)/2)/s² for a causal window of w
    keys (query i meets min(i+1, w) keys); ``chunked`` (Llama 4's chunked attention, blocks of w
    tokens each causal within itself; transformers modeling_llama4): (q·w(w+1)/2 + r(r+1)/2)/s² for
    s = q·w + r."""
    causal = 0.5 * (1.0 + cp / keys)
    if window is None or window >= keys:
        return causal
    if chunked:
        blocks, rest = divmod(keys, window)
        kept = blocks * window * (window + 1) / 2.0 + rest * (rest + 1) / 2.0
        return min(causal, kept / (keys * keys))
    return min(causal, (window * keys - window * (window - 1) / 2.0) / (keys * keys))


def layer_causal_fraction(
    window: int | None, keys: int, cp: int, window_share: float, chunked: bool = False
) -> tuple[float, float]:
    """(score-matrix share of a layer block standing for layers of which ``window_share`` are windowed, a
    windowed layer's): the block's is the share-weighted mean of window_fraction(window) and the causal
    fraction (exact for the sum over whole window patterns), each computed once; without a window both are
    the causal fraction."""
    full = window_fraction(None, keys, cp)
    if window is None:
        return full, full
    windowed = window_fraction(window, keys, cp, chunked)
    return window_share * windowed + (1.0 - window_share) * full, windowed


def mla_core_attention(
    model: ModelSpec, shape: LayerShape, window: int | None, window_share: float = 1.0
) -> Op:
    """Fused attention with query/key head width d_n+d_r and value width d_v: forward
    2·b·(a/t)·(s/c)·s·(d_qk + d_v) FLOPs (Q·Kᵀ and P·V; Dao et al. 2022), backward 2.5× (as
    graph.transformer.attention_ops); reads Q, K, V, writes O."""
    heads_local = model.heads // shape.attention_head_split
    q_tokens = shape.attention_queries
    keys = shape.seq_length
    qk, dv = mla_qk_head_dim(model), model.v_head_dim or 0
    fwd = 2.0 * shape.micro_batch * heads_local * q_tokens * keys * (qk + dv)
    io_bytes = shape.act_bytes * shape.micro_batch * q_tokens * heads_local * (2 * qk + 2 * dv)
    return Op(
        "flash_attention",
        "attention",
        fwd,
        io_bytes,
        FLASH_BACKWARD_FLOP_RATIO * fwd,
        2.0 * io_bytes,
        selective_recompute=True,
        causal_fraction=layer_causal_fraction(
            window, keys, shape.ring_chunks, window_share, model.window_kind == "chunked"
        )[0],
    )


def mla_ops(
    model: ModelSpec, shape: LayerShape, window: int | None = None, window_share: float = 1.0
) -> list[Op]:
    """MLA projections, latent norms, rotary and core attention of one layer (one micro-batch, one GPU)."""
    h, a, t, ab = model.hidden, model.heads, shape.tp, shape.act_bytes
    tokens = shape.local_tokens
    qk, dn, dr, dv, dc = (
        mla_qk_head_dim(model),
        model.qk_nope_head_dim or 0,
        model.qk_rope_head_dim or 0,
        model.v_head_dim or 0,
        model.kv_lora_rank or 0,
    )
    ops: list[Op] = []
    if model.q_lora_rank:
        dq = model.q_lora_rank
        ops += [
            _gemm("mla_q_down", 1, tokens, dq, h),
            _memory("mla_q_norm", 2 * ab * tokens * dq),
            _gemm("mla_q_up", 1, tokens, a * qk / t, dq),
        ]
    else:
        ops.append(_gemm("mla_q_proj", 1, tokens, a * qk / t, h))
    ops += [
        _gemm("mla_kv_down", 1, tokens, dc + dr, h),
        _memory("mla_kv_norm", 2 * ab * tokens * dc),
        _gemm("mla_kv_up", 1, tokens, a * (dn + dv) / t, dc),
        # rotary on the a·d_r query part and the shared d_r key, and the concatenation of the
        # key's no-rope and rope parts into a·(d_n+d_r): read + write of those tensors
        _memory("mla_rotary_concat", 2 * ab * tokens * (a * dr / t + dr + a * qk / t)),
        *core_attention_ops(model, shape, window, window_share),
    ]
    return ops


def gqa_ops(
    model: ModelSpec, shape: LayerShape, window: int | None = None, window_share: float = 1.0
) -> list[Op]:
    """QKV projection, rotary and core attention of a GQA layer (graph.transformer's ops), with the
    window's share of the score matrix for windowed layers."""
    t = shape.tp
    ops = [
        _gemm(
            "qkv_projection",
            1,
            shape.local_tokens,
            (model.q_width + 2 * model.kv_width) / t,
            model.hidden,
        )
    ]
    qk_elements = shape.local_tokens * (model.q_width + model.kv_width) / t
    ops += query_key_ops(model, qk_elements, shape.act_bytes, shape.local_tokens)
    return ops + core_attention_ops(model, shape, window, window_share)


def core_attention_ops(
    model: ModelSpec, shape: LayerShape, window: int | None = None, window_share: float = 1.0
) -> list[Op]:
    """The core attention of a layer, last in mla_ops / gqa_ops: MLA's fused attention (mla_core_attention), or
    GQA's (graph.transformer.attention_ops) with the window's share of the score matrix for windowed layers. The only
    ops of a layer that read the context-parallel split beyond the local tokens b·s/c (the queries per sequence and
    the ring's diagonal chunks: graph.transformer.cp_free_key)."""
    if model.is_mla:
        return [mla_core_attention(model, shape, window, window_share)]
    ops = []
    for op in attention_ops(model, shape):
        if op.kind == "attention" and window is not None:
            # the kernel call stays, and the block costs the mean of its window and full layers, each priced at
            # its own score share and tile visits (cost.compute.op_times_s, cost.attention.window_tile_factor)
            keys, cp, chunked = shape.seq_length, shape.ring_chunks, model.window_kind == "chunked"
            causal, windowed = layer_causal_fraction(window, keys, cp, window_share, chunked)
            op = op._replace(
                causal_fraction=causal,
                attention_window=(window, window_share, windowed)
                if window < keys and not chunked
                else None,
            )
        ops.append(op)
    return ops


def attention_half_ops(
    model: ModelSpec, shape: LayerShape, window: int | None = None, window_share: float = 1.0
) -> list[Op]:
    """Input norm, attention (MLA or GQA), output projection and residual of one layer."""
    h, ab = model.hidden, shape.act_bytes
    mask = 1.0 if model.has_dropout else 0.0
    _, _, v_width = attention_widths(model)
    out_in = v_width if model.is_mla else model.q_width
    core = (
        mla_ops(model, shape, window, window_share)
        if model.is_mla
        else gqa_ops(model, shape, window, window_share)
    )
    return [
        _memory(
            "input_norm",
            2 * ab * shape.sp_tokens * h,
            kernel=norm_kernel(model, shape.sp_tokens, h),
        ),
        *core,
        _gemm("attention_projection", 1, shape.local_tokens, h, out_in / shape.tp),
        _memory(
            "attention_residual",
            (3 * ab + mask) * shape.sp_tokens * h,
            kernel=residual_kernel(model, shape.sp_tokens, h),
        ),
    ]


def attention_half_collectives(model: ModelSpec, shape: LayerShape) -> list[Collective]:
    """TP collectives of the attention half (one column-parallel input, one row-parallel output;
    Shoeybi et al. 2019 Fig. 4; Korthikanti et al. 2022 §4.2.2 with SP) and the context-parallel
    K/V ring (Liu et al. 2023): K and V of this GPU's chunk."""
    out = tp_collectives(shape.local_tokens, model.hidden, shape.act_bytes, shape, calls=1)
    if shape.ulysses:
        out += ulysses_collectives(shape, *attention_widths(model))
    else:
        out += context_ring_collectives(model, shape)
    return out


def context_ring_collectives(model: ModelSpec, shape: LayerShape) -> list[Collective]:
    """The context-parallel K/V ring of the attention half (Liu et al. 2023; none with cp 1): this GPU's K and V chunk
    passed around the cp group on the stack's ring (graph.cp_ring.cp_kv_ring with the layer's key and value widths;
    search.expert_floors.ring_transfer_floor_s floors it)."""
    if shape.cp <= 1 or shape.ulysses:
        return []
    _, k_width, v_width = attention_widths(model)
    return [cp_kv_ring(model, shape, shape.local_tokens, (k_width, v_width))]


def attention_output_bytes(shape: LayerShape) -> tuple[float, float]:
    """(projection copy, attention copy): bytes per element of the attention output a layer keeps for backward,
    the output projection's saved input and the attention kernel's own saved output where it is a separate tensor.

    Fused attention saves its output in the activation dtype beside Q, K, V and the softmax statistics: Transformer
    Engine v2.12 (5671fd36) transformer_engine/pytorch/attention/dot_product_attention/backends.py
    ``FusedAttnFunc.forward``, without fp8 attention (recipe fp8_dpa False, the default), ``qkvo_tensors =
    (q, k, v, out)`` and ``aux_ctx_tensors`` go to ``ctx.save_for_backward``; flash-attn's ``FlashAttnFunc`` and
    PyTorch's SDPA flash backward take the output too. The projection (TE ``_Linear.forward``,
    module/linear.py@5671fd36) saves, in fp8 and FP4 recipes, its own quantised copy (``saved_inputmat``, the
    columnwise data only: gemm_input_bytes g) unless ``save_original_input``, which saves the bf16 input, the very
    tensor the attention saved (TE rejects it under DelayedScaling). Megatron-Core sets it on ``linear_proj``
    for fp8 recipes other than delayed (TE >= 2.6) and FP4 (TE >= 2.7): ``Attention.__init__`` and
    ``MultiLatentAttention.__init__`` (megatron/core/transformer/attention.py, multi_latent_attention.py, from
    781e765818, core_v0.14.0; at d7288711, b0cc2706, cd4afffa6: "the output of the fused core_attn is saved by
    itself, and linear_proj also saves the quantized tensor of this output").

    So, a the activation bytes: (g, a) where the projection keeps its quantised copy (shape.proj_quantised_copy,
    an fp8 / FP4 dtype) beside flash attention's output, (g, 0) beside unfused attention (its last batched GEMM
    saves its inputs, not its output); (a, 0) otherwise: in bf16 both save the one tensor."""
    ab, gin = float(shape.act_bytes), shape.gemm_input_bytes
    if gin == ab or not shape.proj_quantised_copy:
        return ab, 0.0
    return gin, (ab if shape.attention == "flash" else 0.0)


def attention_activation_bytes(
    model: ModelSpec, shape: LayerShape, modules: tuple[str, ...], selective: bool
) -> float:
    """Bytes the attention half keeps for backward (one micro-batch, one GPU), Korthikanti et al.
    2022 §4.1 generalised. Outside TP (SP-sharded): input-norm input (2 per h) and the projections'
    input (a GEMM input: LayerShape.gemm_input_bytes, 1 in fp8 recipes); MLA adds the duplicated
    latents: query latent d_q and its norm output, the key/value latent d_c+d_r and its norm output;
    inside TP: Q, K, V as the core attention saves them, the output-projection input, and flash's
    fp32 log-sum-exp (4·a/t) with, in fp8 / FP4 recipes whose projection keeps its quantised copy, the
    attention's own bf16 output (``attention_output_bytes``). ``mla_up_proj`` drops Q/K/V (recomputed
    from the latents; Megatron-LM --recompute-modules mla_up_proj); ``core_attn`` / ``selective`` drop the
    flash statistics and that output (the core re-runs from the kept Q/K/V); ``layernorm`` drops the norm input.

    MLA keeps Q, K, V and not the up-projection outputs (Megatron-Core
    megatron/core/transformer/multi_latent_attention.py@d7288711 (the Megatron-Bridge v0.4.0 pin),
    ``qkv_up_proj_and_rope_apply``): the up-projection GEMMs save only their inputs (the latents);
    the split views, ``torch.cat`` and ``.contiguous()`` save nothing; the unfused rotary
    (models/common/embeddings/rope_utils.py ``_apply_rotary_pos_emb_bshd``, t·cos + rot(t)·sin
    with cos/sin not requiring grad) and the fused one (fusions/fused_mla_yarn_rope_apply.py
    ``ApplyMLARotaryEmbQ`` / ``ApplyMLARotaryEmbKV``, ``ctx.save_for_backward(cos, sin)``) save
    only the s·d_r cos/sin tables; so the up-projection outputs q (a·(d_n+d_r)) and kv
    (a·(d_n+d_v)) die after the forward and the contiguous query, key and value the core attention
    saves are the only expanded tensors kept. With ``mla_up_proj`` (``CheckpointWithoutOutput``,
    tensor_parallel/random.py@d7288711) those Q/K/V storages are resized to 0 after the core
    attention and recomputed in backward."""
    h, a, t, ab, gin = model.hidden, model.heads, shape.tp, shape.act_bytes, shape.gemm_input_bytes
    tokens, sp = shape.local_tokens, shape.sp_tokens
    q_w, k_w, v_w = attention_widths(model)
    norm_in = 0.0 if "layernorm" in modules else ab * sp * h
    replicated = norm_in + gin * sp * h  # norm input, projection (GEMM) input (stored SP-sharded)
    qkv = ab * tokens * (q_w + k_w + v_w) / t
    stats = 4.0 * tokens * a / t
    proj_copy, attention_copy = attention_output_bytes(shape)
    out_elements = tokens * (v_w if model.is_mla else model.q_width) / t
    out_in = proj_copy * out_elements
    internals = stats + attention_copy * out_elements
    core = qkv + (0.0 if (selective or "core_attn" in modules) else internals)
    if model.is_mla:
        dq, dc, dr = model.q_lora_rank or 0, model.kv_lora_rank or 0, model.qk_rope_head_dim or 0
        # each latent (the norm's input, ab) and its norm output (the up-projection's GEMM input, gin); the rope key ab
        latents = tokens * (ab * (dq + dc + dr) + gin * (dq + dc))
        if "mla_up_proj" in modules:
            core -= qkv
        return replicated + latents + core + out_in
    return replicated + core + out_in
