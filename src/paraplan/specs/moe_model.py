"""Mixture-of-experts, MLA and MTP shape of a :class:`~paraplan.specs.model.ModelSpec` (issue 9).

The fields live on ``ModelSpec`` (its "mixture-of-experts" block); this module holds their rules
and everything derived from them, so ``specs/model.py`` stays one place for the dense shape:

* which layers are MoE: the first ``dense_layers`` are dense (MLP width ``ffn_hidden``); after
  them layer ``i`` (0-based) is MoE when ``(i − dense_layers + 1) % moe_layer_interval == 0``
  (every layer for interval 1, as DeepSeek-V3's ``first_k_dense_replace`` and Qwen-MoE's
  ``decoder_sparse_step``; Megatron-LM's ``moe_layer_freq`` list states the same pattern);
* parameters per layer by part, total and active per token: a token passes through the
  ``top_k`` routed experts it is sent to and every shared expert (Fedus et al. 2022, Switch
  Transformer §2; Dai et al. 2024, DeepSeekMoE §3), so active = total − (experts − top_k)·expert;
* MLA widths (DeepSeek-V2, arXiv:2405.04434, §2.1.2): queries and keys are
  ``qk_nope_head_dim + qk_rope_head_dim`` wide per head, values ``v_head_dim``.

Notation: h hidden, a heads, E experts, k top_k, f_e ``moe_ffn_hidden``, f_s ``shared_ffn_hidden``,
p = 2 for gated MLPs (SwiGLU gate and up) else 1, d_c ``kv_lora_rank``, d_q ``q_lora_rank``,
d_n / d_r / d_v the MLA head widths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from paraplan.specs.model import ModelSpec

MOE_ONLY_FIELDS = (
    "top_k",
    "moe_ffn_hidden",
    "shared_experts",
    "shared_ffn_hidden",
    "dense_layers",
    "router_groups",
    "router_group_topk",
)
MLA_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_FIELD_DEFAULTS = {
    "top_k": 0,
    "moe_ffn_hidden": None,
    "shared_experts": 0,
    "shared_ffn_hidden": None,
    "dense_layers": 0,
    "router_groups": None,
    "router_group_topk": None,
}


def moe_model_problems(m: "ModelSpec") -> list[str]:
    """Every broken rule of the MoE / MLA / window fields, one line each naming field, value and rule."""
    out: list[str] = []
    if m.experts == 0:
        for name in MOE_ONLY_FIELDS:
            if getattr(m, name) != _FIELD_DEFAULTS[name]:
                out.append(
                    f"{name}={getattr(m, name)} needs experts > 0 (a mixture-of-experts model); dense models omit it"
                )
        if m.moe_layer_interval != 1:
            out.append(f"moe_layer_interval={m.moe_layer_interval} needs experts > 0")
    else:
        if not 1 <= m.top_k <= m.experts:
            out.append(f"top_k={m.top_k} must be between 1 and experts={m.experts}")
        if m.moe_ffn_hidden is None:
            out.append(
                f"moe_ffn_hidden is required with experts={m.experts} (one routed expert's inner width)"
            )
        if m.dense_layers >= m.layers:
            out.append(f"dense_layers={m.dense_layers} must be below layers={m.layers}")
        if m.shared_ffn_hidden is not None and m.shared_experts == 0:
            out.append(f"shared_ffn_hidden={m.shared_ffn_hidden} needs shared_experts > 0")
        if m.shared_experts and m.shared_ffn_hidden is None and m.moe_ffn_hidden is None:
            out.append("shared_ffn_hidden is required with shared_experts > 0")
        out += _router_group_problems(m)
    if m.attention_type == "mla":
        missing = [name for name in MLA_FIELDS if getattr(m, name) is None]
        if missing:
            out.append(f"attention_type=mla needs {', '.join(missing)}")
        if m.kv_heads is not None and m.kv_heads != m.heads:
            out.append(
                f"kv_heads={m.kv_heads} must equal heads={m.heads} with attention_type=mla (every head has its own key/value)"
            )
    else:
        given = [name for name in MLA_FIELDS + ("q_lora_rank",) if getattr(m, name) is not None]
        if given:
            out.append(f"{given[0]}={getattr(m, given[0])} needs attention_type=mla")
    if m.sliding_window_pattern and m.sliding_window is None:
        out.append(f"sliding_window_pattern={m.sliding_window_pattern} needs sliding_window")
    return out


def _router_group_problems(m: "ModelSpec") -> list[str]:
    """Group-limited routing's rules: both fields or neither, whole groups of experts, fewer groups used
    than there are, top_k a multiple of the groups used (Megatron-Core moe_utils.group_limited_topk
    scores a group by its top top_k / group_topk experts), and a group holding those top_k / group_topk
    experts."""
    groups, used = m.router_groups, m.router_group_topk
    if groups is None and used is None:
        return []
    if groups is None or used is None:
        return ["router_groups and router_group_topk go together (group-limited routing)"]
    out = []
    if m.experts % groups:
        out.append(f"router_groups={groups} must divide experts={m.experts}")
    if used >= groups:
        out.append(f"router_group_topk={used} must be below router_groups={groups}")
    if m.top_k % used:
        out.append(f"top_k={m.top_k} must be a multiple of router_group_topk={used}")
    elif m.top_k // used > m.experts // groups:
        out.append(
            f"top_k={m.top_k} over router_group_topk={used} groups is {m.top_k // used} experts a group; "
            f"a group holds experts / router_groups = {m.experts // groups}"
        )
    return out


def moe_shaped(m: "ModelSpec") -> bool:
    """Models whose layers graph/moe.py builds (experts, MLA, window patterns or MTP modules). A window on
    every layer (sliding_window, pattern 0) is the dense builder's (graph.transformer)."""
    return (
        m.experts > 0
        or m.attention_type == "mla"
        or m.sliding_window_pattern > 0
        or m.mtp_layers > 0
    )


# ---- which layers --------------------------------------------------------------------------
def is_moe_layer(m: "ModelSpec", index: int) -> bool:
    """Layer ``index`` (0-based) is MoE: index ≥ dense_layers and (index − dense_layers + 1) % interval == 0."""
    if m.experts == 0 or index < m.dense_layers:
        return False
    return (index - m.dense_layers + 1) % m.moe_layer_interval == 0


def is_windowed_layer(m: "ModelSpec", index: int) -> bool:
    """Layer ``index`` uses the sliding window: every layer for pattern 0, else all but every n-th
    ((index + 1) % n ≠ 0; Gemma/GPT-OSS alternate windowed and full layers)."""
    if m.sliding_window is None:
        return False
    return m.sliding_window_pattern == 0 or (index + 1) % m.sliding_window_pattern != 0


# ---- widths ----------------------------------------------------------------------------------
def shared_width(m: "ModelSpec") -> int:
    """Total inner width of the shared expert(s): shared_ffn_hidden, default shared_experts·moe_ffn_hidden."""
    if m.shared_experts == 0:
        return 0
    return (
        m.shared_ffn_hidden
        if m.shared_ffn_hidden is not None
        else m.shared_experts * (m.moe_ffn_hidden or 0)
    )


def mla_qk_head_dim(m: "ModelSpec") -> int:
    """d_n + d_r: per-head query/key width of MLA (DeepSeek-V2 §2.1.3, decoupled RoPE)."""
    return (m.qk_nope_head_dim or 0) + (m.qk_rope_head_dim or 0)


def attention_widths(m: "ModelSpec") -> tuple[int, int, int]:
    """(query, key, value) concatenated widths of the attention core: MLA a·(d_n+d_r), a·(d_n+d_r),
    a·d_v; GQA a·d, a_kv·d, a_kv·d."""
    if m.attention_type == "mla":
        qk = m.heads * mla_qk_head_dim(m)
        return qk, qk, m.heads * (m.v_head_dim or 0)
    return m.q_width, m.kv_width, m.kv_width


# ---- parameters ----------------------------------------------------------------------------
def _norm_params(m: "ModelSpec", width: int) -> int:
    return (2 if m.norm == "layernorm" else 1) * width


def mla_params(m: "ModelSpec") -> dict[str, int]:
    """MLA matrices and norms of one layer (DeepSeek-V2 §2.1.2, Eq. 9-18): query down h·d_q (+ norm
    d_q) and up d_q·a(d_n+d_r) (or one h·a(d_n+d_r) projection without query compression); joint
    key/value down h·(d_c+d_r) (+ norm d_c), up d_c·a(d_n+d_v); output a·d_v·h."""
    h, a = m.hidden, m.heads
    qk, dc, dr, dv = (
        mla_qk_head_dim(m),
        m.kv_lora_rank or 0,
        m.qk_rope_head_dim or 0,
        m.v_head_dim or 0,
    )
    parts: dict[str, int] = {}
    if m.q_lora_rank:
        parts["q_down"] = h * m.q_lora_rank
        parts["q_norm"] = _norm_params(m, m.q_lora_rank)
        parts["q_up"] = m.q_lora_rank * a * qk
    else:
        parts["q_proj"] = h * a * qk
    parts["kv_down"] = h * (dc + dr)
    parts["kv_norm"] = _norm_params(m, dc)
    parts["kv_up"] = dc * a * ((m.qk_nope_head_dim or 0) + dv)
    parts["out_proj"] = a * dv * h
    return parts


def qk_norm_params(m: "ModelSpec") -> int:
    """Per-head query and key norms (Qwen3 / Gemma 3 ``q_norm``, ``k_norm``: RMSNorm over d_head,
    one gain vector shared by the heads; transformers modeling_qwen3.py, Qwen3Attention): 2·d."""
    return 2 * _norm_params(m, m.d_head) if m.qk_norm else 0


def attention_params(m: "ModelSpec") -> int:
    """Attention parameters of one layer: MLA (mla_params) or h·(q+2kv) + q·h (+ biases q+2kv+h),
    plus the query/key norms where the model has them (qk_norm_params)."""
    if m.attention_type == "mla":
        return sum(mla_params(m).values())
    bias = (m.q_width + 2 * m.kv_width + m.hidden) if m.has_bias else 0
    matrices = m.hidden * (m.q_width + 2 * m.kv_width) + m.q_width * m.hidden
    return matrices + bias + qk_norm_params(m)


def mlp_params(m: "ModelSpec", width: int) -> int:
    """One MLP (a dense MLP or one expert) of inner width f: p·h·f + f·h (+ biases p·f + h)."""
    p = m.mlp_input_projections
    bias = (p * width + m.hidden) if m.has_bias else 0
    return p * m.hidden * width + width * m.hidden + bias


def expert_params(m: "ModelSpec") -> int:
    """One routed expert: an MLP of width moe_ffn_hidden."""
    return mlp_params(m, m.moe_ffn_hidden or 0)


def router_params(m: "ModelSpec") -> int:
    """Router (gate) of one MoE layer: E·h (a bias of E with biased models)."""
    return m.experts * m.hidden + (m.experts if m.has_bias else 0)


def moe_mlp_params(m: "ModelSpec", active: bool = False) -> int:
    """MoE MLP of one layer: router + E (or k when ``active``) routed experts + shared experts."""
    routed = (m.top_k if active else m.experts) * expert_params(m)
    shared = mlp_params(m, shared_width(m)) if m.shared_experts else 0
    return router_params(m) + routed + shared


def layer_params(m: "ModelSpec", index: int, active: bool = False) -> int:
    """All parameters of layer ``index``: attention, its MLP (dense or MoE) and two norms."""
    mlp = moe_mlp_params(m, active) if is_moe_layer(m, index) else mlp_params(m, m.ffn_hidden)
    return attention_params(m) + mlp + 2 * _norm_params(m, m.hidden)


def mtp_module_params(m: "ModelSpec", active: bool = False) -> int:
    """One DeepSeek-V3 MTP module (§2.2, Fig. 3): two norms h, projection 2h·h, one Transformer block
    (MoE when the model is), final norm; embedding and output head are shared with the main model."""
    block = attention_params(m) + 2 * _norm_params(m, m.hidden)
    block += moe_mlp_params(m, active) if m.experts else mlp_params(m, m.ffn_hidden)
    return 3 * _norm_params(m, m.hidden) + 2 * m.hidden * m.hidden + block


def total_params(m: "ModelSpec", active: bool = False, include_mtp: bool = True) -> int:
    """Parameters of the model (``active``: those one token uses): layers, embedding, untied head,
    final norm, MTP modules. Learned position tables are counted with the embedding."""
    layers = sum(layer_params(m, i, active) for i in range(m.layers))
    embedding = m.vocab * m.hidden + (m.max_position * m.hidden if m.learned_positions else 0)
    head = 0 if m.tie_embeddings else m.vocab * m.hidden
    mtp = m.mtp_layers * mtp_module_params(m, active) if include_mtp else 0
    return layers + embedding + head + _norm_params(m, m.hidden) + mtp
