"""A training framework's implementation defaults (``--framework``, case field ``framework``).

Two runs of the same plan on the same GPUs differ by implementation: which fused-attention
kernel runs, which communication overlaps exist and are on by default, how gradients are kept,
how much memory the runtime itself takes. A :class:`FrameworkSpec` states those defaults; the
catalog ships one YAML file per framework (``paraplan/catalog/frameworks``), each value with its
source in ``sources``. ``paraplan.cost.frameworks.apply_framework`` turns a profile into the plan
defaults and system fields the cost model reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paraplan.specs.choices import Attention, AttentionKernel
from paraplan.specs.plan import PlanSpec, RuntimeFields
from paraplan.specs.runtime import FP8Recipe, PipelineEngine, StackRuntimeFields
from paraplan.specs.system import Bytes, EagerFields, HostFields


def plan_default(name: str) -> Any:
    """A profile field that gives the plan field ``name`` its default: PlanSpec's default, described as
    the plan default (the field's type is the profile's annotation)."""
    info = PlanSpec.model_fields[name]
    return Field(info.default, description=f"plan default: {info.description}")


class FrameworkSpec(RuntimeFields, HostFields, EagerFields, StackRuntimeFields):
    """Implementation defaults of one framework; every field is documented with its source in the catalog file.
    The host model's and the eager kernels' fields (specs.system.HostFields, EagerFields; used with
    fused_kernels false) are declared with the efficiency that receives them, the runtime mechanisms
    (specs.runtime.StackRuntimeFields) with the runtime that receives them."""

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
    fp8_recipe: Literal["none", FP8Recipe] = Field(
        "none",
        description="fp8 scaling recipe an fp8 run uses (stated with its source; the GEMM caps are fitted "
        "per GPU, not per recipe)",
    )
    overlap_p2p_comm: bool = Field(
        False,
        description="pipeline send/recv overlapped with compute by Megatron's interleaved schedule "
        "(step.p2p.overlapped_p2p_exposed_s; off without interleaving, as Megatron-LM turns it off)",
    )
    pipeline_engine: PipelineEngine = Field(
        "megatron",
        description="the pipeline runtime the stack uses with pp > 1: deepspeed's separate blocking transfers "
        "are priced on uniform plans (cost.runtimes); a per-stage plan names its runtime in plan.engine "
        "(step.engines.ENGINES)",
    )
    grad_accumulation: Literal["fused", "bf16_optimizer"] = Field(
        "fused",
        description="how gradients are summed over micro-batches: in the wgrad GEMM or by autograd at no "
        "extra pass (fused), or by DeepSpeed's BF16 optimizer into fp32 after every backward "
        "(cost.runtimes.bf16_optimizer_accumulation_bytes); not read under DeepSpeed's optimizers "
        "(zero0_bf16_optimizer), whose accumulation at every ZeRO stage is the optimizer's "
        "(specs.rules_stack.runs_bf16_optimizer, zero_accumulation_bytes)",
    )
    gradient_allocation: Literal["buffer", "backward"] = Field(
        "buffer",
        description="when gradients exist: in a buffer allocated when the model is wrapped and kept across "
        "steps (buffer: Megatron-Core's DistributedDataParallel, DeepSpeed's ZeRO), or allocated by autograd "
        "during backward and freed by zero_grad(set_to_none=True) (backward: eager PyTorch, Trainer, FSDP2); "
        "cost.memory.peak_residents",
    )
    attention: Attention = Field(
        "flash", description="plan default: fused or unfused core attention"
    )
    attention_kernel: AttentionKernel = Field(
        "cudnn",
        description="fused-attention kernel (cost.attention.KERNEL_CURVES); falls back where it cannot run",
    )
    overlap_dp_grad_reduce: bool = plan_default("overlap_dp_grad_reduce")
    overlap_param_gather: bool = plan_default("overlap_param_gather")
    overlap_tp_comm: bool = plan_default("overlap_tp_comm")
    tp_overlap_fp8_reduce_scatter: Literal["ring_exchange", "pipeline"] = Field(
        "ring_exchange",
        description="with TP comm overlap in fp8 runs, the userbuffers method of the reduce-scatter after the "
        "row-parallel GEMMs: ring_exchange (1 SM; NeMo 2.x / Megatron-Bridge userbuffers_fp8_* configurations) or "
        "pipeline (24 / 16 SMs kept from the GEMM, as in bf16; NeMo 24.09 launcher ub_cfg_*): cost.overlap",
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
    optimizer_step_bytes: float | None = Field(
        None,
        gt=0,
        description="HBM traffic per owned parameter of the optimizer step (one fused kernel, not slowed "
        "by eager_traffic_factor); None: Megatron-LM's multi-kernel mixed-precision step, 54 B",
    )
    nccl_collnet_enable: bool = Field(
        False,
        description="the recipe's launcher enables NCCL CollNet with the SHARP plugin (NCCL_COLLNET_ENABLE=1, "
        "nccl-rdma-sharp-plugins loaded; NCCL's default 0, NVIDIA/nccl src/init.cc v2.30.7): sets the system's "
        "network.collnet_enabled, priced where the fabric has SHARP (cost.collnet)",
    )
    nccl_nvls_enable: bool = Field(
        True,
        description="NCCL may run NVLink SHARP (NVLS) where the NVSwitch supports it (NCCL_NVLS_ENABLE unset: "
        "NCCL's default 2, on where supported, NVIDIA/nccl src/transport/nvls.cc v2.30.7); False where the "
        "recipe's launcher exports NCCL_NVLS_ENABLE=0: the system's node.nvls_efficiency becomes 0 "
        "(cost.frameworks.framework_system)",
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

    def outside_allocator_bytes(self) -> float:
        """Memory the caching allocator never holds: the CUDA context and the communication buffers
        (NCCL allocates its own with cudaMalloc)."""
        return self.cuda_context + self.communication_buffers

    def reserved_bytes(self, hbm_capacity_bytes: float) -> float:
        """Memory the runtime holds beside the model: outside_allocator_bytes + fragmentation."""
        return self.outside_allocator_bytes() + self.allocator_fragmentation * hbm_capacity_bytes
