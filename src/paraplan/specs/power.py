"""Sustained SM clock of a power-capped GPU (``nvidia-smi -pl``): the one function a power cap acts through.

Model. A board under a cap P runs its SMs at the clock f whose power fits the cap. Board power is an
idle floor P_idle plus the switching power of the SMs, C·V²·f (CMOS dynamic power; N. Weste and D.
Harris, *CMOS VLSI Design*, 4th ed., §5.2), and in the DVFS range the driver lowers the voltage with
the clock (V ∝ f), so the switching power goes as f³. With the datasheet peaks holding at the board's
rated power P_tdp (f = 1):

    f(P) = min(1, ((P − P_idle) / (P_tdp − P_idle)) ** (1/3)),   P_idle = IDLE_SHARE · P_tdp.

Assumption: the cap throttles the SM (graphics) clock, not the memory clock, which nvidia-smi sets
apart (applications clocks: graphics and memory), so only the matrix, vector and special-function
rates scale with f; HBM and link bandwidths do not.

IDLE_SHARE: one H100 SXM5 80GB at its 700 W limit drew 74.8 W idle at a 345 MHz SM clock (nvidia-smi -q,
../shared/reference/measured/h100-sxm5-80gb/env.json, 2026-11-27): 74.8 / 700 = 0.107. Assumption: the
same share of the rated power on other parts.

Check against published figures (docs/hardware.md "Power caps"): the H100 NVL is the same 132-SM GH100
rated at 400 W; NVIDIA's datasheet gives it 835.5 dense BF16 TFLOPS (1,671 with sparsity) against the
700 W SXM5's 989.4, a ratio of 0.845; the model gives f(400 W of 700 W) = 0.804, 5 % lower (the
datasheet figures are boost clocks, which a sustained tensor-core load holds less of at the lower
power). A lower cap never gives a higher clock (f is non-decreasing in P), so a capped part is never
faster than the uncapped one (tests/property/test_power_cap_monotone.py).
"""

from __future__ import annotations

IDLE_SHARE = 74.8 / 700.0
# CMOS switching power ∝ V²·f with V ∝ f in the DVFS range (module docstring)
CLOCK_POWER_EXPONENT = 3.0


def idle_power_w(tdp_w: float) -> float:
    """P_idle = IDLE_SHARE · P_tdp: the board's draw with its SMs idle (module docstring)."""
    return IDLE_SHARE * tdp_w


def sustained_clock_fraction(power_cap_w: float | None, tdp_w: float | None) -> float:
    """f = min(1, ((P_cap − P_idle) / (P_tdp − P_idle))^(1/3)): the share of the datasheet SM clock
    a board capped at ``power_cap_w`` sustains under a full tensor-core load (module docstring:
    CMOS dynamic power C·V²·f with V ∝ f; P_idle from the measured H100 idle draw). 1 without a cap
    or a rating, and for a cap at or above the rating."""
    if power_cap_w is None or tdp_w is None or power_cap_w >= tdp_w:
        return 1.0
    idle = idle_power_w(tdp_w)
    if power_cap_w <= idle:
        raise ValueError(
            f"accelerator.power_cap_w: {power_cap_w:g} W is at or below the board's idle draw "
            f"{idle:.0f} W; allowed: above {idle:.0f} W (rated tdp_w {tdp_w:g} W)"
        )
    return ((power_cap_w - idle) / (tdp_w - idle)) ** (1.0 / CLOCK_POWER_EXPONENT)


def power_bound_rate_ratio(
    sm_count: int, tdp_w: float, ref_sm_count: int, ref_tdp_w: float
) -> float:
    """Sustained tensor rate of a part under a full load relative to a reference part of the same SM design
    and process, both held at their rated power: (N / N_ref)^(2/3) · ((P − P_idle) / (P_ref − P_idle,ref))^(1/3).

    The same law as ``sustained_clock_fraction``: the SMs' switching power is C·V²·f per SM with V ∝ f
    (module docstring), so N SMs at clock f draw P − P_idle = c·N·f³ and run at f = ((P − P_idle) / (c·N))^(1/3);
    the rate N·f is then N^(2/3)·((P − P_idle) / c)^(1/3). With P_idle = IDLE_SHARE · P on both parts the idle
    floors cancel: (N / N_ref)^(2/3) · (P / P_ref)^(1/3). It holds while neither part reaches its maximum SM clock
    (a full fp8 or bf16 GEMM load on Blackwell keeps the clock below it: the GB200's MAMF fp8 rate, 3,616 TFLOPS,
    is 72 % of its 5 PFLOPS datasheet peak, which is 148 SMs at its 2,062 MHz maximum clock; S. Bekman, ML
    Engineering Open Book, compute/accelerator/README.md @ 744d01e). Check on component data: GB200 (1,200 W)
    against B200 (1,000 W), both 148 SMs, gives 1.063; MAMF measures 1.053 (fp8) and 1.044 (bf16), where the
    datasheets differ by 1.111."""
    if min(sm_count, ref_sm_count) <= 0 or min(tdp_w, ref_tdp_w) <= 0:
        raise ValueError("sm_count and tdp_w must be positive on both parts")
    exponent = 1.0 / CLOCK_POWER_EXPONENT
    return (sm_count / ref_sm_count) ** (1.0 - exponent) * (tdp_w / ref_tdp_w) ** exponent
