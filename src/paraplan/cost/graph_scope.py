"""Which ops a CUDA graph holds under a stack's ``cuda_graph_scope`` (cost.host prices the host issue of the
ops inside and outside the graphs; docs/model.md, "Host time").

A scope is one of the profile words "none", "attention", "layer", "full_iteration", or a list of Megatron-Core
``CudaGraphScope`` names (Megatron-LM core_v0.16.0 megatron/core/transformer/enums.py: attn, mlp, moe,
moe_router, moe_preprocess; the ``--cuda-graph-scope`` argument and TransformerConfig.cuda_graph_scope, which
Megatron-Bridge's performance presets set, e.g. v0.3.0 scripts/performance/configs/qwen/
qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_CS_V1 ``["moe_router", "moe_preprocess"]``).
The words are the lists they stand for (``regions``): "attention" is ["attn"], "layer" the empty list, which
Megatron-Core reads as the whole layer (transformer_config.py: '"full" or an empty list means the full layer').
What each name captures is TransformerLayer._get_submodules_under_cudagraphs (core_v0.16.0
megatron/core/transformer/transformer_layer.py l. 942-967): attn the input norm and self-attention; mlp a dense
layer's pre-MLP norm and MLP; moe an MoE layer's pre-MLP norm and whole MoE block (drop-and-pad only, enums.py);
moe_router an MoE layer's pre-MLP norm, router and the shared experts unless they overlap the dispatch;
moe_preprocess adds MoELayer.preprocess, the dispatcher's dispatch_preprocess (moe_layer.py l. 255-273), whose
permutation 1 (the graph's "permute") then runs at a fixed size inside the graph (moe/moe_utils.py l. 1440-1460).
"""

from __future__ import annotations

from paraplan.specs.choices import GraphRegion  # noqa: F401  (the names a list scope may hold)

# the profile words: the lists they stand for (None: not a per-layer list)
SCOPE_WORDS: dict[str, tuple[str, ...] | None] = {
    "none": None,
    "full_iteration": None,
    "attention": ("attn",),
    "layer": (),
}

# Ops outside the transformer layers: a per-layer CUDA-graph scope (Megatron-Core's TE-graphed TransformerLayer
# modules, cuda_graph_scope "layer") leaves them eager.
OUTSIDE_LAYERS = frozenset(
    {
        "embedding_lookup",
        "position_add",
        "final_norm",
        "lm_head",
        "cross_entropy",
        "patch_projection",
        "classifier",
    }
)
# The self-attention half of a layer: what an "attention" scope captures (Megatron-Core cuda_graph_scope attn).
ATTENTION_PART = frozenset(
    {
        "input_norm",
        "qkv_projection",
        "rotary_embedding",
        "flash_attention",
        "attention_scores",
        "softmax_dropout",
        "attention_over_values",
        "attention_projection",
        "attention_residual",
        "mla_q_down",
        "mla_q_norm",
        "mla_q_up",
        "mla_q_proj",
        "mla_kv_down",
        "mla_kv_norm",
        "mla_kv_up",
        "mla_rotary_concat",
        "qk_norm",
    }
)
# The expert section of a dropless MoE layer, issued after the dispatch's synchronisation: its per-expert row counts
# are host integers read at run time, so no CUDA graph can hold it (Megatron-Core MoE README, "CUDA Graph support
# for dropless MoE models with attention only capture"; graph.moe_mlp.host_synchronises).
EXPERT_SECTION = frozenset(
    {
        "permute",
        "sort_chunks",
        "expert_fc1",
        "expert_glu_clamp",
        "expert_activation",
        "expert_fc2",
        "expert_output_bias",
        "paged_stash",
        "unsort_chunks",
        "unpermute",
    }
)

# A dense layer's MLP half after its pre-MLP norm (graph.transformer, graph.moe dense_mlp_ops prefix "mlp")
MLP_PART = frozenset({"mlp_in_projection", "mlp_activation", "mlp_out_projection", "mlp_residual"})
# What an MoE layer's moe_router region holds besides its pre-MLP norm: the router (graph.moe_mlp.router_ops) and
# the shared experts (dense_mlp_ops prefix "shared_expert"; they are out of it when they overlap the dispatch,
# moe_shared_expert_overlap, which a flex dispatcher turns off and no plan input states: taken as in it)
ROUTER_PART = frozenset(
    {
        "router",
        "router_softmax_topk",
        "shared_expert_in_projection",
        "shared_expert_activation",
        "shared_expert_out_projection",
    }
)
# What moe_preprocess adds: the dispatcher's permutation 1 (graph.moe_mlp.expert_ops "permute")
PREPROCESS_PART = frozenset({"permute"})
PRE_MLP_NORM = "post_attention_norm"
# the op only an MoE layer has (graph.moe_mlp.router_ops): a block with it routes (cost.host.host_sums)
ROUTER_OPS = frozenset({"router"})


def regions(scope: str | tuple[str, ...]) -> tuple[str, ...] | None:
    """The CudaGraphScope names a scope stands for (SCOPE_WORDS for a profile word, the list itself otherwise);
    None for "none" and "full_iteration", which hold nothing or everything."""
    if isinstance(scope, str):
        return SCOPE_WORDS[scope]
    return tuple(scope)


def graphs_anything(scope: str | tuple[str, ...]) -> bool:
    """Whether the scope captures any op (not "none")."""
    return scope != "none"


def whole_iteration(scope: str | tuple[str, ...]) -> bool:
    """Whether one graph holds the whole iteration ("full_iteration")."""
    return scope == "full_iteration"


def graphed(op, scope: str | tuple[str, ...], dropless: bool, moe_layer: bool = False) -> bool:
    """True when a CUDA graph of ``scope`` holds the op: "full_iteration" every op, "none" nothing; a per-layer
    list (``regions``; the empty list the whole layer, every op not in OUTSIDE_LAYERS) the union of its names' ops:
    attn the ATTENTION_PART, mlp a dense layer's pre-MLP norm and MLP_PART, moe an MoE layer's ops after the
    attention half, moe_router its pre-MLP norm and ROUTER_PART, moe_preprocess its PREPROCESS_PART (module
    docstring). A dropless MoE layer's EXPERT_SECTION is never in a graph, but for the permutation a
    moe_preprocess graph runs at a fixed size (``dropless``: the block synchronises,
    graph.moe_mlp.host_synchronises). ``moe_layer``: the op is in an MoE layer (its block routes)."""
    if scope == "none":
        return False
    names = regions(scope)
    in_moe_graph = moe_layer and "moe_preprocess" in (names or ()) and op.name in PREPROCESS_PART
    if dropless and op.name in EXPERT_SECTION and not in_moe_graph:
        return False
    if names is None:  # full_iteration
        return True
    if not names:
        return op.name not in OUTSIDE_LAYERS
    return any(_in_region(op.name, name, moe_layer) for name in names)


def _in_region(name: str, region: str, moe_layer: bool) -> bool:
    """Whether Megatron-Core's CudaGraphScope ``region`` captures the op called ``name`` of a dense or MoE layer."""
    if region == "attn":
        return name in ATTENTION_PART
    if region == "mlp":
        return not moe_layer and (name == PRE_MLP_NORM or name in MLP_PART)
    if not moe_layer:
        return False
    if region == "moe":
        return name not in ATTENTION_PART and name not in OUTSIDE_LAYERS
    if region == "moe_router":
        return name == PRE_MLP_NORM or name in ROUTER_PART
    return name in PREPROCESS_PART  # moe_preprocess (it requires moe_router: transformer_config.py)
