"""Closed-form FLOP counts used for MFU / HFU (independent of the op graph, which tests check against).

One convention, everywhere: the FLOPs a causal decoder *needs*, i.e. the matrix multiplies of every
parameter (6 per parameter per token: forward 2, backward 4) plus attention's score and value
products over the keys each query may see under the causal mask — query i sees i keys, (s+1)/2 on
average — as FlashAttention-2 counts causal attention (Dao 2023, §4.1: half the non-causal FLOPs).
The op graph charges every one of these FLOPs (and more: fused attention's backward is 2.5x its
forward, context parallelism sees (s+c)/2 keys, padded tiles) at no more than the peak rate, so
model FLOPs per step / (step time · GPUs · peak) — the MFU — cannot exceed 1, also at long
sequences where PaLM's non-causal count (Chowdhery et al. 2022, App. B) would report MFU > 100 %.
"""

from __future__ import annotations

from functools import lru_cache

from paraplan.graph.weight_params import layer_param_parts
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import (
    attention_widths,
    is_moe_layer,
    is_windowed_layer,
    mla_params,
    shared_width,
)


def matmul_params(model: ModelSpec) -> float:
    """Parameters that take part in matrix multiplies: L·(h·(q+2kv) + q·h + p·h·f + f·h) + V·h (LM head),
    the layer's matrices those of graph.weight_params.layer_param_parts; biases add no matrix-multiply FLOPs."""
    return model.layers * layer_param_parts(model).matrices + model.vocab * model.hidden


def attention_layer_flops_per_token(
    keys: float, qk_width: float, v_width: float, passes: float
) -> float:
    """passes·2·k·(qk + v): one layer's Q·Kᵀ (2·qk FLOPs per key) and P·V (2·v per key) over the k keys
    a query sees on average (causal: ModelSpec.mean_visible_keys); the one attention FLOP rule, also
    for the per-layer count of cost.moe (MLA's differing qk/v widths, window patterns)."""
    return passes * 2.0 * keys * (qk_width + v_width)


def causal_attention_flops_per_token(model: ModelSpec, seq_length: int, passes: float) -> float:
    """passes·4·L·k·(a·d): Q·Kᵀ and P·V, 2·(a·d) FLOPs per key each, over the k = (s+1)/2 keys a query
    sees on average under the causal mask (Dao 2023, FlashAttention-2 §4.1; fewer with a sliding
    window, ModelSpec.mean_visible_keys; k = s for an encoder's bidirectional attention, Devlin et al.
    2019); passes = 3 for forward and backward, 1 for a forward re-run."""
    # an encoder (BERT, ViT) attends bidirectionally: every query sees all s keys
    keys = (
        float(seq_length)
        if model.architecture == "encoder"
        else model.mean_visible_keys(seq_length)
    )
    return model.layers * attention_layer_flops_per_token(
        keys, model.q_width, model.q_width, passes
    )


def model_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """6·N + 6·L·(s+1)·(a·d): model FLOPs per token, N = matmul parameters (PaLM's 6·N, Chowdhery et
    al. 2022, App. B), attention with the causal discount (module docstring: keeps MFU <= 1); an
    encoder's attention sees all s keys; ViT's N counts the patch projection (c·p²·h) and its
    classifier (V·h) once per sample of s tokens (Dosovitskiy et al. 2021 Eq. 1, 4).
    MoE / MLA / windowed-pattern models: active FLOPs, cost.moe.moe_model_flops_per_token (same
    causal convention)."""
    if _moe_shaped(model):
        return moe_model_flops_per_token(model, seq_length)
    attention = causal_attention_flops_per_token(model, seq_length, passes=3.0)
    if (
        model.is_vit
    ):  # the patch projection on every token, the classifier on each sample's class token only
        head = model.vocab * model.hidden
        patches = model.image_channels * (model.patch_size or 1) ** 2 * model.hidden
        return 6.0 * (matmul_params(model) - head + head / seq_length + patches) + attention
    return 6.0 * matmul_params(model) + attention


def model_flops_per_step(model: ModelSpec, seq_length: int, global_batch: int) -> float:
    """Model FLOPs of one step: model_flops_per_token · global_batch · seq_length."""
    return model_flops_per_token(model, seq_length) * global_batch * seq_length


def recompute_flops_per_token(
    model: ModelSpec, seq_length: int, recompute: str, modules: tuple[str, ...] = ()
) -> float:
    """Extra forward FLOPs per token re-run in backward: full = the whole layer forward,
    2·N_layers + 2·L·(s+1)·(a·d); selective = the attention matmuls, 2·L·(s+1)·(a·d) (Korthikanti et
    al. 2022, §5; attention counted causally as in model_flops_per_token), and with ``modules``
    (Megatron-LM --recompute-modules, dense layers) core_attn that, mlp the MLP forward
    2·L·(p·h·f + f·h), op_sac (torchtitan's per-op SAC on a swiglu layer: every second mm, wk wo w3)
    2·L·h·(kv + q + f); norms re-run no matrix FLOPs."""
    if _moe_shaped(model):
        return moe_recompute_flops_per_token(model, seq_length, recompute)
    attention = causal_attention_flops_per_token(model, seq_length, passes=1.0)
    if recompute == "full":
        return 2.0 * (matmul_params(model) - model.vocab * model.hidden) + attention
    if recompute == "selective":
        modules = modules or ("core_attn",)
        mlp = (
            2.0 * model.layers * (model.mlp_input_projections + 1) * model.hidden * model.ffn_hidden
        )
        # torchtitan's per-op SAC (graph.ops.op_sac_split): wk, wo and w3 of each layer, 2·L·h·(kv + q + f)
        sac = (
            2.0 * model.layers * model.hidden * (model.kv_width + model.q_width + model.ffn_hidden)
        )
        return (
            attention * ("core_attn" in modules)
            + mlp * ("mlp" in modules)
            + sac * ("op_sac" in modules)
        )
    return 0.0


def _moe_shaped(model: ModelSpec) -> bool:
    """Models whose FLOPs cost.moe counts (specs.moe_model.moe_shaped)."""
    from paraplan.specs.moe_model import moe_shaped

    return moe_shaped(model)


# ---- mixture-of-experts and non-uniform layers: FLOPs layer by layer ---------------------------------------------------------------------------------


def attention_matmul_params(m: ModelSpec) -> float:
    """Matmul parameters of one attention block: MLA's five projections (norms excluded) or
    h·(q+2kv) + q·h."""
    if m.is_mla:
        return float(sum(v for k, v in mla_params(m).items() if not k.endswith("_norm")))
    return float(m.hidden * (m.q_width + 2 * m.kv_width) + m.q_width * m.hidden)


def mlp_matmul_params(m: ModelSpec, width: int) -> float:
    """p·h·f + f·h: the matmul parameters of one MLP of inner width f."""
    return float((m.mlp_input_projections + 1) * m.hidden * width)


def mlp_output_flops_per_token(m: ModelSpec) -> float:
    """2·f·h: the forward FLOPs per token of one dense MLP's output projection (its f·h matmul parameters,
    the last term of mlp_matmul_params), f = m.ffn_hidden. The GEMM that torch.utils.checkpoint's early
    stop does not re-run in a full recomputation (graph.ops.early_stop_tail)."""
    return 2.0 * m.ffn_hidden * m.hidden


def moe_mlp_matmul_params(m: ModelSpec) -> float:
    """Matmul parameters one token passes through in an MoE MLP: router E·h, k routed experts, shared experts."""
    routed = m.top_k * mlp_matmul_params(m, m.moe_ffn_hidden or 0)
    shared = mlp_matmul_params(m, shared_width(m)) if m.shared_experts else 0.0
    return float(m.experts * m.hidden) + routed + shared


def layer_matmul_params(m: ModelSpec, index: int) -> float:
    """Active matmul parameters of layer ``index`` (attention + dense or MoE MLP)."""
    mlp = moe_mlp_matmul_params(m) if is_moe_layer(m, index) else mlp_matmul_params(m, m.ffn_hidden)
    return attention_matmul_params(m) + mlp


def attention_keys_per_query(m: ModelSpec, index: int, seq_length: int) -> float:
    """Keys each query of layer ``index`` sees on average under the causal mask: (s+1)/2, fewer for
    windowed layers (ModelSpec.mean_visible_keys, the convention of cost/flops.py)."""
    return m.mean_visible_keys(seq_length, windowed=is_windowed_layer(m, index))


def attention_flops_per_token(m: ModelSpec, index: int, seq_length: int) -> float:
    """Forward + backward attention FLOPs of layer ``index``: cost.flops.attention_layer_flops_per_token
    with 3 passes over the causal keys, Q·Kᵀ at width q and P·V at width v (for GQA q = v = a·d gives
    flops.py's per-layer causal count)."""
    q, _, v = attention_widths(m)
    v = (
        v if m.is_mla else q
    )  # P·V yields one d-wide output per query head (GQA shares V, not its work)
    return attention_layer_flops_per_token(
        attention_keys_per_query(m, index, seq_length), q, v, passes=3.0
    )


def mtp_flops_per_token(m: ModelSpec, seq_length: int) -> float:
    """One MTP module (DeepSeek-V3 §2.2): projection 2h·h, one layer (MoE when the model is), and
    the shared output head again: 6·(2h² + layer + V·h) + its attention."""
    index = m.layers - 1  # the MTP block is built like the last (MoE) layer
    matmul = 2.0 * m.hidden * m.hidden + layer_matmul_params(m, index) + m.vocab * m.hidden
    return 6.0 * matmul + attention_flops_per_token(m, index, seq_length)


@lru_cache(maxsize=256)
def moe_model_flops_per_token(m: ModelSpec, seq_length: int) -> float:
    """Model FLOPs per token on active parameters (PaLM App. B: 6·N_active + attention), layer by
    layer, plus the LM head 6·V·h and the MTP modules. MFU of an MoE model uses these active FLOPs
    (the routed experts a token does not visit do no work)."""
    total = sum(
        6.0 * layer_matmul_params(m, i) + attention_flops_per_token(m, i, seq_length)
        for i in range(m.layers)
    )
    total += 6.0 * m.vocab * m.hidden
    return total + m.mtp_layers * mtp_flops_per_token(m, seq_length)


@lru_cache(maxsize=256)
def moe_recompute_flops_per_token(m: ModelSpec, seq_length: int, recompute: str) -> float:
    """Forward FLOPs re-run in backward per token: full = every layer's forward (2·N_layer + a third
    of its attention FLOPs); selective = the attention core (a third of the attention FLOPs),
    Korthikanti et al. 2022 §5."""
    attention = sum(attention_flops_per_token(m, i, seq_length) for i in range(m.layers)) / 3.0
    if recompute == "full":
        return attention + sum(2.0 * layer_matmul_params(m, i) for i in range(m.layers))
    if recompute == "selective":
        return attention
    return 0.0


def softmax_exponentials(fwd_flops: float, causal_fraction: float, head_dim: int) -> float:
    """Exponentials one fused-attention pass evaluates: one per attention score computed, and a score
    costs 4·d forward FLOPs (2·d in Q·Kᵀ, 2·d in P·V), so fwd_flops · causal_fraction / (4·d). The
    backward recomputes P = exp(S − L) from the saved log-sum-exp once per score, as many again
    (Dao 2023, FlashAttention-2, Algorithm 2 line 11)."""
    if fwd_flops <= 0 or head_dim <= 0:
        return 0.0
    return fwd_flops * causal_fraction / (4.0 * head_dim)
