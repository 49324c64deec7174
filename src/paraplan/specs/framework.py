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

from paraplan.specs.plan import CPAlgorithm, GradDtype, Zero3GatherUnit, Zero3ReduceUnit
from paraplan.specs.strict import InputModel
from paraplan.specs.system import Bytes, EagerPrecision, EagerRole


class FrameworkSpec(InputModel):
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
        description="pipeline send/recv overlapped with compute (stated with its source; "
        "the interleaved schedule's exchanges are priced as in step.p2p either way)",
    )
    pipeline_engine: Literal["megatron", "deepspeed", "torch", "none"] = Field(
        "megatron",
        description="the pipeline runtime the stack uses with pp > 1 (stated with its source; a per-stage plan "
        "names its runtime in plan.engine, step.engines.ENGINES)",
    )
    attention: Literal["flash", "unfused"] = Field(
        "flash", description="plan default: fused or unfused core attention"
    )
    attention_kernel: Literal["fa2", "fa3", "cudnn"] = Field(
        "cudnn",
        description="fused-attention kernel (cost.attention.KERNEL_CURVES); falls back where it cannot run",
    )
    grad_dtype: GradDtype = Field(
        "fp32",
        description="dtype gradients are accumulated and reduced in (fp32 main grads vs half precision)",
    )
    fp8_weight_copies: bool = Field(
        False,
        description="plan default: fp8 training caches fp8 weight copies beside bf16 weights (cost.memory)",
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
    zero3_prefetch_layers: int = Field(
        1,
        ge=0,
        description="layers whose ZeRO-3/FSDP weights are gathered ahead of use (0: no prefetch)",
    )
    zero3_max_live_params: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="ZeRO-3: most gathered parameters resident per GPU at once (DeepSpeed "
        "stage3_max_live_parameters); None: whole gathered units (FSDP wraps a layer and prefetches the next)",
    )
    zero3_gather_unit: Zero3GatherUnit = Field(
        "layer",
        description="ZeRO-3 all-gather per layer (coalesced) or per weight tensor (DeepSpeed <= 0.5.4)",
    )
    zero3_reduce_unit: Zero3ReduceUnit = Field(
        "layer",
        description="ZeRO-3 gradient reduce-scatter per layer (coalesced) or per weight tensor (DeepSpeed <= 0.5.x)",
    )
    zero3_regather_recompute: bool = Field(
        False,
        description="ZeRO-3 with full recomputation: the recomputed forward gathers the weights again",
    )
    cp_algorithm: CPAlgorithm = Field(
        "ring",
        description="context parallelism: K/V ring exchange (ring attention) or all-to-all (Ulysses)",
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
    optimizer_step_bytes: float | None = Field(
        None,
        gt=0,
        description="HBM traffic per owned parameter of the optimizer step (one fused kernel, not slowed "
        "by eager_traffic_factor); None: Megatron-LM's multi-kernel mixed-precision step, 54 B",
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
