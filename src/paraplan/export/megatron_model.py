"""The model's shape as Megatron-LM core_v0.14.0 arguments (megatron/training/arguments.py names, kept in
``frameworks/megatron.yaml``): dense shape, positions, experts, multi-head latent attention and MTP, so that
the launch line trains the planned model (issue 34: MoE and MLA models were written as dense ones)."""

from __future__ import annotations

from paraplan.specs.model import ModelSpec


def model_arguments(model: ModelSpec, seq_length: int) -> list[str]:
    """The model's shape as Megatron-LM arguments (so the launch line trains the planned model). Megatron
    requires --max-position-embeddings (arguments.py line 736) at least seq_length (line 770): the model's
    table for learned positions, and for rope (no table) the larger of the model's and the sequence."""
    a = [
        "--num-layers",
        str(model.layers),
        "--hidden-size",
        str(model.hidden),
        "--ffn-hidden-size",
        str(model.ffn_hidden),
        "--num-attention-heads",
        str(model.heads),
        "--kv-channels",
        str(model.qk_nope_head_dim if model.attention_type == "mla" else model.d_head),
        "--vocab-size",
        str(model.vocab),
    ]
    if model.n_kv_heads != model.heads and model.attention_type != "mla":
        a += ["--group-query-attention", "--num-query-groups", str(model.n_kv_heads)]
    if model.mlp == "swiglu":
        a += ["--swiglu"]
    a += ["--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"]
    if model.qk_norm:  # Qwen3 / Gemma 3 per-head q/k norms (Megatron-LM --qk-layernorm)
        a += ["--qk-layernorm"]
    if not model.tie_embeddings:
        a += ["--untie-embeddings-and-output-weights"]
    positions = (
        model.max_position if model.learned_positions else max(model.max_position, seq_length)
    )
    a += ["--position-embedding-type", "learned_absolute" if model.learned_positions else "rope"]
    a += ["--max-position-embeddings", str(positions)]
    if not model.has_bias:
        a += ["--disable-bias-linear"]
    if not model.has_dropout:
        a += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    return a + moe_model_arguments(model) + mla_model_arguments(model)


def moe_model_arguments(model: ModelSpec) -> list[str]:
    """Experts (Megatron-Core v0.14 names, arguments.py lines 2781-2832): routed experts, top-k, an expert's
    width, the shared experts' total width, which layers are MoE (--moe-layer-freq, a list of 0/1 per layer
    from specs.moe_model.is_moe_layer), and the MTP modules (--mtp-num-layers, line 1509)."""
    a: list[str] = []
    if model.experts:
        a += ["--num-experts", str(model.experts), "--moe-router-topk", str(model.top_k)]
        a += ["--moe-ffn-hidden-size", str(model.moe_ffn_hidden or model.ffn_hidden)]
        if model.shared_experts:
            shared = model.shared_ffn_hidden or model.shared_experts * (
                model.moe_ffn_hidden or model.ffn_hidden
            )
            a += ["--moe-shared-expert-intermediate-size", str(shared)]
        if model.dense_layers or model.moe_layer_interval != 1:
            a += ["--moe-layer-freq", moe_layer_freq(model)]
    if model.mtp_layers:
        a += ["--mtp-num-layers", str(model.mtp_layers)]
    return a


def moe_layer_freq(model: ModelSpec) -> str:
    """Megatron's --moe-layer-freq list expression, run-length coded: '[0]*3+[1]*58' for DeepSeek-V3."""
    from paraplan.specs.moe_model import is_moe_layer

    flags = [int(is_moe_layer(model, i)) for i in range(model.layers)]
    runs: list[list[int]] = []
    for f in flags:
        if runs and runs[-1][0] == f:
            runs[-1][1] += 1
        else:
            runs.append([f, 1])
    return "+".join(f"[{f}]*{n}" for f, n in runs)


def mla_model_arguments(model: ModelSpec) -> list[str]:
    """Multi-head latent attention (arguments.py lines 1507, 2901-2909): the query and key/value ranks and
    the per-head widths; --kv-channels is the non-rotary query/key head width (set in model_arguments)."""
    if model.attention_type != "mla":
        return []
    a = ["--multi-latent-attention"]
    if model.q_lora_rank:
        a += ["--q-lora-rank", str(model.q_lora_rank)]
    return a + [
        "--kv-lora-rank",
        str(model.kv_lora_rank),
        "--qk-head-dim",
        str(model.qk_nope_head_dim),
        "--qk-pos-emb-head-dim",
        str(model.qk_rope_head_dim),
        "--v-head-dim",
        str(model.v_head_dim),
    ]
