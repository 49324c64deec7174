"""The MLP half of an MoE or dense layer (graph.moe assembles the layer): router, permute, grouped
expert GEMMs and un-permute on the busiest rank, the dispatch / combine collectives, the shared experts'
or the dense layer's tensor-parallel MLP, the bytes each keeps for backward, and the fp8 casts.

Tokens per rank T (moe_tokens): b·s/c, divided by t when tensor parallelism is on (Megatron-Core
requires sequence parallelism with MoE and TP: the MoE MLP sees the SP shard). Rows per rank
R = T·k·etp·load (routed_rows; ETP ranks all-gather their rows).
"""

from __future__ import annotations

import math

from paraplan.graph.routing import routed_load_factor, router_expert_cv
from paraplan.graph.ops import Collective, ExpertShape, Op
from paraplan.graph.tp_collectives import tp_collectives
from paraplan.graph.transformer import LayerShape, _gemm, _memory, mlp_intermediate_bytes
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_model import shared_width

# the host synchronisation of a clamped GLU's activation (clamped_glu_ops); the dispatch's is "dispatch_host_sync"
ACTIVATION_SYNC = "activation_host_sync"
ROUTER_SCORE_BYTES = (
    4  # router logits/probabilities in fp32 (Megatron-Core moe_router_dtype / router softmax)
)


def moe_tokens(shape: LayerShape) -> float:
    """T: tokens one rank routes per micro-batch, b·s/c, divided by t with tensor parallelism."""
    return shape.local_tokens / shape.tp if shape.tp > 1 else float(shape.local_tokens)


def average_routed_rows(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> float:
    """T·k·etp: expert rows a rank computes on average (every routed token's k copies, etp times)."""
    return moe_tokens(shape) * model.top_k * expert.etp


def routed_rows(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> float:
    """R: expert rows the busiest rank computes, average_routed_rows × load (graph.routing.routed_load_factor,
    with the router's expert spread graph.routing.router_expert_cv)."""
    load = routed_load_factor(
        moe_tokens(shape),
        model.top_k,
        expert.ep,
        expert.balance,
        expert.capacity_factor,
        model.experts,
        router_expert_cv(model, expert),
    )
    return average_routed_rows(model, shape, expert) * load


def _grouped_gemm(
    name: str, experts: int, m: int, n: float, k: float, one_kernel: bool = False
) -> Op:
    """Grouped GEMM of ``experts`` (m, n, k) GEMMs: FLOPs as graph.transformer._gemm, costed by
    cost.compute.grouped_gemm_time_s (``one_kernel``: one kernel over the experts, Op.one_kernel)."""
    op = _gemm(name, experts, m, n, k, "grouped_gemm")
    return op._replace(one_kernel=True) if one_kernel else op


def router_ops(model: ModelSpec, shape: LayerShape) -> list[Op]:
    """Router GEMM T·E·h (Fedus et al. 2022 §2.1) and softmax + top-k over fp32 scores (read,
    write probabilities, read again for top-k: 3 passes over T·E·4 bytes)."""
    tokens = moe_tokens(shape)
    return [
        _gemm("router", 1, int(tokens), model.experts, model.hidden),
        _memory("router_softmax_topk", 3 * ROUTER_SCORE_BYTES * tokens * model.experts),
    ]


def expert_ops(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> list[Op]:
    """Permute, grouped expert GEMMs, activation, un-permute on the busiest rank.

    Permute reads T rows and writes the R/etp routed copies; un-permute reads them back and
    writes T rows (memory-bound gathers/scatters, 2-byte elements). With more than one local
    expert the received rows arrive in source-rank order and are re-sorted by expert before the
    GEMMs and back after them (Megatron-Core "permutation 2", sort_chunks_by_idxs, or the
    transpose-copy of drop-and-pad): one read and one write of the R/etp rows each. A dropless
    dispatch adds one host synchronisation (host_synchronises). Grouped GEMMs: E/ep experts
    each with m = ⌈R/(E/ep)⌉ rows, fc1 n = p·f_e/etp, fc2 n = h. Hybrid-EP has no permute or
    un-permute pass, its sort passes stay (fuses_permutes). Transformer Engine's fused grouped MLP runs the
    activation, its clamp and the bias in the GEMMs' epilogues and each GEMM as one kernel over the experts
    (fuses_grouped_mlp)."""
    h, ab, f = model.hidden, shape.act_bytes, (model.moe_ffn_hidden or 0) // expert.etp
    tokens = moe_tokens(shape)
    rows = routed_rows(model, shape, expert)
    local = model.experts // expert.ep
    m = math.ceil(rows / local)
    p = model.mlp_input_projections
    sent = rows / expert.etp
    fused = fuses_permutes(expert)
    ops = [] if fused else [_memory("permute", ab * h * (tokens + sent))]
    if local > 1:  # permutation 2: received rows re-sorted from source-rank order to expert order
        ops.append(_memory("sort_chunks", 2 * ab * h * sent))
    fused_mlp = fuses_grouped_mlp(shape)
    ops.append(_grouped_gemm("expert_fc1", local, m, p * f, h, fused_mlp))
    if model.glu_clamp is not None and not fused_mlp:
        ops += clamped_glu_ops(ab, local * m, p * f)
    if not fused_mlp:
        width = 3 if model.mlp == "swiglu" else 2
        ops.append(_memory("expert_activation", ab * local * m * f * width))
    ops.append(_fc2_op(model, local, m, f, fused_mlp))
    if model.has_bias:
        ops.append(
            fused_output_bias_op(ab, h, local * m)
            if fused_mlp
            else expert_output_bias_op(ab, h, local * m)
        )
    if stashes_expert_activations(shape):
        ops.append(paged_stash_op(model, shape, expert, rows))
    if local > 1:
        ops.append(_memory("unsort_chunks", 2 * ab * h * sent))
    if not fused:
        ops.append(_memory("unpermute", ab * h * (tokens + sent)))
    if host_synchronises(expert, shape):
        ops.append(Op("dispatch_host_sync", "host_sync", 0.0, 0.0, 0.0, 0.0))
    return ops


def _fc2_op(model: ModelSpec, local: int, m: int, width: float, fused_mlp: bool) -> Op:
    """The experts' fc2 grouped GEMM (``local`` experts of m rows, n = h, k = ``width``). Under the fused grouped
    MLP (fuses_grouped_mlp) of a GLU model whose experts carry a bias, its data gradient is the dGLU kernel that
    also reduces the fc1 bias gradient in its epilogue: Transformer Engine b9d690e04 / 4329ff84
    transformer_engine/pytorch/ops/fused/backward_grouped_mlp.py / grouped_mlp.py call cuDNN frontend's
    grouped_gemm_dglu_wrapper_sm100 with generate_dbias = fc1_op.has_bias (Op.dgrad_epilogue "dglu_dbias",
    priced by cost.compute.dglu_dbias_s); without a bias, or unfused, a plain GEMM's data gradient. Fused, it
    runs as one kernel over the experts (Op.one_kernel, fuses_grouped_mlp)."""
    op = _grouped_gemm("expert_fc2", local, m, model.hidden, width, fused_mlp)
    if fused_mlp and model.has_bias and model.mlp_input_projections == 2:
        return op._replace(dgrad_epilogue="dglu_dbias")
    return op


def stashes_expert_activations(shape: LayerShape) -> bool:
    """True when the fused grouped MLP's saved activations go through Megatron-Core's paged stash
    (LayerShape.paged_stash > 0, the profile's moe_paged_stash): Megatron-LM cd4afffa6 / 458c8d0ec
    megatron/core/transformer/moe/experts.py TEGroupedMLP._fused_forward opens the stash context only on the
    fused path (fuses_grouped_mlp)."""
    return shape.paged_stash > 0 and fuses_grouped_mlp(shape)


def stashed_row_bytes(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> float:
    """Bytes per routed row of what the fused grouped MLP saves for backward and Megatron-Core's paged stash
    moves: the tensors Transformer Engine marks with mark_grouped_tensor before save_for_backward
    (TransformerEngine 4329ff84 ops/fused/grouped_mlp.py, b9d690e04 ops/fused/forward_grouped_mlp.py), the
    columnwise (wgrad) copies of the fc1 input (g·h) and of the fc2 input (g·f) with their block scales, one
    byte per 32 rows of a column (Megatron-LM paged_stash.py SCALE_INV_BLOCK_SIZE 32, e8m0 as uint8), the fc1
    output that the GLU backward reads (p·f at the activation bytes a) and the routing probability
    (ROUTER_SCORE_BYTES): g·(h + f)·(1 + 1/32) + a·p·f + 4, f = f_e/etp, g = gemm_input_bytes."""
    f = (model.moe_ffn_hidden or 0) / expert.etp
    gin, ab, p = shape.gemm_input_bytes, shape.act_bytes, model.mlp_input_projections
    return gin * (model.hidden + f) * (1.0 + 1.0 / 32.0) + ab * p * f + ROUTER_SCORE_BYTES


def paged_stash_op(model: ModelSpec, shape: LayerShape, expert: ExpertShape, rows: float) -> Op:
    """The paged stash's copies of one MoE layer's saved expert activations (stashes_expert_activations):
    forward, after the layer's grouped MLP, a Triton kernel packs each saved tensor's ``rows`` routed rows into
    pages of the CUDA stash buffer (read and write, 2·R·stashed_row_bytes); backward, before the layer's grouped
    MLP backward, the reverse kernel unpacks them into a fresh tensor (the same bytes again). Megatron-LM
    cd4afffa6 megatron/core/transformer/moe/paged_stash.py (458c8d0ec, d0b3b7754: the same code) with
    ops/paged_stash.py paged_stash_copy_kernel / paged_stash_pop_kernel: PagedStashManager.stash_paged_tensors
    issues them on its pack stream after the layer's fused MLP, the next layer's grouped MLP waits for it
    (PipelinePreScheduleFunction.forward, wait_for_stash_to_complete) and the backward for the reload
    (PipelinePostScheduleFunction.backward). Device to device: the pinned host buffer
    (moe_paged_stash_buffer_size_factor_cpu) takes pages only when the CUDA buffer is full, which a
    force-balanced run sized at 1.2 times its average rows never is. Priced in line at the HBM rate (a memory
    op): the side stream hides none of it by the model's rule for a kernel beside compute
    (cost.comm_contention: (1 − μ)·k/S of its time for its CTAs plus μ·ρ for its HBM share), since the copy's
    grid of min(rows, 2048) programs (offload_to_stash max_blocks) fills every SM (k = S) and it streams at the
    HBM rate (ρ = 1): (1 − μ) + μ = 1."""
    moved = 2.0 * rows * stashed_row_bytes(model, shape, expert)
    return Op("paged_stash", "memory", 0.0, moved, 0.0, moved)


def expert_output_bias_op(act_bytes: int, hidden: int, rows: float) -> Op:
    """The routed experts' output bias, scaled by each row's routing probability and added by an unfused
    element-wise pass after the fc2 grouped GEMM: Megatron-Core TEGroupedMLP builds linear_fc2 with
    skip_bias_add=True and adds ``t + b·p`` per local expert, then concatenates the experts' rows
    (megatron/core/transformer/moe/experts.py, TEGroupedMLP._apply_bias, at b0cc2706, the Megatron-LM of
    Megatron-Bridge v0.3.0 / NeMo 26.02); linear_fc1's bias (skip_bias_add=False) runs in the GEMM's
    epilogue and its gradient in the wgrad GEMM's (Transformer Engine v2.12 module/grouped_linear.py), no
    pass of its own. Bytes over the R×h output at ``act_bytes`` per element: forward, the product b·p written
    (1), the sum reading t and it and writing the result (3), the concatenation reading and writing it (2):
    6·R·h·bytes; backward (PyTorch autograd of mul, add and cat: add and cat pass the gradient through or as
    views; mul's broadcast gradients g·p summed over rows for b and g·b summed over h for p, each a product
    written and read once more beside the read of g): 6·R·h·bytes as well."""
    moved = 6.0 * act_bytes * hidden * rows
    return Op("expert_output_bias", "memory", 0.0, moved, 0.0, moved)


def fuses_grouped_mlp(shape: LayerShape) -> bool:
    """True when the expert MLP runs as Transformer Engine's fused grouped MLP (LayerShape.fused_grouped_mlp, the
    profile's moe_fused_grouped_mlp) on a block-scaled plan (fp8 under an mxfp8 recipe, nvfp4): Megatron-Core's
    TEGroupedMLP with use_transformer_engine_op_fuser builds GroupedLinear, ScaledSwiGLU / ScaledClampedQGeGLU
    (the clamp as the op's limit), GroupedLinear (scale_bias with a bias) (Megatron-LM cd4afffa6
    megatron/core/transformer/moe/experts.py _make_fused_ops) and Transformer Engine fuses the three
    (TransformerEngine 4329ff84 transformer_engine/pytorch/ops/fused/grouped_mlp.py fuse_grouped_mlp_ops,
    GroupedMLP_CuTeGEMMGLU; NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, compute capability 10): forward, one kernel
    runs the fc1 grouped GEMM, the GLU activation with its clamp and the product by the routing
    probabilities and writes the fc2 input quantised (cuDNN grouped_gemm_glu_wrapper_sm100), one the fc2
    grouped GEMM with the probability-scaled bias (grouped_gemm_quant_wrapper_sm100, bias_tensor and
    prob_tensor); backward, the fc2 dgrad GEMM with the GLU backward and the probabilities' gradient
    (grouped_gemm_dglu_wrapper_sm100), and the weight gradients by cuDNN's grouped wgrad kernel or one
    nvte_grouped_gemm call (TransformerEngine b9d690e04 ops/fused/backward_grouped_mlp.py _cudnn_compute_wgrad,
    general_grouped_gemm_for_grouped_tensor). So each expert GEMM is one block-scaled kernel over every local
    expert, not Transformer Engine's GroupedLinear loop of one cuBLAS GEMM per expert (expert_ops builds fc1 and
    fc2 with Op.one_kernel), no ``expert_activation`` pass, no clamp kernels and no ``torch.tensor`` host
    synchronisation (clamped_glu_ops), and the bias's only pass is its backward reduction
    (fused_output_bias_op)."""
    return shape.fused_grouped_mlp and shape.dtype in ("fp8", "nvfp4")


def fused_output_bias_op(act_bytes: int, hidden: int, rows: float) -> Op:
    """The routed experts' output bias under the fused grouped MLP (fuses_grouped_mlp): forward, none (the fc2
    kernel adds b·p in its epilogue); backward, one pass of Transformer Engine's grouped dbias / dscales Triton
    kernel reading the fc2 output gradient once, R×h at ``act_bytes``, and writing the per-expert bias gradient
    and the per-row probability gradient, both negligible (TransformerEngine 4329ff84
    transformer_engine/pytorch/triton/grouped_dbias_dscales.py compute_grouped_dbias_dscales, called by
    ops/fused/grouped_mlp.py fuser_backward under scale_bias): R·h·bytes."""
    return Op("expert_output_bias", "memory", 0.0, 0.0, 0.0, float(act_bytes) * hidden * rows)


def clamped_glu_ops(act_bytes: int, rows: float, width: float) -> list[Op]:
    """The clamp of a clamped GLU (gpt-oss: the gate half clamped above, the linear half to ±limit) before the
    fused activation, as Megatron-Core runs it (megatron/core/fusions/fused_bias_geglu.py
    weighted_bias_quick_geglu_impl at b0cc2706, the Megatron-LM of Megatron-Bridge v0.3.0 / NeMo 26.02, called by
    TEGroupedMLP for gpt-oss's quick_gelu GLU with bias_activation_fusion): ``input.chunk(2, -1)``, two eager
    ``clamp`` kernels and a ``torch.cat`` of the halves, outside the compiled activation. Bytes over the R×w fc1
    output (w = p·f_e, e = ``act_bytes`` per element): forward, each clamp reads and writes its half (2) and the
    concatenation reads and writes the whole (2): 4·R·w·e; backward, PyTorch's clamp_backward
    (torch/csrc/autograd/FunctionsManual.cpp: ``where(self <= max, grad, 0)`` for the gate half,
    ``where((self >= min).logical_and_(self <= max), grad, 0)`` for the linear half, bool masks of 1 B): the gate
    half reads its input and writes a mask (e + 1), then reads the mask and the gradient and writes the result
    (2e + 1); the linear half makes two masks (2e + 2), ands them in place (3) and selects (2e + 1); the chunk's
    gradient concatenates the halves' (2e per element of w): R·(w/2)·(3e + 2 + 4e + 6) + 2·R·w·e =
    R·w·(11e + 8)/2, 15·R·w bytes in bf16. Then ``torch.tensor(linear_offset, device=input.device)``, a
    pageable host-to-device copy that PyTorch runs as cudaMemcpyAsync + cudaStreamSynchronize
    (aten/src/ATen/native/cuda/Copy.cu memcpy_and_sync; pytorch/pytorch issue #120996: ``torch.tensor(3.14,
    device=dev)`` synchronises, ``torch.full`` does not): one host synchronisation per forward, the op
    ``activation_host_sync`` (cost.host.host_sums prices it as the dispatch's, its own re-issue after it)."""
    elements = rows * width
    backward = elements * (11.0 * act_bytes + 8.0) / 2.0
    return [
        Op("expert_glu_clamp", "memory", 0.0, 4.0 * act_bytes * elements, 0.0, backward),
        Op(ACTIVATION_SYNC, "host_sync", 0.0, 0.0, 0.0, 0.0),
    ]


def expert_knob_inputs(shape: LayerShape) -> tuple:
    """What expert_knob_ops reads of the shape besides the expert knobs (the datatype, the activation bytes, the
    tokens a rank routes; with fp8 casts also tp, the local tokens and sequence parallelism): two shapes equal
    on it give the same ops (tests/search/test_moe_search.py)."""
    fp8 = shape.dtype == "fp8"
    return (
        shape.dtype,
        shape.act_bytes,
        moe_tokens(shape),
        (shape.tp, shape.local_tokens, shape.sequence_parallel) if fp8 else (),
        fuses_grouped_mlp(shape),
    )


def expert_knob_parts(
    model: ModelSpec, shape: LayerShape, expert: ExpertShape
) -> tuple[list[Op], list[Op]]:
    """The ops of an MoE layer that read the expert knobs (ep, etp, capacity, balance), in the two places the layer
    has them (_assemble_layer): expert_ops between the router and the shared experts, and at the end the fp8 casts,
    whose element count includes the routed rows; every other op of the layer is the same for every expert option."""
    trailing = (
        [fp8_cast_op(model, shape, routed_rows(model, shape, expert), True)]
        if shape.dtype == "fp8"
        else []
    )
    return expert_ops(model, shape, expert), trailing


def expert_knob_ops(model: ModelSpec, shape: LayerShape, expert: ExpertShape) -> list[Op]:
    """expert_knob_parts as one list (search.expert_floors costs the rest of the layer once: expert_computes)."""
    routed, trailing = expert_knob_parts(model, shape, expert)
    return routed + trailing


def fuses_permutes(expert: ExpertShape) -> bool:
    """True when the dispatch kernel reads the tokens where they lie and the combine kernel reduces their top-k
    copies itself, so there is no permutation 1 (``permute``) nor its inverse (``unpermute``) pass: Hybrid-EP
    (Megatron-Core core_v0.16.0 megatron/core/transformer/moe/fused_a2a.py HybridEPDispatch, "fused dispatch
    operation for permute + dispatch a2a + permute", calling DeepEP's HybridEPBuffer.dispatch_with_permute /
    combine_with_unpermute; token_dispatcher.py _HybridEPManager). Its re-sort of the received rows by expert
    stays a pass of its own (the buffer's permute kernel over its row_id_map, "Output of Permute
    Preprocessing"; Megatron-LM cd4afffa6 has an opt-in fusion of it into the dispatch and combine,
    moe_permute_fusion_into_hybridep (default False; fused_a2a.py fuse_permute_dispatch / fuse_unpermute_combine),
    that no Megatron-Bridge v0.6.0 MoE recipe of the 26.08 table sets (only perf_recipes/nemotronh/h100), so
    no input names it), priced as sort_chunks / unsort_chunks. The alltoall dispatcher runs all four
    passes (MoEAlltoAllTokenDispatcher), DeepEP's manager permutes after its dispatch too
    (_DeepepManager.get_permuted_hidden_states_by_experts)."""
    return expert.dispatcher == "hybridep"


def host_synchronises(expert: ExpertShape, shape: LayerShape) -> bool:
    """True when the dispatch needs the per-expert token counts on the host: every dropless dispatch
    (capacity_factor None). Megatron-Core's MoEAlltoAllTokenDispatcher.preprocess keeps
    cuda_sync_point "no_sync" only with drop-and-pad (moe_pad_expert_input_to_capacity; the counts are
    then the constant capacity) and otherwise synchronises before the EP all-to-all or the expert
    GEMMs, whose per-expert row counts (Transformer Engine GroupedLinear m_splits) are host integers.
    A HybridEP dispatch on a static receive budget (LayerShape.hybridep_budget, the profile's
    moe_hybridep_budget: Megatron-Core moe_expert_rank_capacity_factor) feeding the fused grouped MLP
    (fuses_grouped_mlp) does not: the dispatch's output size is the budget, set on the host before it, so it
    runs non-blocking (Megatron-LM cd4afffa6 token_dispatcher.py _HybridEPManager.setup_metadata and dispatch,
    fused_a2a.py HybridEPDispatch), and the op-fuser path keeps the per-expert counts on the device (experts.py
    _fused_forward: no tokens_per_expert.tolist() when moe_utils.skip_routed_expert_padding, true for
    HybridEP; the unfused forward calls it) for the fused kernels' padded_offsets (TransformerEngine 4329ff84
    ops/fused/grouped_mlp.py)."""
    if shape.hybridep_budget and expert.dispatcher == "hybridep" and fuses_grouped_mlp(shape):
        return False
    return expert.capacity_factor is None


def dense_mlp_ops(model: ModelSpec, shape: LayerShape, width: int, prefix: str) -> list[Op]:
    """Tensor-parallel MLP of inner width f (a dense layer's MLP or the shared experts): column-
    parallel in-projection p·f/t, activation, row-parallel out-projection (Shoeybi et al. 2019 §3)."""
    t, tokens, ab = shape.tp, shape.local_tokens, shape.act_bytes
    return [
        _gemm(
            f"{prefix}_in_projection",
            1,
            tokens,
            model.mlp_input_projections * width / t,
            model.hidden,
        ),
        _memory(
            f"{prefix}_activation",
            ab * tokens * width / t * (3 if model.mlp == "swiglu" else 2),
            kernel=(model.mlp, float(tokens), width / t),
        ),
        _gemm(f"{prefix}_out_projection", 1, tokens, model.hidden, width / t),
    ]


def mlp_tp_collectives(shape: LayerShape, hidden: int, prefix: str) -> list[Collective]:
    """TP collectives of one tensor-parallel MLP: as the attention half's (one column-parallel input,
    one row-parallel output; graph.tp_collectives.tp_collectives with calls=1, names under ``prefix``)."""
    return tp_collectives(
        shape.local_tokens, hidden, shape.act_bytes, shape, calls=1, prefix=prefix
    )


def dispatch_collectives(
    model: ModelSpec, shape: LayerShape, expert: ExpertShape
) -> list[Collective]:
    """Dispatch and combine of one MoE layer (each once in forward and once in backward, reversed).

    alltoall (Megatron-Core MoEAlltoAllTokenDispatcher): all-to-all over "ep" of the R/etp rows
    (per-rank send buffer, the busiest rank's volume), then all-gather / reduce-scatter over "etp".
    allgather (MoEAllGatherTokenDispatcher): all-gather of the T tokens over the ep·etp ranks, and
    a reduce-scatter of the outputs. deepep (DeepEP, Zhao et al. 2025, deepseek-ai/DeepEP):
    a token is sent once per destination GPU (and once per destination NVLink domain across the
    network), kind "all_to_all_dedup", bytes = one copy of the T tokens (priced by cost.moe.moe_collective_time_s).
    hybridep (Megatron-Core flex dispatcher, Hybrid-EP backend, DeepEP hybrid-ep branch): the same
    hierarchical deduplication (one RDMA copy per remote NVLink domain, forwarded over NVLink), the same
    kind and bytes."""
    h, ab = model.hidden, shape.act_bytes
    tokens = moe_tokens(shape)
    rows = routed_rows(model, shape, expert)
    if expert.dispatcher == "allgather":
        size = float(ab * h * tokens * expert.ep * expert.etp)
        return [
            Collective("ep_allgather_dispatch", "ep", "all_gather", size, 1, 1),
            Collective("ep_reduce_scatter_combine", "ep", "reduce_scatter", size, 1, 1),
        ]
    if expert.dispatcher in ("deepep", "hybridep"):
        load = rows / (tokens * model.top_k * expert.etp)
        size = float(ab * h * tokens * load)
        return [
            Collective(f"ep_{expert.dispatcher}_dispatch", "ep", "all_to_all_dedup", size, 1, 1),
            Collective(f"ep_{expert.dispatcher}_combine", "ep", "all_to_all_dedup", size, 1, 1),
        ]
    size = float(ab * h * rows / expert.etp)
    out = [
        Collective("ep_dispatch_all_to_all", "ep", "all_to_all", size, 1, 1),
        Collective("ep_combine_all_to_all", "ep", "all_to_all", size, 1, 1),
    ]
    if expert.etp > 1:
        gathered = float(ab * h * rows)
        out += [
            Collective("etp_all_gather", "etp", "all_gather", gathered, 1, 1),
            Collective("etp_reduce_scatter", "etp", "reduce_scatter", gathered, 1, 1),
        ]
    return out


def moe_mlp_activation_bytes(
    model: ModelSpec, shape: LayerShape, expert: ExpertShape, modules: tuple[str, ...]
) -> float:
    """Bytes the MoE MLP keeps for backward: pre-MLP norm input and output (SP shard, 2 B·h each),
    fp32 router probabilities 4·E per token; per routed row (R rows, the top_k copies of the tokens)
    the fc1 input h and the fc2 input f_e/etp at LayerShape.gemm_input_bytes (fp8 copies in fp8 recipes), the
    fc1 output p·f_e/etp at 2 B and the row's fp32 routing weight. The fc2 output is not kept:
    Megatron-Core's TEGroupedMLP multiplies the routing weights inside the activation
    (weighted SwiGLU, moe_apply_probs_on_input off), so un-permute is a plain scatter-add.
    Shared experts keep f_s/t × cost.memory.mlp_intermediate_bytes per token.
    With a clamped GLU (clamped_glu_ops) the clamps keep the fc1 output (their inputs) and the fused activation
    its clamped copy, p·f_e/etp more at 2 B per row (clamped_copy_bytes).
    The fused grouped MLP (fuses_grouped_mlp) keeps no clamped copy: its fc1 output, the fc2 input, the
    fc1 input and the probabilities (grouped_mlp.py fuser_forward save_for_backward at 4329ff84).
    Under the paged stash (stashes_expert_activations) those routed rows live in the stash's CUDA buffer, sized
    at the buffer factor (LayerShape.paged_stash) times the average rows in flight (Megatron-LM cd4afffa6
    moe/paged_stash.py allocate_stash_buffers: max over the schedule of the summed avg_num_tokens, times
    moe_paged_stash_buffer_size_factor_cuda), so each average row T·k·etp keeps factor · stashed_row_bytes (no
    load factor: rows a learned router sends past the buffer go to the pinned host buffer, whose copies are
    not priced): its capacity-sized original is freed once the copy completes (wait_for_stash_to_complete).
    ``layernorm`` drops the norm input, ``moe_act`` the activation output and the clamped copy (the
    checkpointed activation keeps only its input), ``shared_experts`` the
    shared internals, ``moe`` everything after the norm output (Megatron-LM recompute modules)."""
    h, ab, t = model.hidden, shape.act_bytes, shape.tp
    gin = shape.gemm_input_bytes
    tokens = moe_tokens(shape)
    norm = (0.0 if "layernorm" in modules else ab * tokens * h) + ab * tokens * h
    if "moe" in modules:
        return norm
    rows = routed_rows(model, shape, expert)
    f = (model.moe_ffn_hidden or 0) / expert.etp
    p = model.mlp_input_projections
    clamped = 0.0 if fuses_grouped_mlp(shape) else clamped_copy_bytes(model, ab * p * f)
    act = 0.0 if "moe_act" in modules else gin * f + clamped
    routed = rows * (gin * h + ab * p * f + act + ROUTER_SCORE_BYTES)
    if (
        stashes_expert_activations(shape) and "moe_act" not in modules
    ):  # the buffer, on the average rows
        average = average_routed_rows(model, shape, expert)
        routed = average * shape.paged_stash * stashed_row_bytes(model, shape, expert)
    router = ROUTER_SCORE_BYTES * tokens * model.experts
    shared = 0.0
    if model.shared_experts and "shared_experts" not in modules:
        fs = shared_width(model)
        shared = shape.local_tokens * fs * mlp_intermediate_bytes(model, shape) / t
    return norm + router + routed + shared


def clamped_copy_bytes(model: ModelSpec, fc1_row_bytes: float) -> float:
    """Bytes per routed row a clamped GLU keeps beyond the fc1 output: the concatenated clamped copy
    (``fc1_row_bytes``, one fc1 output row) that Megatron-Core's fused activation saves for its backward while the
    clamps' autograd nodes keep their input, the fc1 output itself (clamped_glu_ops); 0 without a clamp."""
    return fc1_row_bytes if model.glu_clamp is not None else 0.0


def dense_mlp_activation_bytes(
    model: ModelSpec, shape: LayerShape, modules: tuple[str, ...]
) -> float:
    """Dense MLP (Korthikanti et al. 2022 §4.1): norm input (2 B·h) and MLP input (the fc1 GEMM input,
    gemm_input_bytes·h), both SP shards; intermediates per token split by t: the fc1 output (2·f
    SwiGLU, f GeLU, at 2 B) and the fc2 GEMM input f at gemm_input_bytes; ``mlp`` drops the
    intermediates, ``layernorm`` the norm input."""
    h, ab, gin, t = model.hidden, shape.act_bytes, shape.gemm_input_bytes, shape.tp
    sp = shape.sp_tokens
    norm = (0.0 if "layernorm" in modules else ab * sp * h) + gin * sp * h
    inner = (
        0.0
        if "mlp" in modules
        else shape.local_tokens * model.ffn_hidden / t * mlp_intermediate_bytes(model, shape)
    )
    return norm + inner


def fp8_cast_op(model: ModelSpec, shape: LayerShape, rows: float, moe: bool) -> Op:
    """FP8 casts of GEMM operands (Micikevicius et al. 2022, arXiv:2209.05433): each GEMM input is
    read in bf16 (2 B) and written in fp8 (1 B), in forward the activations and in backward the
    output gradients (taken as the same element counts)."""
    t, h = shape.tp, model.hidden
    tokens = shape.local_tokens
    elems = tokens * 2 * h / max(1, t if shape.sequence_parallel else 1)
    if moe:
        elems += rows * (h + (model.moe_ffn_hidden or 0))
        if model.shared_experts:
            elems += tokens * shared_width(model) / t
    else:
        elems += tokens * model.ffn_hidden / t
    return Op(
        "fp8_casts",
        "memory",
        0.0,
        3.0 * elems,
        0.0,
        3.0 * elems,
        kernel=("fp8_cast", float(tokens), elems / tokens),
    )
