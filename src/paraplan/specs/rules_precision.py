"""The plan rules of the training dtype and the attention kernel on an accelerator (issue 34: no silent
bf16 / FlashAttention on V100, T4), each written once: the rest of the rule set of specs.rules (issue
31), read by the uniform estimate and search (accelerator_rules), the per-stage plan check and searches
(accelerators_rules) and the command line's defaults (default_precision, cluster_default_precision).
"""

from __future__ import annotations

from paraplan.specs.rules import Rule
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


def accelerator_rules(accelerator, dtype: str, attention: str) -> list[Rule]:
    """The plan's dtype (dtype_rule) and attention kernel (precision_rules) on this accelerator: the
    one check estimate and search both ask."""
    out: list[Rule] = []
    if rule := dtype_rule(dtype, accelerator):
        out.append(("plan.dtype", dtype, rule))
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
