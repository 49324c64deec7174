"""The cluster: accelerator, NVLink/NVSwitch domain and scale-out network (MISSION.md, "Inputs").

Quantities accept unit strings ("80 GiB", "3.35 TB/s", "989 TFLOPS", "400 Gb/s") and are stored in SI units
(bytes, bytes/s, FLOP/s, seconds). Every achievable-fraction parameter lives here, in one place, so that
``docs/model.md`` can list where each comes from.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, Field, PrivateAttr, ValidationInfo, field_validator

from paraplan.specs.choices import AttentionKernel, GraphRegion, GraphScopeWord
from paraplan.specs.choices import MODULE_IMPLS, ModuleRole  # also sweep.params reads them here
from paraplan.specs.errors import UnsupportedDtype
from paraplan.specs.fabric import NetworkSpec, NodeSpec
from paraplan.specs.quantities import Bytes, BytesPerS, Fraction, Seconds, Share, _quantity  # noqa: F401
from paraplan.specs.power import sustained_clock_fraction
from paraplan.specs.runtime import RuntimeCosts
from paraplan.specs.strict import InputModel

Dtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "nvfp4", "mxfp4"]

# Optimizer-step HBM traffic per parameter on its owner, one pass per kernel of Megatron-LM's
# mixed-precision step: zero the fp32 grad buffer (write 4), unscale + inf check (read 4, write 4),
# gradient-norm for clipping (read 4), Adam (read grad, master, m, v: 16; write master, m, v: 12),
# copy master to the half-precision weight (read 4, write 2) = 54 B (state sizes: ZeRO §3.1). The
# default of efficiency.optimizer_step_bytes; a framework profile sets its own (cost.frameworks).
OPTIMIZER_BYTES_PER_PARAM = 54.0
# Training datatypes (docs/model.md, "Datatypes"): the matrix rate each one's GEMMs run at, and the activation
# datatype its element-wise kernels and fused attention run in. fp32: IEEE fp32 GEMMs on the CUDA cores
# (torch.backends.cuda.matmul.allow_tf32 = False, PyTorch's default since 1.12); tf32: fp32 tensors whose GEMMs
# run on TF32 tensor cores (allow_tf32 = True, or torch.set_float32_matmul_precision("high")); element-wise
# work and storage stay fp32 in both. fp8 / nvfp4 / mxfp4: GEMM inputs quantised (TE recipes), the rest bf16.
LOW_PRECISION = ("fp8", "nvfp4", "mxfp4")
FP4 = ("nvfp4", "mxfp4")
FP4_PARTS = {"nvfp4": "NVIDIA Blackwell", "mxfp4": "NVIDIA Blackwell, AMD CDNA 4"}
ACTIVATION_DTYPE = {"tf32": "fp32", "fp8": "bf16", "nvfp4": "bf16", "mxfp4": "bf16"}
# Bytes per element of a quantised GEMM input: fp8 1; FP4 4 bits + its scales (BLOCK_SCALE_BYTES):
# NVFP4 an E4M3 per 16 (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision
# Inference", 2025; arXiv:2509.25149 §2), MXFP4 an E8M0 per 32 (OCP MX v1.0, §5.2 Table 1).
BLOCK_SCALE_BYTES = {"nvfp4": 1.0 / 16, "mxfp4": 1.0 / 32}
QUANTISED_INPUT_BYTES = {"fp8": 1.0} | {fp4: 0.5 + b for fp4, b in BLOCK_SCALE_BYTES.items()}


def gemm_cap_key(dtype: str) -> str:
    """The cap pricing a ``dtype`` GEMM: gemm_fp8 for fp8 and FP4 (× fp4_gemm_share), else gemm."""
    return "gemm_fp8" if dtype in LOW_PRECISION else "gemm"


def activation_dtype(dtype: str) -> str:
    """Datatype of activations, element-wise kernels and fused attention under a training dtype."""
    return ACTIVATION_DTYPE.get(dtype, dtype)


# The kinds of eager call the host model prices apart (cost.host_kinds), and an autograd node's own cost.
HostKind = Literal["linear", "layer_norm", "sdpa", "activation", "elementwise", "autograd_node"]


# The roles of memory-bound ops an eager stack runs as measured kernels (cost.eager_kernels), and the
# precision each runs in (a framework profile states them: specs.framework.FrameworkSpec.eager_kernels).
EagerRole = Literal["norm", "activation", "residual", "loss"]
EagerPrecision = Literal["bf16", "fp32"]


def _module_impls(value: dict) -> dict:
    for role, impl in value.items():
        if impl not in MODULE_IMPLS[role]:
            allowed = ", ".join(MODULE_IMPLS[role])
            raise ValueError(f"module_impl.{role}: {impl!r} is not allowed; allowed: {allowed}")
    return value


ModuleImpl = Annotated[dict[ModuleRole, str], AfterValidator(_module_impls)]


class EagerFields(InputModel):
    """The eager element-wise kernels' inputs, declared once: a framework profile states them
    (specs.framework.FrameworkSpec) and, when its kernels are not fused, cost.frameworks.framework_system
    copies them into the system's efficiency (EfficiencySpec), which the cost model reads."""

    eager_traffic_factor: float = Field(
        1.0,
        ge=1.0,
        allow_inf_nan=False,
        description="HBM traffic of the op graph's memory-bound ops relative to their fused count, for a "
        "stack that runs them as eager kernels; applied to analytical and measured-table pricing alike "
        "(cost.compute.memory_time_s); with a measured kernels table, only for the ops eager_kernels does "
        "not price",
    )
    eager_kernels: dict[EagerRole, EagerPrecision] = Field(
        default_factory=dict,
        description="the memory-bound op roles (norm, activation, residual, loss) the stack runs as one "
        "eager PyTorch kernel each and the precision each runs in, priced from the measured kernels of "
        "accelerator.kernel_tables where it has them in place of eager_traffic_factor (cost.eager_kernels)",
    )
    module_impl: ModuleImpl = Field(
        default_factory=dict,
        description="the implementation of each module role (norm, activation, rotary, loss, embedding, "
        "logits) the stack's model code runs: fused (one kernel per op) or a named composite of eager "
        "element-wise kernels (graph.eager_modules), priced by cost.eager_kernels; MaxText's one-hot "
        "embedding GEMM and fp32 logits dot (graph.xla_modules); PyTorch 1.x's separate bias passes and "
        "[b, s, np, hn] head copies (linear, heads: graph.megatron_eager)",
    )
    softmax_rate_share: Fraction = Field(
        1.0,
        description="share of the element-wise rate the stack's softmax and softmax-backward kernels reach in a "
        "composite's unfused attention scores (cost.eager_kernels.composite_times_s): 1 for PyTorch's persistent "
        "softmax (rows <= 1024 elements, PyTorch 1.2 on), less for the block-per-row kernel before it",
    )


class HostFields(InputModel):
    """The host model's inputs (cost.host), declared once: a framework profile states them
    (specs.framework.FrameworkSpec) and cost.frameworks.host_fields copies them into the system's
    efficiency (EfficiencySpec), which the cost model reads."""

    host_launch_s: Seconds = Field(
        0.0,
        description="host seconds to issue one kernel outside a CUDA graph: the stack's per-op dispatch and the "
        "driver launch, on the reference host (cost.host); 0: the host is not priced",
    )
    graph_kernel_s: Seconds = Field(
        0.0,
        description="host seconds per kernel of a replayed CUDA graph (the graph launch spread over its kernels; "
        "cost.host)",
    )
    launch_blocking: bool = Field(
        False,
        description="kernel launches are synchronous (CUDA_LAUNCH_BLOCKING=1 in the run's environment): the GPU "
        "idles while the host issues each kernel (cost.host.launch_blocking_idle_s)",
    )
    host_sync_latency_s: Seconds = Field(
        0.0,
        description="round trip of one device-to-host synchronisation (stream synchronize + small D2H copy) once "
        "the queue has drained (cost.host)",
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
    rng_state_copy_bytes: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="device bytes one blocking torch.cuda.get_rng_state / set_rng_state copies between host and "
        "GPU (the PyTorch <= 1.1 MTGP32 states); 0: the state lives on the host (cost.rng_state)",
    )
    rng_copies_per_pass: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="CUDA RNG state copies each run of a layer's forward makes (Megatron-LM's model-parallel "
        "tracker fork around the attention dropout: cost.rng_state)",
    )
    rng_copies_per_checkpoint: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="CUDA RNG state copies the activation-checkpoint function makes per recomputed layer, "
        "forward and backward together (cost.rng_state)",
    )
    checkpoint_early_stop: bool = Field(
        False,
        description="full recomputation stops once the forward's last saved tensor is recomputed (torch.utils."
        "checkpoint, use_reentrant=False, early_stop=True): step.block_sums.early_stop_tail_s",
    )
    autocast_casts: bool = Field(
        False,
        description="AMP autocast over fp32 parameters: one cast kernel per GEMM weight forward and one per "
        "weight gradient backward (cost.host.op_kernels)",
    )
    cuda_graph_scope: GraphScopeWord | tuple[GraphRegion, ...] = Field(
        "none",
        description="what the stack captures in CUDA graphs: none, attention, layer, full_iteration, or a list of "
        "Megatron-Core CudaGraphScope names (attn, mlp, moe, moe_router, moe_preprocess) as --cuda-graph-scope "
        "takes them (cost.graph_scope.graphed)",
    )
    host_dispatch_s: dict[HostKind, Seconds] = Field(
        default_factory=dict,
        description="an eager stack's host seconds per call by kind and per autograd node beyond its calls, "
        "pricing its ops call by call in place of host_launch_s per kernel (cost.host_kinds); empty: per kernel",
    )
    host_context_factor: Annotated[float, Field(ge=1)] = Field(
        1.0,
        description="a measured eager layer's host time over its calls' host_dispatch_s (cost.host_kinds)",
    )

    @field_validator("host_dispatch_s")
    @classmethod
    def _every_kind(cls, value):
        missing = [kind for kind in get_args(HostKind) if value and kind not in value]
        if missing:
            raise ValueError(f"needs every kind or none; missing {', '.join(missing)}")
        return value


class EfficiencySpec(HostFields, EagerFields):
    """Achievable fractions of peak; each value in a catalog file carries its source or calibration.
    The host model's fields (HostFields) and the eager kernels' (EagerFields) are set from the framework
    profile (cost.frameworks)."""

    gemm: Fraction = Field(0.8, description="fraction of peak matrix FLOP/s reached by large GEMMs")
    gemm_fp8: Fraction | None = Field(None, description="as gemm, for fp8 GEMMs; default = gemm")
    fp4_gemm_share: Fraction = Field(
        1.0,
        description="an FP4 GEMM kernel's share of its peak over the fp8 kernel's, timed alike on the part: "
        "FP4 GEMMs run at the FP4 peak x gemm_fp8 x this (docs/model.md 'Datatypes'); 1: the fp8 share",
    )
    gemm_ramp_s: Seconds = Field(
        40e-6,
        description="fixed ramp-up/tail time of one GEMM at full rate (size effect: t = F/R + t_ramp)",
    )
    attention: Fraction = Field(
        0.6,
        description="fraction of peak reached by fused attention (kernel attention_kernel) at the reference "
        "shape: causal, 8k tokens per call, head dim 128 (cost.attention.REFERENCE_SHAPE)",
    )
    attention_kernel: AttentionKernel = Field(
        "fa2",
        description="fused-attention kernel the attention fraction refers to (cost.attention.KERNEL_CURVES)",
    )
    table_in_step_share: dict[Literal["gemm", "gemm_fp8"], Fraction] = Field(
        default_factory=dict,
        description="share of an attached kernel table's isolated GEMM rate that GEMMs keep inside a "
        "training step, per cap (gemm: half precision, tf32, fp32; gemm_fp8: fp8 and FP4), as the caps "
        "are a kernel cap times an in-step share (cost.compute.gemm_time_s); absent: 1. Set by paraplan "
        "calibrate (docs/calibration.md)",
    )
    hbm: Fraction = Field(0.8, description="fraction of HBM bandwidth reached by streaming kernels")
    kernel_overhead_s: Seconds = Field(
        4e-6, description="fixed launch/tail cost added to each kernel"
    )
    grouped_gemm_fp8: Share = Field(
        1.0,
        description="share of the dense fp8 GEMM speed-up over bf16 that Transformer Engine's multi-stream "
        "per-expert fp8 GEMMs keep (GroupedLinear: each expert's split quantised and multiplied on its own, one "
        "cuBLAS GEMM per expert on 4 streams; cost.compute.te_multistream_grouped_s): 1 the dense fp8 rate, 0 the "
        "bf16 price; calibration, validate.fitted moe.grouped_gemm_fp8, docs/model.md",
    )
    a2a_overlap_cost: Share | None = Field(
        None,
        description="share of an expert-parallel all-to-all's time still paid when hidden behind another "
        "micro-batch's compute (the SMs its kernels hold: DeepEP's normal kernels use 20-24 SMs); "
        "default: the dispatcher's component share, cost.comm_contention.a2a_overlap_share (its SMs and "
        "the HBM its traffic takes); calibration, validate.fitted moe.a2a_overlap_cost, docs/model.md",
    )
    optimizer_step_bytes: float = Field(
        OPTIMIZER_BYTES_PER_PARAM,
        gt=0,
        description="HBM traffic per owned parameter of the optimizer step at this system's element-wise "
        "rate (default: Megatron-LM's mixed-precision step, OPTIMIZER_BYTES_PER_PARAM); a "
        "framework profile sets its own (cost.frameworks.framework_system)",
    )
    aligned_gemms_only: bool = Field(
        False,
        description="every GEMM the software runs is 16-byte aligned (a framework that pads its "
        "vocabulary: cost.frameworks.framework_system); else an unaligned GEMM runs at the measured "
        "share of cost.gemm_alignment",
    )
    host_sync_s: Seconds = Field(
        0.0,
        description="GPU idle per dropless-dispatch synchronisation beyond what the host model prices (cost.host: "
        "the sync's round trip and the host re-issuing the expert section); calibration, docs/model.md",
    )
    host_eager: bool = Field(
        False,
        description="element-wise ops run one eager kernel per PyTorch op (cost.host.op_kernels); set from the "
        "framework profile's fused_kernels",
    )
    host_speed: Annotated[float, Field(gt=0)] = Field(
        1.0,
        description="single-thread speed of the host CPU relative to the host the framework's launch figures were "
        "measured on (host times are divided by it); 1: the same class of host",
    )
    runtime: RuntimeCosts = Field(
        RuntimeCosts(),
        description="what the training stack's runtime adds around the kernels (specs.runtime; a framework "
        "profile sets it: cost.frameworks.framework_system)",
    )


class AcceleratorSpec(InputModel):
    name: str
    architecture: (
        Literal[
            "volta",
            "turing",
            "ampere",
            "ada",
            "hopper",
            "blackwell",
            "blackwell-rtx",
            "rubin",
            "cdna3",
            "cdna4",
        ]
        | None
    ) = Field(
        None,
        description="GPU architecture: which kernels run (cost.attention.KERNEL_FALLBACK) and the "
        "hardware generation the error bands are conditioned on (validate.features.band_keys); "
        "blackwell-rtx: the GeForce / RTX PRO Blackwell parts (GB202, compute capability 12.0), a "
        "generation apart from the data-centre Blackwell (GB100, 10.0) that the validation cases ran on",
    )
    matrix_flops: dict[Dtype, Annotated[float, _quantity("flops"), Field(gt=0)]] = Field(
        description="peak dense matrix FLOP/s per datatype"
    )
    vector_flops: dict[Dtype, Annotated[float, _quantity("flops"), Field(gt=0)]] = Field(
        description="peak non-tensor-core FLOP/s per datatype"
    )
    hbm_capacity: Bytes
    hbm_bandwidth: BytesPerS
    sm_count: int = Field(
        gt=0, description="streaming multiprocessors (compute units); sets the wave size"
    )
    sm_clock_ghz: float | None = Field(
        None,
        gt=0,
        le=5,
        description="datasheet boost SM clock (GHz): the rate of cost.gemm_alignment's align-1 fallback "
        "kernel on the parts that run it (per SM per clock); None: not stated",
    )
    softmax_exp_rate: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="exponentials per second of the special function units (MUFU.EX2: SMs × results per "
        "clock per SM × clock), the softmax's bound in fused attention (cost.compute.attention_time_s); "
        "None: not bounded",
    )
    efficiency: EfficiencySpec = EfficiencySpec()
    host_memory: Bytes | None = Field(
        None, description="second memory tier (host DRAM) per GPU, for offload"
    )
    host_bandwidth: BytesPerS | None = Field(
        None, description="HBM <-> host bandwidth per GPU (PCIe / C2C)"
    )
    l2_cache: Bytes | None = Field(
        None,
        description="on-chip L2 cache; memory copies whose bytes moved fit in it are cache-resident, "
        "not HBM-bound (cost.kernel_tables, calibrate)",
    )
    kernel_tables: str | None = Field(
        None,
        description="measured per-shape kernel table: a shipped name (paraplan systems --tables) or a folder "
        "holding table.yaml and its CSVs; kernels it covers are priced from it (cost.kernel_tables)",
    )
    reserved_memory: Bytes = Field(
        2 * 2**30,
        description="HBM not available to the framework (CUDA context, allocator fragmentation)",
    )
    tdp_w: float | None = Field(
        None, gt=0, description="rated board power (W) at which the datasheet peaks hold"
    )
    power_cap_w: float | None = Field(
        None,
        gt=0,
        description="board power limit (W, nvidia-smi -pl) below tdp_w: matrix, vector and "
        "special-function rates scale by specs.power.sustained_clock_fraction; None: uncapped",
    )

    @field_validator("power_cap_w")
    @classmethod
    def _cap_has_a_rating(cls, value, info: ValidationInfo):
        if value is not None:
            tdp = info.data.get("tdp_w")
            if tdp is None:
                raise ValueError("needs accelerator.tdp_w, the board's rated power, to scale from")
            sustained_clock_fraction(value, tdp)  # a cap at or below the idle draw is refused
        return value

    def hbm_rate(self) -> float:
        """Achieved HBM bytes/s of a memory-bound pass, the analytical rate: hbm_bandwidth · efficiency.hbm
        (the datasheet bandwidth times the share a streaming kernel reaches). The one reading of it: every
        copy, element-wise pass and accumulation priced without a measured table reads it."""
        return self.hbm_bandwidth * self.efficiency.hbm

    def clock_fraction(self) -> float:
        """Share of the datasheet SM clock sustained under power_cap_w (specs.power)."""
        return sustained_clock_fraction(self.power_cap_w, self.tdp_w)

    def exp_rate(self) -> float | None:
        """softmax_exp_rate at the sustained clock (the SFUs run on the SM clock; specs.power)."""
        rate = self.softmax_exp_rate
        return rate * self.clock_fraction() if rate else rate

    @field_validator("matrix_flops")
    @classmethod
    def _has_half(cls, value):
        if not any(k in value for k in ("fp16", "bf16")):
            raise ValueError("matrix_flops needs at least fp16 or bf16")
        return value

    @field_validator("vector_flops")
    @classmethod
    def _has_a_rate(cls, value):
        if not value:  # peak_vector_flops falls back to any entry, but needs one (issue 37)
            raise ValueError(
                "vector_flops needs at least one datatype's rate, e.g. bf16: 67 TFLOP/s"
            )
        return value

    def peak_matrix_flops(self, dtype: str) -> float:
        """Peak matrix rate for ``dtype``: its datasheet entry; fp16 and bf16 share tensor cores; fp32
        without an fp32 entry (a part whose datasheet gives only TF32) runs at the TF32 rate. FP4
        (nvfp4, mxfp4) needs its own entry (which parts have one, and the refusal a plan gets:
        specs.rules_precision.dtype_rule). Under a power cap, times the sustained clock share (clock_fraction)."""
        return self._datasheet_matrix_flops(dtype) * self.clock_fraction()

    def _datasheet_matrix_flops(self, dtype: str) -> float:
        table = self.matrix_flops
        if dtype in table:
            return table[dtype]
        if dtype in ("fp16", "bf16") and ("bf16" in table or "fp16" in table):
            return table.get("bf16") or table["fp16"]
        if dtype == "fp32" and "tf32" in table:
            return table["tf32"]
        raise UnsupportedDtype(
            f"dtype: {dtype!r} is not supported by accelerator {self.name} (matrix_flops has "
            f"{', '.join(sorted(table))}); choose one of those"
        )

    def peak_attention_flops(self, dtype: str) -> float:
        """Peak rate of fused attention's matrix products under a training dtype: bf16 in fp8 and FP4
        recipes (Transformer Engine runs attention in half precision); in fp32 and tf32 (SDPA's
        memory-efficient kernel, the only fused one taking fp32) a third of the TF32 rate where the
        part has TF32: that kernel multiplies fp32 operands as 3xTF32 (PyTorch
        aten/src/ATen/native/transformers/cuda/mem_eff_attention/gemm_kernel_utils.h, DefaultGemmType
        for float on sm80+: cutlass::arch::OpMultiplyAddFastF32, three TF32 MMAs per product, whatever
        torch.backends.cuda.matmul.allow_tf32 says); the fp32 rate elsewhere."""
        if dtype in LOW_PRECISION:
            return self.peak_matrix_flops("bf16")
        if dtype in ("fp32", "tf32"):
            if "tf32" in self.matrix_flops:
                return self.matrix_flops["tf32"] / 3.0 * self.clock_fraction()
            return self.peak_matrix_flops("fp32")
        return self.peak_matrix_flops(dtype)

    def peak_vector_flops(self, dtype: str) -> float:
        """Peak vector rate for element-wise work in ``dtype``'s activations (activation_dtype: fp8 and
        FP4 training keep them in bf16, tf32 in fp32); falls back to fp16 / bf16 / fp32 entries,
        whichever the datasheet gives (fp32 activations first to the fp32 entry); under a power cap,
        times the sustained clock share (clock_fraction)."""
        table = self.vector_flops
        wanted = activation_dtype(dtype)
        order = ("fp32", "bf16", "fp16") if wanted == "fp32" else (wanted, "bf16", "fp16", "fp32")
        rate = next((table[key] for key in order if key in table), None) or max(table.values())
        return rate * self.clock_fraction()

    def gemm_efficiency_cap(self, dtype: str) -> float:
        """Share of the dtype's peak: gemm_cap_key's cap (gemm if gemm_fp8 unset) × fp4_gemm_share."""
        eff = self.efficiency
        fp8 = gemm_cap_key(dtype) == "gemm_fp8" and eff.gemm_fp8 is not None
        return (eff.gemm_fp8 if fp8 else eff.gemm) * (eff.fp4_gemm_share if dtype in FP4 else 1.0)


class SystemSpec(InputModel):
    name: str = "custom"
    source: str = ""
    accelerator: AcceleratorSpec
    node: NodeSpec
    network: NetworkSpec
    price_per_gpu_hour: float | None = Field(
        None, ge=0, description="USD per GPU-hour, for run cost"
    )
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="dotted field path -> datasheet citation or calibration note",
    )
    _hash: int = PrivateAttr(0)

    def model_post_init(self, __context) -> None:
        self._hash = hash(self.model_dump_json(exclude={"sources"}))

    def __hash__(
        self,
    ) -> int:  # frozen but holds dicts: hash the canonical JSON once (cost caches key on it)
        return self.__pydantic_private__["_hash"]
