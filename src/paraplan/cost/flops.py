"""Closed-form FLOP counts used for MFU / HFU (independent of the op graph, which tests check against)."""

from __future__ import annotations

from paraplan.specs.model import ModelSpec


def matmul_params(model: ModelSpec) -> float:
    """Parameters that take part in matrix multiplies: L·(h·(q+2kv) + q·h + p·h·f + f·h) + V·h (LM head)."""
    h, f, p = model.hidden, model.ffn_hidden, model.mlp_input_projections
    per_layer = h * (model.q_width + 2 * model.kv_width) + model.q_width * h + p * h * f + f * h
    return model.layers * per_layer + model.vocab * h


def model_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """6·N + 12·L·s·(a·d): PaLM's model FLOPs per token (Chowdhery et al. 2022, App. B), N = matmul
    parameters, attention counted without the causal discount (as Narayanan et al. 2021, Eq. 3).
    MoE / MLA / windowed models: active FLOPs, cost.moe.moe_model_flops_per_token."""
    if _moe_shaped(model):
        from paraplan.cost.moe import moe_model_flops_per_token

        return moe_model_flops_per_token(model, seq_length)
    return 6.0 * matmul_params(model) + 12.0 * model.layers * seq_length * model.q_width


def model_flops_per_step(model: ModelSpec, seq_length: int, global_batch: int) -> float:
    """Model FLOPs of one step: model_flops_per_token · global_batch · seq_length."""
    return model_flops_per_token(model, seq_length) * global_batch * seq_length


def recompute_flops_per_token(model: ModelSpec, seq_length: int, recompute: str) -> float:
    """Extra forward FLOPs per token re-run in backward: full = the whole layer forward,
    2·N_layers + 4·L·s·(a·d); selective = the attention matmuls, 4·L·s·(a·d) (Korthikanti et al. 2022, §5)."""
    if _moe_shaped(model):
        from paraplan.cost.moe import moe_recompute_flops_per_token

        return moe_recompute_flops_per_token(model, seq_length, recompute)
    attention = 4.0 * model.layers * seq_length * model.q_width
    if recompute == "full":
        return 2.0 * (matmul_params(model) - model.vocab * model.hidden) + attention
    if recompute == "selective":
        return attention
    return 0.0



def _moe_shaped(model: ModelSpec) -> bool:
    """Models whose FLOPs cost.moe counts (specs.moe_model.moe_shaped)."""
    from paraplan.specs.moe_model import moe_shaped

    return moe_shaped(model)
