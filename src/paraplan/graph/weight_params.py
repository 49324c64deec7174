"""Weight parameters of the dense transformer's blocks on one GPU under tensor parallelism (Shoeybi et al. 2019,
§3): the decoder layer's by kind, the input embedding's and the output layer's (graph.transformer builds the blocks;
graph.summa splits the same parts over a 2D grid)."""

from __future__ import annotations

from typing import NamedTuple

from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import qk_norm_params


class LayerParamParts(NamedTuple):
    """The parameters of one decoder layer, whole (unsplit), by how tensor parallelism splits them."""

    matrices: int  # h·(q+2kv) + q·h + p·h·f + f·h
    split_bias: int  # the column-parallel biases: q+2kv (with qkv biases) and p·f (with biases)
    replicated_bias: int  # the row-parallel biases: 2h (with biases)
    norm_params: int  # two norms of h gains (and h shifts for LayerNorm), and q/k norms of d


def layer_param_parts(model: ModelSpec) -> LayerParamParts:
    """The decoder layer's parameters by kind (LayerParamParts); p = 2 for SwiGLU's gate and up
    projections (Shoeybi et al. 2019, §3)."""
    h, f, p = model.hidden, model.ffn_hidden, model.mlp_input_projections
    matrices = h * (model.q_width + 2 * model.kv_width) + model.q_width * h + p * h * f + f * h
    norm_params = (2 if model.norm == "layernorm" else 1) * 2 * h + qk_norm_params(model)
    split_bias = ((model.q_width + 2 * model.kv_width) if model.has_qkv_bias else 0) + (
        p * f if model.has_bias else 0
    )
    replicated_bias = 2 * h if model.has_bias else 0
    return LayerParamParts(matrices, split_bias, replicated_bias, norm_params)


def layer_weight_params(model: ModelSpec, tp: int) -> float:
    """Parameters of one decoder layer on one GPU: matrices h·(q+2kv) + q·h + p·h·f + f·h split by t;
    column-parallel biases split by t, row-parallel biases and norms replicated
    (Shoeybi et al. 2019, §3; p = 2 for SwiGLU's gate and up projections)."""
    matrices, split_bias, replicated_bias, norm_params = layer_param_parts(model)
    return (matrices + split_bias) / tp + replicated_bias + norm_params


def embedding_weight_params(model: ModelSpec, tp: int) -> float:
    """Input embedding on one GPU: vocab-parallel table V·h/t plus a replicated learned position table."""
    positions = model.max_position * model.hidden if model.learned_positions else 0
    return model.vocab * model.hidden / tp + positions


def lm_head_weight_params(model: ModelSpec, tp: int, shares_stage_with_embedding: bool) -> float:
    """Output layer on one GPU: V·h/t unless tied to an embedding on the same stage; plus the final norm.

    With tied embeddings and pp > 1, Megatron-LM keeps a second copy of the table on the last
    stage and all-reduces its gradient with the first (Narayanan et al. 2021, §4.1)."""
    norm = (2 if model.norm == "layernorm" else 1) * model.hidden
    table = (
        0.0
        if (model.tie_embeddings and shares_stage_with_embedding)
        else model.vocab * model.hidden / tp
    )
    return table + norm
