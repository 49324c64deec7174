"""A training framework's implementation defaults (``--framework``, case field ``framework``).

Two runs of the same plan on the same GPUs differ by implementation: which fused-attention
kernel runs, which communication overlaps exist and are on by default, how gradients are kept,
how much memory the runtime itself takes. A :class:`FrameworkSpec` states those defaults; the
catalog ships one YAML file per framework (``paraplan/catalog/frameworks``), each value with its
source in ``sources``. ``paraplan.cost.frameworks.apply_framework`` turns a profile into the plan
defaults and system fields the cost model reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from paraplan.specs.plan import RuntimeFields
from paraplan.specs.system import Bytes, EagerPrecision, EagerRole, ModuleImpl, Seconds


class FrameworkSpec(RuntimeFields):
    """Implementation defaults of one framework; every field is documented with its source in the catalog file."""

    name: str
    source: str = ""
    description: str = ""
    version: str = Field(
        "", description="the stack and release the profile states (container, tag or version range)"
    )
    base: str | None = Field(
        None,
        description="the profile of the stack this recipe profile refines (a recipe states where it departs "
        "from its stack's defaults); None for a stack profile",
    )
    fp8_recipe: Literal["none", "delayed", "current", "blockwise", "mxfp8", "nvfp4"] = Field(
        "none",
        description="fp8 scaling recipe an fp8 run uses (stated with its source; the GEMM caps are fitted "
        "per GPU, not per recipe)",
    )
    cuda_graph_scope: Literal["none", "attention", "layer", "full_iteration"] = Field(
        "none", description="what the recipe captures in CUDA graphs (stated with its source)"
    )
    overlap_p2p_comm: bool = Field(
        False,
        description="pipeline send/recv overlapped with compute by Megatron's interleaved schedule "
        "(step.p2p.overlapped_p2p_exposed_s; off without interleaving, as Megatron-LM turns it off)",
    )
    pipeline_engine: Literal["megatron", "deepspeed", "torch", "none"] = Field(
        "megatron",
        description="the pipeline runtime the stack uses with pp > 1: deepspeed's separate blocking transfers "
        "are priced on uniform plans (cost.runtimes); a per-stage plan names its runtime in plan.engine "
        "(step.engines.ENGINES)",
    )
    fsdp_runtime: Literal["none", "fsdp2"] = Field(
        "none",
        description="the runtime that shards parameters under ZeRO-3 / FSDP, for its copies and casts "
        "(cost.runtimes.fsdp2_compute_copy_bytes); none: no copies beyond the collectives",
    )
    grad_accumulation: Literal["fused", "bf16_optimizer"] = Field(
        "fused",
        description="how gradients are summed over micro-batches: in the wgrad GEMM or by autograd at no "
        "extra pass (fused), or by DeepSpeed's BF16 optimizer into fp32 after every backward "
        "(cost.runtimes.bf16_optimizer_accumulation_bytes)",
    )
    gradient_allocation: Literal["buffer", "backward"] = Field(
        "buffer",
        description="when gradients exist: in a buffer allocated when the model is wrapped and kept across "
        "steps (buffer: Megatron-Core's DistributedDataParallel, DeepSpeed's ZeRO), or allocated by autograd "
        "during backward and freed by zero_grad(set_to_none=True) (backward: eager PyTorch, Trainer, FSDP2); "
        "cost.memory.peak_residents",
    )
    optimizer_state: Literal["fp32_master", "param_dtype"] = Field(
        "fp32_master",
        description="mixed precision's optimizer state: an fp32 master copy with fp32 Adam moments (12 B per "
        "parameter), or Adam's moments in the parameters' own half precision and no master (4 B: a model cast "
        "to bf16 under torch.optim.AdamW); cost.memory.state_bytes_per_param",
    )
    fp8_param_gather: bool = Field(
        False,
        description="fp8 runs keep fp8 primary weights and all-gather them in fp8 (1 B per parameter)",
    )
    attention: Literal["flash", "unfused"] = Field(
        "flash", description="plan default: fused or unfused core attention"
    )
    attention_kernel: Literal["fa2", "fa3", "cudnn"] = Field(
        "cudnn",
        description="fused-attention kernel (cost.attention.KERNEL_CURVES); falls back where it cannot run",
    )
    overlap_dp_grad_reduce: bool = Field(
        True, description="plan default: DP gradient reduction overlaps backward"
    )
    overlap_param_gather: bool = Field(
        True, description="plan default: ZeRO parameter all-gather overlaps forward"
    )
    overlap_tp_comm: bool = Field(
        False, description="plan default: TP collectives overlap GEMMs (userbuffers / AsyncTP)"
    )
    pads_vocabulary: bool = Field(
        False,
        description="the vocabulary is padded to a multiple of 128 x tp (Megatron-LM "
        "--make-vocab-size-divisible-by, megatron/training/tokenizer/tokenizer.py "
        "_vocab_size_with_padding), so no LM-head GEMM is unaligned (cost.gemm_alignment)",
    )
    fused_kernels: bool = Field(
        True,
        description="element-wise ops fused (Megatron / Transformer Engine / XLA) or run eagerly one kernel each",
    )
    eager_traffic_factor: float = Field(
        1.0,
        ge=1.0,
        description="HBM traffic of eager element-wise ops relative to fused ones (used when not fused; with a "
        "measured kernels table, only for the ops eager_kernels does not price)",
    )
    eager_kernels: dict[EagerRole, EagerPrecision] = Field(
        default_factory=dict,
        description="with fused_kernels false: the op roles (norm, activation, residual, loss) the stack runs "
        "as one eager PyTorch kernel each and the precision each runs in; a system with a measured kernels "
        "table prices them from it in place of eager_traffic_factor (cost.eager_kernels)",
    )
    module_impl: ModuleImpl = Field(
        default_factory=dict,
        description="with fused_kernels false: the implementation of each module role (norm, activation, "
        "rotary, loss) the stack's model code runs: fused (one kernel per op) or a named composite of eager "
        "element-wise kernels (graph.eager_modules)",
    )
    optimizer_step_bytes: float | None = Field(
        None,
        gt=0,
        description="HBM traffic per owned parameter of the optimizer step (one fused kernel, not slowed "
        "by eager_traffic_factor); None: Megatron-LM's multi-kernel mixed-precision step, 54 B",
    )
    host_launch_s: Seconds = Field(
        0.0,
        description="host seconds to issue one kernel outside a CUDA graph: the stack's per-op dispatch and the "
        "driver launch (cost.host); 0: the host is not priced",
    )
    graph_kernel_s: Seconds = Field(
        0.0, description="host seconds per kernel of a replayed CUDA graph (cost.host)"
    )
    host_sync_latency_s: Seconds = Field(
        0.0,
        description="round trip of one device-to-host synchronisation once the queue has drained (cost.host)",
    )
    host_view_s: Seconds = Field(
        0.0,
        description="host seconds of one zero-kernel eager aten call (a view, transpose, split or aliasing "
        "reshape) and its autograd node, forward and backward (cost.host.op_host_s)",
    )
    host_graph_call_s: Seconds = Field(
        0.0,
        description="host seconds of one call of a torch.compile'd graph beside its kernels: guards and the "
        "AOTAutograd / Inductor wrappers' entry (cost.host.host_sums)",
    )
    compiled_graphs: Literal["none", "model", "layer"] = Field(
        "none",
        description="what one torch.compile'd graph holds: the whole model (one call per pass and micro-batch), "
        "each transformer layer (one per layer and pass), or nothing compiled (cost.host.graph_calls)",
    )
    host_tensor_s: Seconds = Field(
        0.0,
        description="fixed host seconds per weight tensor and step: zero_grad and the optimizer's Python loop "
        "(cost.host.step_host_overhead_s)",
    )
    host_step_s: Seconds = Field(
        0.0,
        description="fixed host seconds of one optimizer step and zero_grad (cost.host.step_host_overhead_s)",
    )
    autocast_casts: bool = Field(
        False,
        description="AMP autocast over fp32 parameters: one cast kernel per GEMM weight forward and one per "
        "weight gradient backward (cost.host.op_kernels)",
    )
    cuda_context: Bytes = Field(0.5 * 2**30, description="CUDA context and kernel images per GPU")
    communication_buffers: Bytes = Field(
        1.0 * 2**30, description="NCCL / framework communication buffers per GPU"
    )
    allocator_fragmentation: float = Field(
        0.0, ge=0.0, lt=0.5, description="share of HBM lost to caching-allocator fragmentation"
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="field -> citation or calibration note"
    )

    def reserved_bytes(self, hbm_capacity_bytes: float) -> float:
        """Memory the runtime holds beside the model: CUDA context + communication buffers + fragmentation."""
        return (
            self.cuda_context
            + self.communication_buffers
            + self.allocator_fragmentation * hbm_capacity_bytes
        )
