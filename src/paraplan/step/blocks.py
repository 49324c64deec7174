"""Block kinds: the one registry of what a pipeline stage holds (embedding or ViT patch embedding; decoder,
encoder or T5 cross-attention decoder layer; dense / MoE layer, routed experts, MTP module; LM head or ViT
classifier), each with its op-graph builder (graph/), its activation memory (cost/memory.py, graph/moe.py)
and the lists it belongs to as attributes (``transformer``, ``layer``, ``expert_free``, ``recomputed``);
a model's block list (``model_blocks``: what a per-stage plan cuts into ranges); and the per-kind rules
the builders of a step (step/build.py, step/layout.py) read: the kinds of a model, their gradient groups,
selective recompute's default modules, working buffers and the pipeline send size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from paraplan.cost import memory as mem
from paraplan.graph.encoder import (
    classifier_block,
    classifier_weight_params,
    cross_decoder_layer,
    cross_layer_extra_activation_bytes,
    decoder_seq,
    encoder_layer,
    layer_kinds,
    layer_models,
    patch_embedding_block,
)
from paraplan.graph.moe import (
    expert_free_ops,
    layer_core_ops,
    layer_weight_split,
    moe_layer_memory_bytes,
    moe_model_layer,
    moe_shaped,
    mtp_block,
    mtp_memory_bytes,
    mtp_outer_ops,
)
from paraplan.graph.ops import LayerGraph
from paraplan.graph.layers import decoder_layer
from paraplan.graph.transformer import (
    LayerShape,
    embedding_block,
    lm_head_block,
    lm_head_weight_params,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import GRADIENT_GROUPS


Width = ModelSpec  # the widths one block is built with: the model's own, or one of its layer_widths groups


def block_width(model: ModelSpec, width: Width | None) -> Width:
    """The widths a block is built with: ``width`` where given (a BlockRef's: a per-stage plan's layer_widths
    group's), else the model's own."""
    return model if width is None else width


@dataclass(frozen=True)
class BlockKind:
    """One kind of block: how to build its op graph and what it keeps in memory, from the model and the
    block's widths (``Width``: the model itself but for a per-stage plan of a model with layer_widths)."""

    name: str
    build: Callable[[ModelSpec, Width, LayerShape], LayerGraph]
    memory_of: Callable[
        [ModelSpec, Width, LayerShape, str], tuple[float, float, float]
    ]  # (kept, held once, buffer) bytes
    recomputed: bool  # activation recomputation checkpoints it (transformer layers: Korthikanti et al. 2022 §5)
    gradient_group: str = (
        "dense"  # the group that reduces its parameters (specs.parallel.GRADIENT_GROUPS)
    )
    # when its graph is another kind's at the same shape plus ops around it: (that kind, those ops), else None
    parts: Callable[[ModelSpec, LayerShape], tuple[str, tuple] | None] = lambda model, shape: None
    # when its ops are these plus graph.moe_mlp.expert_knob_parts' (an MoE layer): those that read no expert knob, else None
    expert_free_ops: Callable[[ModelSpec, LayerShape], tuple | None] = lambda model, shape: None
    # its ops that read the context-parallel split beyond the local tokens (core attention; an MTP module's are its
    # Transformer block's), when every other op of it is a function of graph.transformer.cp_free_key(shape)
    # (search.expert_floors costs those once); None: undeclared
    core_ops: Callable[[ModelSpec, LayerShape], tuple | None] = lambda model, shape: None
    transformer: bool = (
        False  # memory Korthikanti et al. 2022 Figure 1 counts as "transformer layers"
    )
    layer: bool = False  # a transformer layer of the block list (a per-stage plan's ``layers``)
    expert_free: bool = False  # its graph never reads the expert knobs (LayerShape.expert)
    # recompute_num_layers recomputes that many of these whole per model chunk, the others keep their
    # activations (step.partial_recompute; Megatron-LM --recompute-num-layers); MoE / MLA layers recompute
    # per module instead (graph.moe)
    counted_recompute: bool = False
    # a kind of the models graph/moe.py builds (MoE / MLA / windowed / MTP), which take these for "decoder"
    moe_family: bool = False
    # the step.layout.StageMix field that counts it on a uniform plan's stage; None: never on one
    stage_count: str | None = None

    @property
    def every_model(self) -> bool:
        """Neither a layer nor of the MoE family: the input and output blocks every model has."""
        return not (self.layer or self.moe_family)

    def graph(self, model: ModelSpec, shape: LayerShape, width: Width | None = None) -> LayerGraph:
        """Its op graph at ``width`` (a BlockRef's widths: a layer_widths group's), the model's own by default."""
        return self.build(model, block_width(model, width), shape)

    def memory(
        self, model: ModelSpec, shape: LayerShape, recompute: str, width: Width | None = None
    ) -> tuple[float, float, float]:
        """(kept, held once, buffer) bytes at ``width`` (as ``graph``), the model's own by default."""
        return self.memory_of(model, block_width(model, width), shape, recompute)


def decoder_side_shape(model: ModelSpec, shape: LayerShape) -> LayerShape:
    """The shape of T5's decoder-side blocks: the decoder length (graph.encoder.decoder_seq); ``shape`` itself
    for other models."""
    if model.architecture != "encoder_decoder":
        return shape
    return shape._replace(seq_length=decoder_seq(model, shape.seq_length))


def _decoder_memory(
    model: ModelSpec, width: Width, shape: LayerShape, recompute: str
) -> tuple[float, float, float]:
    if moe_shaped(width):
        return 0.0, 0.0, 0.0
    return _layer_memory(model, width, shape, recompute)


def _layer_memory(
    model: ModelSpec, width: Width, shape: LayerShape, recompute: str
) -> tuple[float, float, float]:
    """A transformer layer: its kept activations (cost.memory.layer_activation_bytes) and working buffers."""
    return (
        mem.layer_activation_bytes(width, shape, recompute),
        0.0,
        layer_buffer_bytes(width, shape, recompute),
    )


def _cross_decoder_memory(
    model: ModelSpec, width: Width, shape: LayerShape, recompute: str
) -> tuple[float, float, float]:
    """T5's decoder layer on the decoder length, plus what its cross-attention keeps
    (graph.encoder.cross_layer_extra_activation_bytes); its buffers those of a layer on the encoder length."""
    dec = decoder_side_shape(model, shape)
    kept = mem.layer_activation_bytes(width, dec, recompute) + cross_layer_extra_activation_bytes(
        width, dec, shape.seq_length, recompute
    )
    return kept, 0.0, layer_buffer_bytes(width, shape, recompute)


def _embedding_memory(
    model: ModelSpec, width: Width, shape: LayerShape, recompute: str
) -> tuple[float, float, float]:
    return mem.embedding_activation_bytes(width, shape), 0.0, 0.0


def _head_memory(
    model: ModelSpec, width: Width, shape: LayerShape, recompute: str
) -> tuple[float, float, float]:
    if width.is_vit:
        return 0.0, mem.classifier_activation_bytes(width, shape), 0.0
    return 0.0, mem.lm_head_activation_bytes(width, decoder_side_shape(model, shape)), 0.0


EMPTY_BLOCK = LayerGraph("absent", (), (), 0.0)


def _decoder_graph(model: ModelSpec, width: Width, shape: LayerShape) -> LayerGraph:
    """Dense transformer layer — a decoder layer, or for encoder models (BERT, ViT) the same layer with
    bidirectional attention (graph.encoder.encoder_layer); absent (no ops, no parameters) for models
    graph.moe builds."""
    if moe_shaped(width):
        return EMPTY_BLOCK
    return (
        encoder_layer(width, shape)
        if width.architecture == "encoder"
        else decoder_layer(width, shape)
    )


def _cross_decoder_graph(model: ModelSpec, width: Width, shape: LayerShape) -> LayerGraph:
    """T5's decoder layer on the decoder length with cross-attention over the encoder's ``shape.seq_length``
    outputs (graph.encoder.cross_decoder_layer)."""
    return cross_decoder_layer(width, decoder_side_shape(model, shape), shape.seq_length)


def _input_graph(model: ModelSpec, width: Width, shape: LayerShape) -> LayerGraph:
    """Token embedding, or ViT's patch embedding (graph.encoder.patch_embedding_block)."""
    return patch_embedding_block(width, shape) if width.is_vit else embedding_block(width, shape)


def _output_graph(model: ModelSpec, width: Width, shape: LayerShape) -> LayerGraph:
    """LM head and loss (on T5's decoder length), or ViT's classification head on the class token
    (graph.encoder.classifier_block)."""
    if width.is_vit:
        return classifier_block(width, shape)
    return lm_head_block(width, decoder_side_shape(model, shape), False)


def head_params_with_embedding(model: ModelSpec, tp: int) -> float:
    """Output-layer parameters on one GPU when it shares the stage with the input layer (tied tables
    are held once: graph.transformer.lm_head_weight_params; ViT's classifier is not tied)."""
    return (
        classifier_weight_params(model) if model.is_vit else lm_head_weight_params(model, tp, True)
    )


def head_tensors_shared_with_embedding(model: ModelSpec) -> float:
    """Weight tensors the output layer shares with the input layer when both sit on one stage: with tied
    embeddings the LM head's weight is the embedding table (held once: head_params_with_embedding; Megatron-LM's
    GPT2Model hands parallel_lm_logits its embedding's word_embeddings.weight, no parameter of its own, as
    Hugging Face's tie_word_embeddings shares one Parameter), which
    graph.ops.weight_tensor_stats counts in both blocks (the embedding's table, the lm_head GEMM's weight),
    so the stage counts one fewer: 1, else 0 (ViT's classifier is not tied)."""
    return 1.0 if model.tie_embeddings and not model.is_vit else 0.0


def _moe_kind_present(
    model: ModelSpec, moe: bool
) -> bool:  # graph/moe.py models: dense layers; MoE layers if MoE
    return moe_shaped(model) and (model.is_moe or not moe)


def _moe_kind_graph(moe: bool):
    def graph(model: ModelSpec, width: Width, shape: LayerShape) -> LayerGraph:
        return moe_model_layer(model, shape, moe) if _moe_kind_present(model, moe) else EMPTY_BLOCK

    return graph


def _moe_kind_memory_bytes(moe: bool):
    def memory_bytes(model: ModelSpec, shape: LayerShape) -> tuple[float, float] | None:
        """(kept, dispatch buffer) bytes of _moe_kind_graph(moe)'s graph without building it; None when absent."""
        return moe_layer_memory_bytes(model, shape, moe) if _moe_kind_present(model, moe) else None

    return memory_bytes


def _experts_graph(model: ModelSpec, width: Width, shape: LayerShape) -> LayerGraph:
    """The routed experts of one MoE layer as a block of their own: no ops (their time is in the
    moe_layer block), only the parameters the expert gradient group reduces (graph.moe.layer_weight_split, the
    split the MoE layer's graph records, without building that graph)."""
    if not model.is_moe:
        return EMPTY_BLOCK
    return LayerGraph("experts", (), (), layer_weight_split(model, shape.tp, shape.expert, True)[1])


def _mtp_graph(model: ModelSpec, width: Width, shape: LayerShape) -> LayerGraph:
    return mtp_block(model, shape) if model.mtp_layers else EMPTY_BLOCK


def _mtp_parts(model: ModelSpec, shape: LayerShape) -> tuple[str, tuple] | None:
    """An MTP module: its Transformer block (the MoE or dense layer kind) and the ops around it (graph.moe.mtp_outer_ops)."""
    if not model.mtp_layers:
        return None
    return ("moe_layer" if model.is_moe else "dense_layer"), mtp_outer_ops(model, shape)


def _moe_memory(memory_bytes_of):
    def memory(
        model: ModelSpec, width: Width, shape: LayerShape, recompute: str
    ) -> tuple[float, float, float]:
        found = memory_bytes_of(model, shape)
        if found is None:
            return 0.0, 0.0, 0.0
        activation_bytes, dispatch_buffer_bytes = found
        kept = (
            shape.act_bytes * shape.sp_tokens * model.hidden
            if recompute == "full"
            else activation_bytes
        )
        return kept, 0.0, dispatch_buffer_bytes + (activation_bytes if recompute == "full" else 0.0)

    return memory


def _no_memory(
    model: ModelSpec, width: Width, shape: LayerShape, recompute: str
) -> tuple[float, float, float]:
    return 0.0, 0.0, 0.0


def _no_core_ops(model: ModelSpec, shape: LayerShape) -> tuple:
    """No core attention: the kind's ops read the local tokens only (embedding, routed experts)."""
    return ()


def _head_core_ops(model: ModelSpec, shape: LayerShape) -> tuple | None:
    """No core attention in the LM head (its ops read the local tokens only); ViT's classifier reads the micro-batch
    (one class token per image): undeclared."""
    return None if model.is_vit else ()


def _moe_kind_core_ops(moe: bool):
    def core_ops(model: ModelSpec, shape: LayerShape) -> tuple:
        """The layer's core attention (graph.moe.layer_core_ops); none when the kind is absent."""
        return layer_core_ops(model, shape) if _moe_kind_present(model, moe) else ()

    return core_ops


def _layer(name: str, build, memory_of, **more) -> BlockKind:
    """A transformer layer of the block list: recomputation checkpoints it and the memory model counts
    it among the transformer layers."""
    return BlockKind(name, build, memory_of, True, transformer=True, layer=True, **more)


def _moe_family_layer(name: str, moe: bool, **more) -> BlockKind:
    """A dense (``moe`` False) or MoE layer of a model graph/moe.py builds: its graph, memory and core
    ops are those of the layers of that kind (_moe_kind_graph, _moe_kind_memory_bytes, _moe_kind_core_ops)."""
    return _layer(
        name,
        _moe_kind_graph(moe),
        _moe_memory(_moe_kind_memory_bytes(moe)),
        core_ops=_moe_kind_core_ops(moe),
        moe_family=True,
        stage_count="moe" if moe else "dense",
        **more,
    )


BLOCK_KINDS: dict[str, BlockKind] = {
    kind.name: kind
    for kind in (  # in stage order
        BlockKind(
            "embedding",
            _input_graph,
            _embedding_memory,
            False,
            core_ops=_no_core_ops,
            expert_free=True,
            stage_count="embedding",
        ),
        _layer(
            "decoder",
            _decoder_graph,
            _decoder_memory,
            expert_free=True,
            counted_recompute=True,
            stage_count="layers",
        ),
        # T5 (encoder-decoder): bidirectional encoder layers, then decoder layers with cross-attention
        _layer("encoder", lambda m, w, s: encoder_layer(w, s), _layer_memory, expert_free=True),
        _layer("cross_decoder", _cross_decoder_graph, _cross_decoder_memory, expert_free=True),
        # layers of MoE / MLA / windowed models (graph/moe.py): dense first layers, MoE layers and their
        # routed experts (own gradient group), DeepSeek-V3 MTP modules on the last stage
        _moe_family_layer("dense_layer", False, expert_free=True),
        _moe_family_layer(
            "moe_layer",
            True,
            expert_free_ops=lambda m, s: (
                expert_free_ops(m, s, True) if _moe_kind_present(m, True) else None
            ),
        ),
        BlockKind(
            "experts",
            _experts_graph,
            _no_memory,
            False,
            "expert",
            core_ops=_no_core_ops,
            transformer=True,
            moe_family=True,
            stage_count="routed",
        ),
        BlockKind(
            "mtp",
            _mtp_graph,
            _moe_memory(lambda m, s: mtp_memory_bytes(m, s) if m.mtp_layers else None),
            True,
            parts=_mtp_parts,
            core_ops=lambda m, s: layer_core_ops(m, s) if m.mtp_layers else (),
            moe_family=True,
            stage_count="mtp",
        ),
        BlockKind(
            "head",
            _output_graph,
            _head_memory,
            False,
            core_ops=_head_core_ops,
            expert_free=True,
            stage_count="head",
        ),
    )
}


def kinds_where(attribute: str) -> tuple[str, ...]:
    """The BLOCK_KINDS names whose kind has ``attribute`` set, in stage order."""
    return tuple(name for name, kind in BLOCK_KINDS.items() if getattr(kind, attribute))


# the kind lists read off the kinds (tuples and sets for the hot loops of compose and the search)
TRANSFORMER_KINDS = kinds_where("transformer")
EXPERT_FREE_KINDS = frozenset(kinds_where("expert_free"))
COUNTED_RECOMPUTE_KINDS = frozenset(kinds_where("counted_recompute"))


@lru_cache(maxsize=64)
def model_block_kinds(model: ModelSpec) -> tuple[str, ...]:
    """The BLOCK_KINDS a model's stages hold, in stage order: the kinds every model has (embedding, LM head)
    around its layer kinds (graph.encoder.layer_kinds: "decoder", or T5's encoder and cross-attention
    decoder layers), or around the MoE family's kinds (``moe_family``: dense layer, MoE layer, experts,
    MTP) for models graph/moe.py builds (the kinds a model lacks are absent blocks: no ops, no parameters)."""
    held = set(kinds_where("moe_family")) if moe_shaped(model) else set(layer_kinds(model))
    return tuple(name for name, kind in BLOCK_KINDS.items() if kind.every_model or name in held)


# (kind, its ``stage_count`` field) of what a uniform plan's stage holds, in stage order
# (step.layout.stage_block_counts): the MoE family's kinds for a model graph/moe.py builds (key True),
# else "decoder" (key False), between the kinds every model has
UNIFORM_STAGE_KINDS: dict[bool, tuple[tuple[str, str], ...]] = {
    moe: tuple(
        (name, kind.stage_count)
        for name, kind in BLOCK_KINDS.items()
        if kind.stage_count and (kind.every_model or kind.moe_family == moe)
    )
    for moe in (False, True)
}


@dataclass(frozen=True)
class BlockRef:
    """One entry of a model's block list: its kind (a BLOCK_KINDS name) and the widths it is built with."""

    kind: str
    width: Width

    @property
    def is_layer(self) -> bool:
        return BLOCK_KINDS[self.kind].layer


@lru_cache(maxsize=256)
def model_blocks(model: ModelSpec) -> tuple[BlockRef, ...]:
    """The model as an ordered block list: input block, transformer layers (graph.encoder.layer_kinds, each
    with its widths: graph.encoder.layer_models), output block. A per-stage plan holds ranges of it."""
    widths = layer_models(model)
    layers = (BlockRef(k, w) for k, w in zip(layer_kinds(model), widths))
    return (BlockRef("embedding", widths[0]), *layers, BlockRef("head", widths[-1]))


def attached_blocks(model: ModelSpec) -> tuple[tuple[BlockRef, dict[str, int]], ...]:
    """The blocks a stage holds beside those of the block list, each with how many of it each listed block of a
    kind brings (kind -> count): for a model graph/moe.py builds, one routed-experts block per MoE layer and per
    MTP module (its own gradient group's parameters), the MTP modules with the output block, as a uniform plan's
    stage holds them (step.layout.StageMix: routed = MoE layers + MTP modules, MTP modules on the last stage)."""
    if not moe_shaped(model):
        return ()
    mtp = {"head": model.mtp_layers} if model.mtp_layers else {}
    experts = (BlockRef("experts", model), {"moe_layer": 1, **mtp})
    return (experts, (BlockRef("mtp", model), mtp)) if mtp else (experts,)


def block_graph(model: ModelSpec, ref: BlockRef, shape: LayerShape) -> LayerGraph:
    """The op graph of one block of ``model`` (``ref``: from ``model_blocks``) on ``shape``."""
    return BLOCK_KINDS[ref.kind].graph(model, shape, ref.width)


@lru_cache(maxsize=64)
def model_gradient_groups(model: ModelSpec) -> tuple[str, ...]:
    """The gradient groups (specs.parallel.GRADIENT_GROUPS) that reduce some block of the model: a
    group with no parameters has no collectives and must not claim a link (step.compose.tail_terms)."""
    used = {BLOCK_KINDS[k].gradient_group for k in model_block_kinds(model)}
    return tuple(g for g in GRADIENT_GROUPS if g in used)


def layer_buffer_bytes(model: ModelSpec, shape: LayerShape, recompute: str) -> float:
    """Working buffers beside the kept activations: one layer re-materialised in backward under full
    recompute, and the sequence-parallel all-gather output (b·s·h half-precision elements)."""
    buffers = mem.layer_activation_bytes(model, shape, "none") if recompute == "full" else 0.0
    if (
        shape.sequence_parallel and shape.tp_layout != "2d"
    ):  # SUMMA gathers panels, not whole inputs
        buffers += shape.act_bytes * shape.local_tokens * model.hidden
    return buffers + mem.layout_buffer_bytes(model, shape)


def p2p_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Activation sent between stages per micro-batch: b·(s/c)·h half-precision elements, split over
    the t tensor-parallel ranks (scatter/gather optimisation, Narayanan et al. 2021 §4.1)."""
    return shape.act_bytes * shape.local_tokens * model.hidden / shape.tp
