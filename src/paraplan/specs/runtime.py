"""What a training stack's runtime adds around the model's kernels (issue 33): copies, casts, blocking
transfers, state dtypes. A framework profile states its mechanisms (``FrameworkSpec.pipeline_engine``,
``fsdp_runtime``, ``fp8_param_gather``, ``optimizer_state``, ``grad_reduce_dtype``);
``cost.runtimes.runtime_costs`` turns them into these per-element byte counts and factors, which
``cost.frameworks.framework_system`` writes into the system's ``efficiency.runtime`` and the step reads
(``step.constants.system_terms``). Every default is "nothing added" (Megatron-Core's runtime, whose
copies the fitted constants already hold)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator, Field, field_validator

from paraplan.specs.strict import InputModel


# the fp8 scaling recipes a stack runs (cost.quantisation prices each); a framework profile states one or "none"
FP8Recipe = Literal["delayed", "current", "blockwise", "mxfp8", "nvfp4"]
# the grouped expert-GEMM implementations a stack runs (cost.compute.GROUPED_GEMM_IMPLEMENTATIONS prices each)
GroupedGemm = Literal["te-multistream", "cutlass-grouped", "torch-grouped-mm", "deepgemm"]
# the pipeline runtimes a stack runs with pp > 1 (FrameworkSpec.pipeline_engine, RuntimeCosts.pipeline_engine)
PipelineEngine = Literal["megatron", "deepspeed", "torch", "none"]
# the parallel kinds a stack's training loop may run (StackRuntimeFields.parallelism): data parallelism (with
# ZeRO / FSDP sharding where the plan states it), tensor, sequence (over the TP group), TP comm-GEMM overlap,
# pipeline, context and expert parallelism; a loop that runs none runs on one device;
# specs.rules_stack.stack_parallelism_rules
Parallelism = Literal["dp", "tp", "sp", "tp_overlap", "pp", "cp", "ep"]
PARALLELISMS: tuple[Parallelism, ...] = get_args(Parallelism)


class StackRuntimeFields(InputModel):
    """The runtime mechanisms a framework profile states and the step reads as they are (declared once: the
    profile, specs.framework.FrameworkSpec, and the system's runtime, RuntimeCosts, both inherit them)."""

    # a JSON / YAML list read as the tuple (strict validation takes no list for a tuple); anything else is left
    # to that validation, which refuses it in one line (tuple(None) would raise a TypeError, not an input error)
    parallelism: Annotated[
        tuple[Parallelism, ...], BeforeValidator(lambda v: tuple(v) if isinstance(v, list) else v)
    ] = Field(
        PARALLELISMS,
        description="the parallel kinds the stack's training loop runs (dp: data parallelism, with ZeRO / FSDP "
        "where the plan states it; tp, sp: sequence parallelism, tp_overlap: TP comm-GEMM overlap, pp, cp, ep); "
        "none: one process on one device. A plan using another is refused and the search leaves it out "
        "(specs.rules_stack.stack_parallelism_rules); default all",
    )

    @field_validator("parallelism")
    @classmethod
    def _each_kind_once(cls, value: tuple) -> tuple:
        """Each kind at most once (the rule reads the list as a set of kinds)."""
        repeated = sorted({kind for kind in value if value.count(kind) > 1})
        if repeated:
            raise ValueError(
                f"{', '.join(repeated)} stated more than once; allowed: each of "
                f"{', '.join(PARALLELISMS)} at most once"
            )
        return value

    fsdp_runtime: Literal["none", "fsdp1", "fsdp2"] = Field(
        "none",
        description="the runtime that shards parameters under ZeRO-3 / FSDP, for its copies and casts: fsdp1 "
        "(FullyShardedDataParallel's flat parameter, cost.runtimes.fsdp1_*) or fsdp2 (fully_shard, "
        "cost.runtimes.fsdp2_*), priced at the run's compute and reduce dtypes "
        "(step.constants.runtime_terms); none: no copies beyond the collectives",
    )
    fp8_param_gather: bool = Field(
        False,
        description="fp8 runs keep fp8 primary weights and all-gather them in fp8 (1 B per parameter)",
    )
    grouped_gemm: GroupedGemm = Field(
        "te-multistream",
        description="the kernel that runs the MoE expert GEMMs (cost.compute.grouped_gemm_time_s): te-multistream, "
        "Transformer Engine GroupedLinear, one cuBLAS GEMM per expert on 4 streams (Megatron-Core TEGroupedMLP, "
        "--moe-grouped-gemm); cutlass-grouped (Megatron-Core's legacy GroupedMLP, grouped_gemm package), "
        "torch-grouped-mm (torch._grouped_mm, torchtitan's MoE) and deepgemm (DeepGEMM m-grouped GEMMs): one "
        "grouped kernel over all experts",
    )
    moe_fused_grouped_mlp: bool = Field(
        False,
        description="block-scaled (mxfp8 / nvfp4 fp8_recipe) MoE expert MLPs run as Transformer Engine's fused "
        "grouped MLP: the fc1 grouped GEMM with the GLU activation, its clamp and the routing-probability "
        "product in its epilogue, the fc2 grouped GEMM with the probability-scaled bias in its own, backward "
        "the fc2 dgrad GEMM with the GLU backward (TransformerEngine 4329ff84 "
        "transformer_engine/pytorch/ops/fused/grouped_mlp.py GroupedMLP_CuTeGEMMGLU, taken when "
        "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 on compute capability 10 with an MXFP8 / NVFP4 recipe, over the ops "
        "Megatron-Core builds with use_transformer_engine_op_fuser: Megatron-LM cd4afffa6 "
        "megatron/core/transformer/moe/experts.py _make_fused_ops); graph.moe_mlp.fuses_grouped_mlp. False: "
        "TEGroupedMLP's separate activation (and clamp, bias) passes",
    )
    moe_hybridep_budget: bool = Field(
        False,
        description="the HybridEP dispatch runs on a static per-rank receive budget (Megatron-Core "
        "moe_expert_rank_capacity_factor: num_permuted_tokens = T·k·factor, rounded up to the quantisation "
        "alignment, in _HybridEPManager.setup_metadata), so the dispatch is non-blocking and reads no token "
        "count on the host (Megatron-LM cd4afffa6 megatron/core/transformer/moe/token_dispatcher.py "
        "setup_metadata / dispatch, fused_a2a.py HybridEPDispatch: 'If we provide the num_permuted_tokens, we do "
        "not need to use sync'): graph.moe_mlp.host_synchronises. Tokens beyond the budget would be dropped; "
        "False: the budget unset, the dropless dispatch synchronises",
    )
    moe_paged_stash: float = Field(
        0.0,
        ge=0.0,
        description="the fused grouped MLP's saved activations are packed into paged stash buffers after each MoE "
        "layer's forward and unpacked before its backward (Megatron-Core moe_paged_stash, Megatron-LM cd4afffa6 "
        "megatron/core/transformer/moe/paged_stash.py); the value is the CUDA buffer's size factor "
        "(moe_paged_stash_buffer_size_factor_cuda: the buffer holds that many times the average rows in flight); "
        "0: no paged stash. graph.moe_mlp.stashes_expert_activations, paged_stash_op",
    )
    moe_dglu_dbias_ratio: float = Field(
        1.0,
        ge=1.0,
        description="the fused grouped MLP's backward kernel where the experts carry a bias (the fc2 data-gradient "
        "grouped GEMM with the GLU backward and the fc1 bias gradient reduced in its epilogue: cuDNN frontend "
        "grouped_gemm_dglu_wrapper_sm100 with generate_dbias) runs this many times the time of that kernel in the "
        "releases around it: a release's measured slowdown of that one kernel (cost.compute.dglu_dbias_s); 1: "
        "no slowdown",
    )
    fp8_dot_product_attention: bool = Field(
        False,
        description="fp8 and FP4 runs run the fused attention in fp8 too (Megatron-Core fp8_dot_product_attention: "
        "Transformer Engine's fp8_dpa, cuDNN's FP8 / MXFP8 SDPA through FusedAttention). The model prices one "
        "effect of it: that kernel's backward visits every causal key tile of a layer with a sliding window "
        "(cost.attention_time.fp8_backward_window); its rate stays the attention rate of bf16 (no fp8 speed-up "
        "priced). False: the attention runs in bf16",
    )
    zero3_pp_reshard: bool = Field(
        True,
        description="ZeRO-3 / FSDP under pipeline parallelism: each layer's gathered weights are freed after its "
        "forward as without pipelining; False: every layer of the stage stays gathered between its forward and "
        "its backward (torchtitan's fully_shard(reshard_after_forward=False) with PP: "
        "step.stage_memory.zero3_gathered_bytes)",
    )
    zero3_root_held: bool = Field(
        False,
        description="ZeRO-3 / FSDP: the root module's parameters (the blocks outside the transformer layers: "
        "embedding, final norm, LM head) stay gathered from the forward to the end of backward: FSDP2's root "
        "never resharded after forward (FSDPState._lazy_init, PyTorch 2.4 to the June 2025 nightlies; since "
        "pytorch/pytorch#155319 only where reshard_after_forward is left unset), under a stack that wraps the "
        "whole model as the root over them (torchtitan before #1094): step.stage_memory.zero3_root_bytes",
    )
    zero2_reduce_per_microbatch: bool = Field(
        False,
        description="ZeRO-2 (gradients sharded) under gradient accumulation: the runtime reduces every "
        "micro-batch's gradients in its backward (DeepSpeed stage 2: DeepSpeedEngine.allreduce_gradients, "
        "'ZeRO stage >= 2 communicates during non gradient accumulation boundaries as well'; FSDP "
        "SHARD_GRAD_OP without no_sync); False: once per step, after the last micro-batch (Megatron-Core's "
        "distributed optimizer). step.tail.zero2_reduces",
    )
    nvfp4_rht: bool = Field(
        True,
        description="nvfp4 runs apply the random Hadamard transform to the columnwise (wgrad) copies of "
        "activations and output gradients, a cast pass of its own (cost.quantisation.rht_cast_passes): "
        "Transformer Engine NVFP4BlockScaling's default (disable_rht False, NVTE_NVFP4_DISABLE_RHT unset: "
        "transformer_engine/common/recipe/__init__.py at v2.12); False: one cast writes both orientations",
    )
    nvfp4_rht_cast_fusion: bool = Field(
        False,
        description="nvfp4 runs with the Hadamard transform quantise each activation / output gradient in one "
        "kernel writing the rowwise cast and the transformed columnwise cast from one read of the bf16 operand "
        "(Transformer Engine pull request #2555, ed424d306, 2026-03: quantizer.cpp NVFP4Quantizer::quantize_impl "
        "calls nvte_quantize_with_hadamard_transform for bf16 inputs of rows % 64 == 0 and cols % 128 == 0; "
        "cost.quantisation.cast_passes); False: TE v2.12's rowwise cast and fused transform + columnwise cast, "
        "each reading the operand",
    )
    nvfp4_scale_swizzle: bool = Field(
        False,
        description="nvfp4 runs quantise into the plain scale layout and every GEMM call swizzles each "
        "operand's E4M3 scales into the layout cuBLASLt reads, one kernel per operand "
        "(cost.compute.scale_swizzle_s): Transformer Engine v2.12 NVFP4Quantizer::create_tensor "
        "with_gemm_swizzled_scales = false, extensions/gemm.cpp swizzle_scales_for_gemm; False: the quantiser "
        "writes the swizzled layout itself (TE pull requests #3011 and #3190, 2026)",
    )
    cp_ring: Literal["transformer-engine", "torch-sdpa"] = Field(
        "transformer-engine",
        description="whose K/V ring runs the attention under context parallelism: Transformer Engine's "
        "(AttnFuncWithCP) or PyTorch's context_parallel over SDPA as torchtitan calls it (K/V repeated to the "
        "query heads, float32 merges and gradient sums): graph.cp_ring, graph.cp_ring_torch",
    )
    cp_ring_overlap: bool = Field(
        True,
        description="the K/V ring's transfers run beside the attention steps (Transformer Engine's send/recv; "
        "torch's eager functional collectives, waited at first use); False: each transfer is waited where it "
        "is issued and is exposed whole, as when torch's ring is traced into a torch.compile graph "
        "(step.block_terms.waited_cp_exposure_s)",
    )
    tp_backward_async: bool = Field(
        True,
        description="backward TP collectives run beside the GEMMs that do not need them (Megatron-LM's "
        "async tensor-parallel backward: the SP input re-gather beside dgrad, the gradient reduce-scatter beside "
        "wgrad); False: each waits where its result is first used (PyTorch DTensor TP), all exposed unless the "
        "TP comm-GEMM overlap is on (step.block_sums.block_comm)",
    )
    tp_layout_copies: bool = Field(
        False,
        description="each sequence-parallel all-gather and reduce-scatter runs through PyTorch's functional "
        "collectives on the sequence dimension (DTensor Shard(1)), which copy the whole tensor into or out of the "
        "dim-0 layout the NCCL call needs (torch.cat of its chunks) on the compute stream "
        "(cost.runtimes.tp_layout_copy_bytes)",
    )
    tp_fp8_all_gather: bool = Field(
        False,
        description="fp8 runs all-gather the sequence-parallel GEMM inputs and the row-parallel output gradients "
        "in fp8, 1 B per element (torchao Float8ColwiseParallel / Float8RowwiseParallel / "
        "PrepareFloat8ModuleInput under tensorwise scaling); the reduce-scatters stay in bf16",
    )
    proj_quantised_copy: bool = Field(
        False,
        description="fp8 / FP4 runs: the attention's output projection saves its own quantised copy of its input "
        "for the weight gradient (Transformer Engine Linear's default, the only choice under DelayedScaling) "
        "beside the attention output the fused attention kernel saves, instead of saving that bf16 output itself "
        "(TE Linear save_original_input, which Megatron-Core >= core_v0.14.0 sets on linear_proj for the other "
        "fp8 recipes and FP4; torchao's float8 linear saves its high-precision input); "
        "graph.mla.attention_output_bytes",
    )
    optimizer_state: Literal[
        "fp32_master", "param_dtype", "fp32_params", "bf16_moments", "bf16_moments_remainders"
    ] = Field(
        "fp32_master",
        description="mixed precision's optimizer state: an fp32 master copy with fp32 Adam moments (12 B per "
        "parameter beside 2 B bf16 weights), Adam's moments in the parameters' own half precision and no master "
        "(4 B: a model cast to bf16 under torch.optim.AdamW), or fp32 parameters that are their own master, cast "
        "to the compute dtype where used, with fp32 moments (4 + 8 B: MaxText weight_dtype float32 under "
        "optax.adamw), or Megatron-Core's precision-aware optimizer with bf16 Adam moments and an fp32 master "
        "(4 + 2 + 2 B) or the master's 16-bit remainders (2 + 2 + 2 B: store_param_remainders); "
        "cost.memory.state_bytes_per_param, PRECISION_AWARE_STATES",
    )
    grad_reduce_dtype: Literal["kept", "compute"] = Field(
        "kept",
        description="dtype of the data-parallel gradient reduction: the dtype the gradients are kept in "
        "(grad_dtype), or the compute dtype of the weight-gradient GEMM's output, reduced before its cast to "
        "the kept dtype (XLA SPMD with fp32 parameters); cost.memory.grad_reduce_bytes_per_param",
    )
    zero0_bf16_optimizer: bool = Field(
        False,
        description="the stack runs DeepSpeed's optimizers: without ZeRO (zero 0) a bf16-weight run keeps fp32 "
        "gradients and adds each micro-batch's bf16 gradient into them (DeepSpeed's BF16_Optimizer, which "
        "get_data_types picks when ZeRO is off); with ZeRO, grad_dtype: step.constants.zero0_terms; where the "
        "BF16_Optimizer does not run, the FP16 / basic / ZeRO-1 / ZeRO-2 / ZeRO-3 optimizers' accumulation "
        "passes (step.constants.zero_accumulation_bytes)",
    )


class RuntimeCosts(StackRuntimeFields):
    """Per-element traffic and transfer counts of one stack's runtime (cost.runtimes documents each)."""

    pipeline_engine: PipelineEngine = Field(
        "megatron",
        description="the pipeline runtime of a uniform plan with pp > 1 (the profile's pipeline_engine), whose "
        "rules the plan keeps: DeepSpeed's PipelineEngine refuses ZeRO-2/3 (specs.rules_stack.engine_zero_rule) and "
        "a DP overlap (engine_dp_overlap_rule) and runs 1F1B only (engine_schedule_rule)",
    )
    p2p_transfers_per_exchange: float = Field(
        1.0,
        ge=1.0,
        description="pipeline transfers one exchange costs: 1 when send and receive run at once (Megatron's "
        "batched / paired p2p), 2 when they are separate blocking calls (DeepSpeed's PipelineEngine)",
    )
    batch_syncs: float = Field(
        0.0,
        ge=0.0,
        description="device synchronisations per micro-batch on the first and the last pipeline stage, where the "
        "runtime loads the micro-batch's inputs and labels (DeepSpeed's PipelineEngine LoadMicroBatch: "
        "cost.runtimes.batch_sync_idle_s)",
    )
    p2p_overlap: bool = Field(
        False,
        description="the interleaved schedule's sends and receives run asynchronously beside the next compute "
        "(Megatron-Core overlap_p2p_comm; step.p2p.overlapped_p2p_exposed_s)",
    )
    grad_accumulation_bytes: float = Field(
        0.0,
        ge=0.0,
        description="HBM bytes per parameter the runtime moves after each micro-batch's backward to add its "
        "gradient into the gradient held across micro-batches (0: fused into the wgrad GEMM)",
    )
    ub_fp8_pipeline: bool = Field(
        False,
        description="TP comm-GEMM overlap: fp8 runs keep the pipelined reduce-scatter (24 / 16 SMs) after the "
        "row-parallel GEMMs, as the bf16 configuration (NeMo 24.09's launcher), instead of the 1-SM ring exchange "
        "of the later fp8 userbuffers configurations (cost.overlap.userbuffers_contention_s)",
    )
    fp8_recipe: FP8Recipe = Field(
        "delayed",
        description="the fp8 scaling recipe whose quantisation passes fp8 GEMM operands pay (cost.quantisation); "
        "delayed: Transformer Engine's DelayedScaling, Megatron-LM's --fp8-recipe default",
    )
    dualpipe_comm_sms: int = Field(
        20,
        ge=0,
        description="SMs DualPipe's overlapped forward-backward pair gives the expert-parallel all-to-all kernels, "
        "the rest computing (step.dualpipe.pair_compute_share); 20 of the H800's 132 in DeepSeek-V3's training "
        "(DeepSeek-V3 technical report, arXiv:2412.19437, §3.2.2 and §3.5.1)",
    )
    lazy_gradients: bool = Field(
        False,
        description="gradients are allocated during backward and freed by zero_grad(set_to_none=True), not held "
        "in a buffer allocated up front (cost.memory.peak_residents)",
    )
