"""The memory headroom a search keeps free (issue 34) and the rows whose fit is uncertain: applied by
``api.search``, ``paraplan search`` and the web page alike."""

from __future__ import annotations

from paraplan.step.margin import MEMORY_MARGIN

# Share of HBM a search keeps free beside the modelled peak (the system's reserved_memory already holds
# the CUDA context and communication buffers): the PyTorch caching allocator rounds and splits blocks,
# so reserved memory exceeds allocated memory. The memory margin of step.margin (its sources there;
# docs/export.md), the share within which an estimate's fit is uncertain.
DEFAULT_MEMORY_HEADROOM = MEMORY_MARGIN


def with_headroom(system_spec, headroom: float):
    """The system with ``headroom`` of its HBM kept free: the searches' capacity is hbm·(1 − headroom)."""
    # imported here: the command line's help loads no pydantic model (issue 31)
    from paraplan.specs.system import SystemSpec

    data = system_spec.model_dump()
    data["accelerator"]["hbm_capacity"] = system_spec.accelerator.hbm_capacity * (1 - headroom)
    return SystemSpec.model_validate(data)


def uncertain_fit(peak_bytes: float, hbm: float, headroom: float) -> bool:
    """A plan that fits with the headroom but not with twice it: near capacity, its fit depends on
    the fragmentation the headroom stands for."""
    return peak_bytes > hbm * (1 - 2 * headroom)


def fit_note(result, hbm: float, headroom: float) -> str | None:
    """One line naming the rows whose fit is uncertain (uncertain_fit), or None."""
    rows = [
        str(i)
        for i, r in enumerate(result.plans, start=1)
        if uncertain_fit(r.estimate.peak_stage.peak_bytes, hbm, headroom)
    ]
    if not rows:
        return None
    return (
        f"uncertain fit: #{', #'.join(rows)} peak within {headroom:.0%} of the usable "
        f"{hbm * (1 - headroom) / 2**30:.1f} GiB ({headroom:.0%} of HBM kept free, --memory-headroom)"
    )
