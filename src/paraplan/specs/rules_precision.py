"""The plan rules of the training dtype and the attention kernel on an accelerator (issue 34: no silent
bf16 / FlashAttention on V100, T4), each written once: the rest of the rule set of specs.rules (issue
31), read by the uniform estimate and search (accelerator_rules), the per-stage plan check and searches
(accelerators_rules) and the command line's defaults (default_precision, cluster_default_precision).
"""

from __future__ import annotations

from typing import get_args

from paraplan.specs.rules import Rule
from paraplan.specs.runtime import FP8Recipe
from paraplan.specs.system import FP4, FP4_PARTS, AcceleratorSpec


# ---- datatype -------------------------------------------------------------------------------------
def dtype_rule(dtype: str, accelerator: AcceleratorSpec) -> str | None:
    """The accelerator has a matrix peak for the training dtype (AcceleratorSpec.peak_matrix_flops);
    bf16 needs bf16 tensor cores (has_bf16_tensor_cores: the fp16 rate of a V100 or T4 is no bf16
    rate); FP4 needs tensor cores with that format (FP4_PARTS: NVFP4 on NVIDIA Blackwell, MXFP4 on
    Blackwell and AMD CDNA 4; NVIDIA Blackwell technical brief 2024, AMD CDNA 4 whitepaper 2025)."""
    allowed = ", ".join(accelerator.matrix_flops)
    if dtype == "bf16" and not has_bf16_tensor_cores(accelerator):
        return f"{accelerator.name} has no bf16 tensor cores (matrix_flops: {allowed}); use fp16"
    try:
        accelerator.peak_matrix_flops(dtype)
    except KeyError:
        if dtype in FP4:
            return (
                f"needs FP4 tensor cores with that format ({FP4_PARTS[dtype]}); "
                f"{accelerator.name} has none; allowed: {allowed}"
            )
        return f"{accelerator.name} has no peak for it; allowed: {allowed}"
    return None


# Transformer Engine's recipe checks (NVIDIA/TransformerEngine transformer_engine/pytorch/quantization.py
# _compute_mxfp8_support / _compute_nvfp4_support at d0067d0d, 2026-08; the same in fp8.py check_mxfp8_support /
# check_nvfp4_support at v2.8), which fp8_autocast runs before training (check_recipe_support for MXFP8): MXFP8BlockScaling
# needs compute capability 10.x ("Device compute capability 10.0 or higher required for MXFP8 execution"; 12.0+
# refused: "MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet"), NVFP4BlockScaling 10.0 or
# higher. Compute capability 10.x is the data-centre Blackwell (B200 / GB200 10.0, B300 / GB300 10.3), the
# accelerator's architecture "blackwell"; the GeForce / RTX PRO Blackwell parts are 12.0 ("blackwell-rtx").
# NVFP4 needs the FP4 tensor cores dtype_rule asks for (matrix_flops states nvfp4: Blackwell, both kinds).
# Float8BlockScaling (blockwise) goes through _compute_fp8_block_scaling_support: compute capability 9.0 or
# higher ("FP8 block scaled GEMM requires compute capability 9.0 or higher") with CUDA 12.9; of the parts
# that run fp8 at all, Ada (8.9) is below it. The NVFP4 check is check_nvfp4_support, which TE runs where
# the NVFP4 recipe is built, not check_recipe_support.
MXFP8_ARCHITECTURES = ("blackwell",)
BELOW_BLOCKWISE_ARCHITECTURES = ("ada",)


def fp8_recipe_supported(recipe: str, accelerator: AcceleratorSpec) -> bool:
    """Does Transformer Engine run the fp8 ``recipe`` on this accelerator (block comment above)? mxfp8 on
    the MXFP8_ARCHITECTURES, nvfp4 where dtype_rule takes nvfp4, blockwise off the
    BELOW_BLOCKWISE_ARCHITECTURES; delayed and current wherever fp8 runs (dtype_rule's fp8 entry)."""
    if recipe == "mxfp8":
        return accelerator.architecture in MXFP8_ARCHITECTURES
    if recipe == "nvfp4":
        return dtype_rule("nvfp4", accelerator) is None
    if recipe == "blockwise":
        return accelerator.architecture not in BELOW_BLOCKWISE_ARCHITECTURES
    return True


def fp8_recipe_rule(dtype: str, accelerator: AcceleratorSpec) -> str | None:
    """An fp8 plan runs the stack's fp8 recipe (efficiency.runtime.fp8_recipe, the framework profile's
    fp8_recipe): the accelerator must run it (fp8_recipe_supported). Other dtypes run no fp8 recipe
    (cost.quantisation.run_recipe)."""
    recipe = accelerator.efficiency.runtime.fp8_recipe
    if dtype != "fp8" or fp8_recipe_supported(recipe, accelerator):
        return None
    allowed = ", ".join(r for r in get_args(FP8Recipe) if fp8_recipe_supported(r, accelerator))
    needs = {
        "mxfp8": "compute capability 10.x (data-centre Blackwell, architecture blackwell)",
        "blockwise": "compute capability 9.0 or higher (Hopper and later)",
    }.get(recipe) or f"FP4 tensor cores ({FP4_PARTS[recipe]})"
    arch = accelerator.architecture or "architecture not stated"
    return (
        f"Transformer Engine runs the {recipe} recipe on {needs} only, not on {accelerator.name} "
        f"({arch}); allowed there: {allowed}"
    )


def accelerator_rules(accelerator, dtype: str, attention: str) -> list[Rule]:
    """The plan's dtype (dtype_rule), the stack's fp8 recipe (fp8_recipe_rule) and attention kernel
    (precision_rules) on this accelerator: the one check estimate and search both ask."""
    out: list[Rule] = []
    if rule := dtype_rule(dtype, accelerator):
        out.append(("plan.dtype", dtype, rule))
    elif rule := fp8_recipe_rule(dtype, accelerator):
        out.append(("framework.fp8_recipe", accelerator.efficiency.runtime.fp8_recipe, rule))
    if rule := host_link_rule(accelerator):
        out.append(("accelerator.host_bandwidth", accelerator.host_bandwidth, rule))
    return out + precision_rules(accelerator, attention)


def host_link_rule(accelerator) -> str | None:
    """A stack that copies the CUDA RNG state between GPU and host (``rng_state_copy_bytes`` > 0, PyTorch
    <= 1.1: cost.rng_state) is priced over the host link, which the system must then declare."""
    if accelerator.efficiency.rng_state_copy_bytes > 0 and not accelerator.host_bandwidth:
        return (
            "the stack copies the CUDA RNG state over the host link (rng_state_copy_bytes > 0); "
            "allowed: a system that declares accelerator.host_bandwidth"
        )
    return None


# ---- precision and attention kernel of the accelerator (issue 34: no silent bf16 / FlashAttention on V100, T4) ------
# bf16 tensor cores came with Ampere (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020, "BF16"); Volta
# (V100) and Turing (T4) have fp16 tensor cores only (Volta / Turing whitepapers). FlashAttention-2 runs on Ampere,
# Ada and Hopper (Dao-AILab/flash-attention README, v2.x, "Installation and features"); FlashAttention 1.x adds
# Turing, never Volta. An accelerator whose matrix_flops lists no bf16 rate is read as one of these older parts: it
# trains in fp16 with unfused attention (PyTorch's math kernel, as the AMP 2022 V100/T4 runs did).
def has_bf16_tensor_cores(accelerator) -> bool:
    """The accelerator's datasheet gives a bf16 matrix rate (Ampere and newer, CDNA 2 and newer)."""
    return "bf16" in accelerator.matrix_flops


def default_precision(accelerator) -> dict[str, str]:
    """The dtype and attention a plan takes when the user names neither: bf16 and FlashAttention on accelerators
    with bf16 tensor cores, fp16 and unfused attention on the older ones (block comment above)."""
    if has_bf16_tensor_cores(accelerator):
        return {"dtype": "bf16", "attention": "flash"}
    return {"dtype": "fp16", "attention": "unfused"}


def cluster_default_precision(accelerators) -> tuple[dict[str, str], str]:
    """(the dtype and attention a plan over these accelerators takes when the user names neither, the
    name of the first accelerator that sets them): default_precision of each, the first older part's
    (fp16 and unfused attention: a mixed V100 + A100 cluster runs what both run), else the first's."""
    chosen = None
    for accelerator in accelerators:
        precision = default_precision(accelerator)
        if not has_bf16_tensor_cores(accelerator):
            return precision, accelerator.name
        chosen = chosen or precision
    return chosen, ""


def accelerators_rules(accelerators, dtype: str, attention: str) -> list[Rule]:
    """accelerator_rules on each distinct accelerator (by name) of a cluster's pools or a per-stage
    plan's stages: the one check of both (specs.stage_plan, search.staged.problem)."""
    out: list[Rule] = []
    seen: set[str] = set()
    for accelerator in accelerators:
        if accelerator.name not in seen:
            seen.add(accelerator.name)
            out += accelerator_rules(accelerator, dtype, attention)
    return out


def precision_rules(accelerator, attention: str) -> list[Rule]:
    """FlashAttention needs an accelerator with bf16 tensor cores (block comment above); the dtype is
    dtype_rule's."""
    if has_bf16_tensor_cores(accelerator) or attention != "flash":
        return []
    rule = (
        f"FlashAttention-2 needs an Ampere or newer GPU, {accelerator.name} is older; use unfused"
    )
    return [("plan.attention", attention, rule)]
