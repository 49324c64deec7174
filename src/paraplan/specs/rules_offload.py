"""The offload rules (issue 31): what a system must declare to offload (``offload_rule``), the host memory a
stage may fill (``host_capacity_bytes``), activation offload of some layers only with activation offload on
(``offload_layers_rule``), read by a uniform plan (specs.plan.PlanSpec, step.estimate) and a per-stage plan
(specs.stage_plan.StagePlanSpec, per pool of its stages: ``pool_offload_violations``) alike.
"""

from __future__ import annotations

from paraplan.specs.errors import Violation


def host_capacity_bytes(host_memory: float | None) -> float:
    """The host memory a stage's offloaded state may fill (step.result.StageMemory.host_capacity_bytes): the
    system's accelerator.host_memory, unbounded when it declares none (offload_rule then refuses every offload,
    so only plans that keep nothing on the host are priced against it)."""
    return host_memory or float("inf")


def offload_rule(
    offloads: bool, host_bandwidth: float | None, host_memory: float | None, system: str
) -> str | None:
    """Offloading weights, activations or optimizer state (``offloads``) streams them over the host link
    (step.offload) into host memory that must hold them (step.result.StageMemory.fits, host_capacity_bytes): the system
    must declare both (accelerator.host_bandwidth and accelerator.host_memory). The estimator's check,
    the search's offload options (search.grid_axes) and the fit hints (search.fit_hints,
    report.search_view) all ask it."""
    declared = (("host_bandwidth", host_bandwidth), ("host_memory", host_memory))
    missing = [name for name, value in declared if not value]
    if offloads and missing:
        return f"system {system} declares no {' / '.join(missing)}"
    return None


def offload_layers_rule(
    offload_activation_layers: int | None, offload_activations: bool
) -> str | None:
    """Activation offload of only k layers per stage (Megatron-LM --cpu-offloading-num-layers) is a setting of
    activation offload: it needs offload_activations."""
    if offload_activation_layers is not None and not offload_activations:
        return (
            f"offload_activation_layers={offload_activation_layers} needs offload_activations "
            "(--offload-activations)"
        )
    return None


def pool_offload_violations(plan, systems) -> list[Violation]:
    """``offload_rule`` of a plan (a uniform plan or a per-stage one: its offload_weights,
    offload_activations, offload_optimizer) on each system of ``systems`` (a uniform plan's one; the pools a
    per-stage plan's stages use), each violation once: every system a stage offloads from must declare its
    host link and host memory."""
    offloads = plan.offload_weights or plan.offload_activations or plan.offload_optimizer
    out: list[Violation] = []
    for system in systems:
        acc = system.accelerator
        rule = offload_rule(offloads, acc.host_bandwidth, acc.host_memory, system.name)
        if rule and (v := Violation("plan.offload", True, rule)) not in out:
            out.append(v)
    return out
