"""Parameter counts of a whole model (what ``paraplan models`` and the estimate header show).

The per-block counts are the op graph's own (``graph.transformer``: one decoder layer, the
embedding, the LM head), taken on one GPU with no tensor parallelism, so the totals agree with the
memory model by construction.
"""

from __future__ import annotations

from paraplan.specs.moe_model import moe_shaped

from dataclasses import asdict, dataclass

from paraplan.graph.transformer import (
    embedding_weight_params,
    layer_weight_params,
    lm_head_weight_params,
)
from paraplan.specs.model import ModelSpec
from paraplan.units import si_prefixed


@dataclass(frozen=True)
class ParameterCounts:
    """Parameters of a model: ``total`` stored, ``active`` used per token (equal for dense models;
    a mixture-of-experts model counts only the experts a token is routed to in ``active``)."""

    total: float
    active: float
    layers: float  # all decoder layers
    embedding: float  # token table (and a learned position table)
    head: float  # LM head table when untied, plus the final norm

    def to_dict(self) -> dict:
        return asdict(self)


def parameter_counts(model: ModelSpec) -> ParameterCounts:
    """N = L·(h·(q+2kv) + q·h + p·h·f + f·h + biases + norms) + V·h (+ P·h learned positions)
    + V·h when the LM head is untied + the final norm (Shoeybi et al. 2019, §3; p = 2 for SwiGLU);
    dense models: active = N. Encoders, T5 and layer lists: the sum over the model's block list
    (graph.encoder.layer_kinds) of each block's weights."""
    if model.architecture != "decoder" or model.layer_widths is not None:
        return _block_list_counts(model)
    if moe_shaped(model):
        return _moe_counts(model)
    layers = model.layers * layer_weight_params(model, 1)
    embedding = embedding_weight_params(model, 1)
    head = lm_head_weight_params(model, 1, True)  # tied: the embedding table serves as the head
    total = layers + embedding + head
    return ParameterCounts(total=total, active=total, layers=layers, embedding=embedding, head=head)


def _moe_counts(model: ModelSpec) -> ParameterCounts:
    """Models with experts, MLA or MTP (specs.moe_model.total_params): total counts every routed
    expert, active only the top_k a token is routed to (plus shared experts and dense layers)."""
    from paraplan.specs.moe_model import layer_params, total_params

    layers = sum(layer_params(model, i) for i in range(model.layers))
    embedding = model.vocab * model.hidden + (
        model.max_position * model.hidden if model.learned_positions else 0
    )
    total = float(total_params(model))
    return ParameterCounts(
        total=total,
        active=float(total_params(model, active=True)),
        layers=float(layers),
        embedding=float(embedding),
        head=total - layers - embedding,
    )


def _block_list_counts(model: ModelSpec) -> ParameterCounts:
    """Σ over the model's layers (graph.encoder.layer_kinds, layer_models) of each layer's weights, plus the
    input block (token or ViT patch embedding) and the output block (LM head sharing the embedding's
    table when tied, or ViT's classifier), on one GPU (tp 1)."""
    from paraplan.graph.encoder import (
        classifier_weight_params,
        cross_attention_weight_params,
        layer_kinds,
        layer_models,
        patch_embedding_weight_params,
    )

    widths = layer_models(model)
    layers = sum(
        layer_weight_params(w, 1)
        + (cross_attention_weight_params(w, 1) if k == "cross_decoder" else 0.0)
        for k, w in zip(layer_kinds(model), widths)
    )
    first, last = widths[0], widths[-1]
    embedding = (
        patch_embedding_weight_params(first, model.max_position)
        if first.is_vit
        else embedding_weight_params(first, 1)
    )
    head = classifier_weight_params(last) if last.is_vit else lm_head_weight_params(last, 1, True)
    total = layers + embedding + head
    return ParameterCounts(total=total, active=total, layers=layers, embedding=embedding, head=head)


def format_parameters(n: float) -> str:
    """8.03e9 -> '8.03B', 1.25e8 -> '125M' (three significant digits, B = billion)."""
    return si_prefixed(n, ".3g", giga="B")
