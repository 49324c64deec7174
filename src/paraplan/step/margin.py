"""The memory margin: how near a GPU's capacity the modelled peak may come before its fit is uncertain
(issue 33: "a memory margin so a plan within a few percent of capacity is 'uncertain', not 'does not fit'").

No import here beyond the standard library: the search's command line reads the margin as its default
headroom (search.headroom) without loading the step model (issue 31's start-up budget).
"""

from __future__ import annotations

# Share of a GPU's memory capacity within which the modelled peak decides nothing. Two readings give about
# 5 %: the memory model's error on the bundled validation cases (`paraplan validate`, 2026-11-29: peak
# allocated memory MAPE 3.8 % over 40 cases, reserved memory 5.9 % over 12), and the caching allocator's
# fragmentation, which GMLake (Guo et al., ASPLOS 2024, §2) measures at up to ~30 % of GPU memory on LLM
# fine-tuning, lower without recomputation and offload churn (search.headroom keeps this share free). An
# assumption within those, not fitted to any step time.
MEMORY_MARGIN = 0.05

FITS, UNCERTAIN, DOES_NOT_FIT = "fits", "uncertain", "does not fit"
FIT_ORDER = (FITS, UNCERTAIN, DOES_NOT_FIT)  # best first


def fit_verdict(peak_bytes: float, capacity_bytes: float, margin: float = MEMORY_MARGIN) -> str:
    """'fits' when peak ≤ C·(1 − m), 'does not fit' when peak > C·(1 + m), else 'uncertain': within the
    margin m of the capacity C either way, the model's memory error can carry the plan across it."""
    if peak_bytes <= capacity_bytes * (1.0 - margin):
        return FITS
    if peak_bytes > capacity_bytes * (1.0 + margin):
        return DOES_NOT_FIT
    return UNCERTAIN
