"""The constants fitted to step times, what they were fitted on, and how to refit them.

Every other number in the model is a datasheet value, a component benchmark or a stated
assumption (docs/model.md; the reserved-peak assumptions of the torchtitan profiles in ``ASSUMED_INPUTS``).
The constants below are the only ones fitted to end-to-end step times,
each on the visible case sets named in ``fitted_on`` (file stems or case groups); the cases of those
sets are the *calibration* cases of ``paraplan validate``, all others are *held out*.

``refit`` minimises the step-time MAPE of some cases over a set of constants by coordinate descent
with a golden-section search inside each constant's bounds; ``paraplan validate --cv`` uses it for
leave-one-group-out cross-validation (paraplan.validate.cv); ``python -m paraplan.validate.joint_refit``
refits them together. Last joint refit (2026-11-27, after the host model, the stacks' runtime costs and
Qwen3's q/k norms): h100.gemm_fp8 0.562 -> 0.540, b200.gemm_fp8 0.516 -> 0.499, moe.grouped_gemm_fp8
0.523 -> 0.516, moe.host_sync_s 2.40 -> 2.57 ms, moe.a2a_overlap_cost 0.292 -> 0.270, with gemm.bf16,
a100.gemm_ramp_s and h100.attention held (``--hold``: the bf16 share and the A100 ramp gained nothing,
and a free attention share falls to 0.36, below the measured cuDNN kernel's ~0.5 of peak). Refit after the
fp8 recipes were priced (cost.quantisation) and the Megatron-Bridge cases encoded with their recipes (issue 33;
same holds), with NeMo 24.09's fp8 runs keeping the pipelined userbuffers reduce-scatter their launcher
configuration ran: h100.gemm_fp8 0.540 -> 0.560, b200.gemm_fp8 0.499 -> 0.525, moe.grouped_gemm_fp8 0.516 -> 0.512,
moe.host_sync_s 2.57 -> 2.70 ms, moe.a2a_overlap_cost 0.270 -> 0.253; calibration sets korthikanti 1.84,
mbridge-dense 2.34 -> 1.66, moe-visible 2.66 -> 2.68, nemo-llama31-h100 3.71 -> 3.51 % (against the shipped values
before the recipes). Refit of the moe.* constants after the dropless sync was priced from Megatron-Core's dispatch
path (cost.moe_host: drain, re-issue, graph launches; 2026-11-28, the other constants held): moe.grouped_gemm_fp8
0.512 -> 0.513, moe.a2a_overlap_cost 0.253 -> 0.240, moe.host_sync_s stays 2.70 ms; moe-visible 2.685 -> 2.689 %.
Without moe.host_sync_s the best refit (grouped 0.492, a2a 0.372) leaves moe-visible at 6.5 % (docs/model.md §11).
Joint refit check after the CP-merge and 25.11 changes (2026-11-28; gemm.bf16, a100.gemm_ramp_s, h100.attention
held): h100.gemm_fp8 0.560 -> 0.567, the others within the search tolerance of their catalog values (b200.gemm_fp8
0.5249, moe.grouped_gemm_fp8 0.5133, moe.host_sync_s 2.697 ms, moe.a2a_overlap_cost 0.2395); moe-visible 2.72 ->
2.63 % but nemo-llama31-h100 3.53 -> 3.56 %, held-out llmfoundry-mpt 10.51 -> 10.55 % and torchtitan-llama3
11.45 -> 11.68 % (their H100 fp8 cases 0.35-0.75 points faster): a regression, not written. A Hopper-only bf16
share (0.809 on the NeMo bf16 groups) was checked the same day and not shipped either (docs/model.md §6).
Refit after moe.grouped_gemm_fp8 became the share of the dense fp8 speed-up over bf16 that the multi-stream fp8
expert GEMMs keep (issue 33: fp8 experts never slower than bf16; 2026-11-29, the dense constants and
moe.host_sync_s held): moe.grouped_gemm_fp8 -> 0.0016, written 0 (its bound: fp8 experts at the bf16 price),
moe.a2a_overlap_cost 0.240 -> 0.301; moe-visible 2.69 -> 5.10 % (a regression, stated in docs/model.md §8). Free,
moe.host_sync_s goes to 3.31 ms and moe-visible to 4.05 %, but the calibrated H100 then predicts moe-visible worse
than the catalog (2.60 against 1.57 %, tests/unit/test_calibrate_vs_catalog.py), so it is held.
The constants fitted on AMP's per-stage trials are refitted by
``python -m paraplan.validate.hetero_refit``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from paraplan.catalog import load_system
from paraplan.catalog.gemm_benchmarks import GEMM_BENCHMARK_BF16
from paraplan.step.engines import ENGINE_STACKS, EngineRules
from paraplan.specs.system import SystemSpec


@dataclass(frozen=True)
class FittedConstant:
    """One fitted number: the systems that share it, its field, search bounds and the sets it was fitted on."""

    name: str
    systems: tuple[str, ...]  # catalog system names carrying the same fitted value
    path: tuple[str, ...]  # field path inside SystemSpec
    bounds: tuple[float, float]
    fitted_on: tuple[str, ...]
    note: str = ""

    def catalog_value(self) -> float:
        value: object = load_system(self.systems[0])
        for part in self.path:
            value = getattr(value, part)
        return 0.0 if value is None else float(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class EngineConstant(FittedConstant):
    """A fitted number of a training stack on its pipeline engine
    (``step.engines.ENGINE_STACKS[stack]``, the EngineRules field ``path[-1]``; a per-stage plan's
    ``engine_stack``), not of a system."""

    stack: str = "amp2022"

    def catalog_value(self) -> float:
        return float(ENGINE_STACKS[self.stack][self.path[-1]])


_EFF = ("accelerator", "efficiency")
_AMP_SETS = (
    "amp-mixed",
    "amp-t4",
)  # the two groups of AMP's timed trials (validate/cases/hetero/amp2022.json)
# Blackwell and Blackwell Ultra: the same fp8 tensor-core rate per SM and clock (datasheets: B200 and B300 4.5 PFLOPS
# dense fp8 on HGX, GB200 and GB300 5 PFLOPS), so one fitted fp8 cap; Blackwell Ultra adds FP4 and attention rate only.
# gb300-nvl72 carries the cap times its measured sustained fp8 GEMM rate ratio to the GB200 (1.184: cuBLASLt fp8 in
# one harness on both parts, catalog gb300-nvl72 sources); with_constants scales it by the same ratio as the others
_BLACKWELL_FP8 = ("dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72")
# systems that run Megatron-Core MoE on Hopper / Blackwell GPUs with a host like the calibration runs' (gh200-96gb-quad:
# the H100 GPU with a Grace host, as gb200-nvl72 / gb300-nvl72 pair Blackwell with Grace)
_MOE_SYSTEMS = (
    "dgx-h100-80gb",
    "dgx-h200",
    "dgx-h800",
    "dgx-b200",
    "gb200-nvl72",
    "dgx-b300",
    "gb300-nvl72",
    "gh200-96gb-quad",
    "alps-gh200",
    "hgx-h100-96gb-500w",
    "vr200-nvl72",
)
# H100 SXM silicon (GH100, 132 SMs, the H100 SXM tensor rates) with the fp8 GEMM cap and attention fraction fitted on
# the DGX H100 runs: H200 (same compute, HBM3e), GH200 (the H100 GPU of the Grace Hopper superchip) and the 96 GB
# HBM2e H100 SXM at 500 W (hgx-h100-96gb-500w: the same fractions of its capped peaks); H800 keeps its own
_H100_SILICON = (
    "dgx-h100-80gb",
    "dgx-h200",
    "gh200-96gb-quad",
    "alps-gh200",
    "hgx-h100-96gb-500w",
)
# systems whose bf16 GEMM cap is a published kernel benchmark's cap x one in-step share (catalog.gemm_benchmarks);
# the H100 PCIe / NVL and GH200 entries carry the H100 SXM cap (no benchmark of their own; GH200 is the same GH100 silicon),
# dgx-2h the V100 SXM2 cap (its V100 SXM3 at the datasheet clock ratio, as its kernel table)
_GEMM_BF16 = (
    *GEMM_BENCHMARK_BF16,
    "dgx-2h",
    "h100-pcie-8",
    "h100-nvl-8",
    "gh200-96gb-quad",
    "alps-gh200",
    "hgx-h100-96gb-500w",
)
FITTED_CONSTANTS: tuple[FittedConstant, ...] = (
    FittedConstant(
        "gemm.bf16",
        _GEMM_BF16,
        (*_EFF, "gemm"),
        (0.55, 0.89),
        ("korthikanti2022", "nemo-llama31-h100"),
        "the bf16 in-step share, one for all GPUs: value = dgx-a100-80gb's cap (its MAMF kernel cap 0.895 x the "
        "share); every listed system's cap scales with it, keeping the MAMF ratios between GPUs; jointly with "
        "a100.gemm_ramp_s and h100.gemm_fp8, mean of the two sets' step-time MAPEs",
    ),
    FittedConstant(
        "a100.gemm_ramp_s",
        ("dgx-a100-80gb", "dgx-a100-40gb"),
        (*_EFF, "gemm_ramp_s"),
        (0.0, 100e-6),
        ("korthikanti2022",),
        "jointly with gemm.bf16",
    ),
    FittedConstant(
        "h100.gemm_fp8",
        _H100_SILICON,
        (*_EFF, "gemm_fp8"),
        (0.3, 0.9),
        ("nemo-llama31-h100",),
        "fp8 cases of the DGX Cloud Llama 3.1 recipes, the 70B ones encoded with the TP comm overlap their "
        "recipe ran (issue 33); refitted jointly with b200.gemm_fp8 and the moe.* constants, mean of the "
        "four calibration sets' step-time MAPEs",
    ),
    FittedConstant(
        "h100.attention",
        _H100_SILICON,
        (*_EFF, "attention"),
        (0.2, 0.8),
        ("nemo-llama31-h100",),
        "bf16 and fp8 cases (attention runs in bf16 in both)",
    ),
    # the B200 fp8 cap on dense runs; then the mixture-of-experts constants, jointly over the 10 step times of
    # moe-visible (docs/model.md §8)
    FittedConstant(
        "b200.gemm_fp8",
        _BLACKWELL_FP8,
        (*_EFF, "gemm_fp8"),
        (0.25, 0.9),
        ("mbridge-dense",),
        "B200 fp8 GEMM cap, on the dense Llama 3 / 3.1 fp8 runs of DGX B200 and GB200 (no MoE case: the MoE "
        "runs add the grouped-GEMM share below on top of it)",
    ),
    FittedConstant(
        "moe.grouped_gemm_fp8",
        _MOE_SYSTEMS,
        (*_EFF, "grouped_gemm_fp8"),
        (0.0, 1.0),
        ("moe-visible",),
        "share of the dense fp8 speed-up over bf16 that Transformer Engine's multi-stream per-expert fp8 GEMMs "
        "keep (cost.compute.te_multistream_grouped_s), one for Hopper and Blackwell; jointly with "
        "moe.a2a_overlap_cost, b200.gemm_fp8 held at its dense fit and moe.host_sync_s held",
    ),
    FittedConstant(
        "moe.host_sync_s",
        _MOE_SYSTEMS,
        (*_EFF, "host_sync_s"),
        (0.0, 5e-3),
        ("moe-visible",),
        "GPU idle per dropless-dispatch host synchronisation beyond the mechanism priced from Megatron-Core's "
        "dispatch path (cost.moe_host: the round trip and the GPU's wait while the host re-issues the dispatch "
        "and the expert section, 0.07-0.14 ms on these runs); 5 dropless cases against 5 padded ones",
    ),
    FittedConstant(
        "moe.a2a_overlap_cost",
        _MOE_SYSTEMS,
        (*_EFF, "a2a_overlap_cost"),
        (0.0, 1.0),
        ("moe-visible",),
        "share of a hidden EP all-to-all still paid (the 2 moe_a2a_overlap cases against the rest); the "
        "component share (cost.comm_contention.a2a_overlap_share: dispatcher SMs and HBM) is 0.139 / 0.112 "
        "on those two runs (DeepEP / NCCL, H100 across nodes) and puts them at -6.2 / -13.8 % "
        "(docs/model.md §8, 'Hidden all-to-all price from components')",
    ),
    # AMP's software stack and the T4, jointly over AMP's 90 timed trials (docs/heterogeneous.md "Calibration"); the
    # per-stage estimator reads them (paraplan validate --hetero; --hetero --cv: validate.cv);
    # refitted by python -m paraplan.validate.hetero_refit (the two groups' MAPEs together)
    FittedConstant(
        "t4.gemm",
        ("aws-g4dn.12xlarge",),
        (*_EFF, "gemm"),
        (0.15, 0.8),
        _AMP_SETS,
        "T4 fp16 GEMM cap under sustained load (a 70 W part), jointly with t4.hbm and the host time",
    ),
    FittedConstant(
        "t4.hbm",
        ("aws-g4dn.12xlarge",),
        (*_EFF, "hbm"),
        (0.2, 1.0),
        _AMP_SETS,
        "achieved fraction of the T4's GDDR6 bandwidth by Megatron-LM v1.1.5's eager element-wise kernels",
    ),
    EngineConstant(
        "deepspeed.host_layer_forward_s",
        (),
        ("host_layer_forward_s",),
        (0.0, 3e-3),
        _AMP_SETS,
        "host seconds per transformer layer and micro-batch, forward (backward 2x), of AMP's stack; refit "
        "2026-11-30 (validate.hetero_refit, all four free) after the sender's TP gather and the first "
        "micro-batch's saving were priced (step.engines.ENGINE_STACKS['amp2022']): 0.998 ms, 1.0 kept "
        "(within the search's 15 us); the T4 and p3 values that refit moves trade amp-mixed for amp-t4, "
        "not written (docs/model.md)",
    ),
    FittedConstant(
        "p3.network_efficiency",
        ("aws-p3.8xlarge",),
        ("network", "efficiency"),
        (0.5, 1.0),
        ("amp-mixed",),
        "achieved fraction of the p3.8xlarge's 10 Gb/s by NCCL over TCP (only the mixed cluster has p3 nodes)",
    ),
)


@dataclass(frozen=True)
class AssumedInput:
    """A stack input that is neither fitted to step times nor taken from a source: a stated assumption, with what
    the project's data says of it and the measurement that would settle it (``ASSUMED_INPUTS``)."""

    name: str
    profiles: tuple[str, ...]  # framework profiles (catalog/frameworks) stating the value
    field: str  # FrameworkSpec field; its value is the profiles' (catalog/frameworks), not repeated here
    data: str  # what the measured data shows
    settle: str  # the measurement that would replace the assumption


# the reserved-peak inputs of the torchtitan profiles (step time does not read them; the reserved peak
# validate compares, peak_reserved_gib, and the fit check do: specs.framework.FrameworkSpec.reserved_bytes)
_TORCHTITAN = ("torchtitan", "torchtitan-compiled")
_STEPS = (
    "benchmarks/gpu/measured/{h100-2026-11-27,h100-2026-11-27b,h200-2026-11-27}/**/train_steps.json"
)
ASSUMED_INPUTS: tuple[AssumedInput, ...] = (
    AssumedInput(
        "torchtitan.cuda_context",
        _TORCHTITAN,
        "cuda_context",
        "not in the project's data: the measured steps record only the caching allocator's counters "
        f"(peak_allocated_gib, peak_reserved_gib: {_STEPS}), not the device memory in use",
        "torch.cuda.mem_get_info() before and after CUDA initialisation and the first kernels of each library "
        "(cuBLAS, cuDNN, NCCL), beside torch.cuda.memory_reserved(), on one H100",
    ),
    AssumedInput(
        "torchtitan.communication_buffers",
        _TORCHTITAN,
        "communication_buffers",
        "not in the project's data (single-GPU steps, no communicator); NCCL allocates per communicator, per "
        "channel and per connected peer (NCCL_BUFFSIZE, 4 MiB by default, for the simple protocol, with the LL "
        "and LL128 buffers beside it, and NVLink SHARP buffers where NVLS is on), outside PyTorch's allocator, "
        "and torchtitan opens one communicator per mesh dimension (dp, tp, pp, cp)",
        "device memory in use (torch.cuda.mem_get_info) less memory_reserved after the first collective of "
        "every mesh dimension, on an 8-GPU H100 host",
    ),
    AssumedInput(
        "torchtitan.allocator_fragmentation",
        _TORCHTITAN,
        "allocator_fragmentation",
        "the measured single-GPU eager and compiled steps (43 records, no FSDP) hold 0.48-5.67 GiB reserved "
        "beyond their allocated peak, 0.3-7.2 % of HBM (median 1.1 % on the 80 GB H100), 1.3-14.8 % of the "
        "allocated peak (median 4.1 %), the same GiB on H200 as on H100 for the same run: it follows the "
        f"workload, not the HBM size ({_STEPS}, peak_reserved_gib - peak_allocated_gib). FSDP2's per-layer "
        "all-gather and reduce-scatter buffers on their own streams are not in those runs",
        "max_memory_reserved - max_memory_allocated of torchtitan FSDP2 runs (the December 2024 tables give "
        "only the reserved peak)",
    ),
)


def calibration_sets() -> set[str]:
    """File stems and groups some constant was fitted on."""
    return {s for c in FITTED_CONSTANTS for s in c.fitted_on}


def with_constants(system: SystemSpec, values: dict[FittedConstant, float]) -> SystemSpec:
    """``system`` with each applicable constant scaled from its catalog value to ``values[c]`` (a ratio, so that
    a framework profile's adjustment of the same field is kept); rebuilt so its hash is fresh."""
    mine = tuple((c, v) for c, v in values.items() if system.name in c.systems)
    return _rebuilt(system, mine) if mine else system


@lru_cache(maxsize=256)
def _rebuilt(system: SystemSpec, mine: tuple[tuple[FittedConstant, float], ...]) -> SystemSpec:
    """with_constants' system, built once per (system, values): a refit's objective asks for it once per case."""
    data = system.model_dump()
    for const, value in mine:
        target = data
        for part in const.path[:-1]:
            target = target[part]
        base = const.catalog_value()
        current = target[const.path[-1]]
        target[const.path[-1]] = value if not base or current is None else current * value / base
    return SystemSpec.model_validate(data)


def with_engine_constants(rules: EngineRules, values: dict[FittedConstant, float]) -> EngineRules:
    """``rules`` with each EngineConstant among ``values`` set to its value."""
    return replace(
        rules, **{c.path[-1]: v for c, v in values.items() if isinstance(c, EngineConstant)}
    )


def _golden(f: Callable[[float], float], lo: float, hi: float, tol: float) -> float:
    """Minimum of a unimodal f on [lo, hi] by golden-section search to width tol."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def refit(
    objective: Callable[[dict[FittedConstant, float]], float],
    constants: Sequence[FittedConstant],
    start: dict[FittedConstant, float],
    sweeps: int = 2,
    rel_tol: float = 0.005,
) -> dict[FittedConstant, float]:
    """Coordinate descent: each constant in turn by golden-section search in its bounds, ``sweeps`` times."""
    values = dict(start)
    for _ in range(sweeps):
        for const in constants:
            lo, hi = const.bounds

            def f(x: float, const=const) -> float:
                return objective({**values, const: x})

            values[const] = _golden(f, lo, hi, rel_tol * (hi - lo))
    return values
