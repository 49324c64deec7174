"""Apply a framework profile (``paraplan.specs.framework``) to a system and a plan.

The profile sets what differs by implementation and nothing else:
- plan defaults (``PLAN_DEFAULTS``): fused vs unfused attention, the run-wide knobs
  (``specs.plan.RUNTIME_FIELDS``: gradient dtype, fp8 weight copies, ZeRO-3 prefetch depth and cap on
  resident gathered parameters, context-parallel algorithm), and which overlaps are on; a value the
  plan states explicitly always wins;
- the attention kernel: the catalog's ``efficiency.attention`` refers to its ``attention_kernel``;
  the profile's kernel scales it by the ratio of kernel plateaus
  (``cost.attention.kernel_relative_speed``, FlashAttention-3 paper Fig. 5);
- eager element-wise ops: ``eager_traffic_factor`` (when not fused) set on the system's efficiency, the
  traffic multiplier cost.compute.memory_time_s applies to memory-bound ops in its analytical and its
  measured-table branch alike; and ``eager_kernels``, the op roles priced from a measured kernels table
  (cost.eager_kernels) where the system has one, and ``module_impl``, the modules run as composites of eager
  kernels (graph.eager_modules);
- the optimizer step's HBM traffic per parameter (``optimizer_step_bytes``: one fused AdamW kernel
  vs Megatron-LM's multi-kernel mixed-precision step);
- the host model's inputs (``host_fields``, cost.host): per-kernel launch time, CUDA-graph scope;
- the runtime's own costs (``efficiency.runtime``: copies, casts, blocking transfers; cost.runtimes);
- ``reserved_memory``: CUDA context + communication buffers + allocator fragmentation;
- ``network.collnet_enabled``: the launcher's NCCL_COLLNET_ENABLE (cost.collnet, InfiniBand SHARP); and
  ``node.nvls_efficiency`` 0 where the launcher exports NCCL_NVLS_ENABLE=0 (``nccl_nvls_enable``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from paraplan.cost.attention import converted_attention_fraction, effective_kernel
from paraplan.cost.memory import PRECISION_AWARE_STATES, precision_aware_step_bytes
from paraplan.cost.runtimes import runtime_costs
from paraplan.specs.fields import with_fields
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import RUNTIME_FIELDS, runtime_of
from paraplan.specs.system import AcceleratorSpec, EagerFields, HostFields, SystemSpec

# the cluster specs load with a cluster, a framework profile's with a profile (catalog.load_framework; issue 31: a
# uniform plan's start-up needs neither)
if TYPE_CHECKING:
    from paraplan.specs.cluster import ClusterSpec
    from paraplan.specs.framework import FrameworkSpec

PLAN_DEFAULTS = (
    "attention",
    *RUNTIME_FIELDS,
    "overlap_dp_grad_reduce",
    "overlap_param_gather",
    "overlap_tp_comm",
)


# the user's --set values on (model, system): cli.estimate_plan.apply_sets, sweep.params.apply_overrides
Overrides = Callable[[ModelSpec, SystemSpec], tuple[ModelSpec, SystemSpec]]


def run_specs(
    model: ModelSpec,
    system: SystemSpec,
    profile: FrameworkSpec | None = None,
    overrides: Overrides | None = None,
) -> tuple[ModelSpec, SystemSpec]:
    """The (model, system) a run is priced on, built in one order by every path (issue 31, "two paths that
    price the same plan must give the same number": ``estimate`` and ``api.estimate``, ``sweep``, ``search``
    and ``api.search`` through search.setup.search_specs, which then keeps its memory headroom):

    1. the given model and system;
    2. the framework ``profile`` on the system (framework_system), whose reserved memory holds its
       allocator fragmentation as a share of this HBM;
    3. ``overrides``, the user's ``--set`` values, which win over the profile's.
    """
    if profile is not None:
        system = framework_system(profile, system)
    if overrides is not None:
        model, system = overrides(model, system)
    return model, system


def framework_plan_fields(framework: FrameworkSpec, plan_fields: dict[str, Any]) -> dict[str, Any]:
    """``plan_fields`` with the profile's defaults filled in where the plan says nothing."""
    out = dict(plan_fields)
    for key in PLAN_DEFAULTS:
        out.setdefault(key, getattr(framework, key))
    return out


def framework_system(framework: FrameworkSpec, system: SystemSpec) -> SystemSpec:
    """The system as this framework uses it: attention kernel, eager-op HBM traffic factor and eager
    kernels, the runtime's own costs (cost.runtimes), the host model's inputs, runtime memory reserve."""
    kernel = effective_kernel(framework.attention_kernel, system.accelerator.architecture)
    accelerator = as_attention_kernel(system.accelerator, kernel)
    data = system.model_copy(update={"accelerator": accelerator}).model_dump()
    acc = data["accelerator"]
    eff = acc["efficiency"]
    if not framework.fused_kernels:
        eff.update(framework.model_dump(include=set(EagerFields.model_fields)))
    eff["module_impl"] = dict(framework.module_impl)  # what the model code runs, fused stack or not
    eff["softmax_rate_share"] = framework.softmax_rate_share  # the PyTorch softmax kernel it runs
    put_step_bytes(
        eff, "optimizer_step_bytes", framework.optimizer_step_bytes, framework.optimizer_state
    )
    eff["aligned_gemms_only"] = framework.pads_vocabulary
    eff.update(host_fields(framework))
    eff["runtime"] = runtime_costs(framework).model_dump()
    acc["reserved_memory"] = framework.reserved_bytes(system.accelerator.hbm_capacity)
    data["network"]["collnet_enabled"] = collnet_enabled(framework, system)
    if (
        not framework.nccl_nvls_enable
    ):  # NCCL_NVLS_ENABLE=0: no NVLink SHARP (cost.comm.nvls_all_reduce_slope)
        data["node"]["nvls_efficiency"] = 0.0
    return SystemSpec.model_validate(data)


def as_attention_kernel(acc: AcceleratorSpec, kernel: str) -> AcceleratorSpec:
    """The accelerator as a stack running attention ``kernel`` uses it: ``efficiency.attention_kernel`` set to
    ``kernel`` and the attention fraction, measured with the catalog's kernel, converted to it
    (cost.attention.converted_attention_fraction: × the ratio of kernel plateaus, FlashAttention-3 paper Fig. 5).
    Read by framework_system (a profile's kernel), calibrate.keep_base_attention (the base fraction for an
    attached table's kernel) and validate.tables (the analytical form of a table's kernel)."""
    eff = acc.efficiency
    fraction = converted_attention_fraction(
        eff.attention, kernel, eff.attention_kernel, acc.architecture
    )
    return with_fields(
        acc, {"efficiency.attention_kernel": kernel, "efficiency.attention": fraction}
    )


def collnet_enabled(framework: FrameworkSpec, system: SystemSpec) -> bool:
    """NCCL CollNet (InfiniBand SHARP) is on for the run where the system's network states it or the profile's
    launcher sets NCCL_COLLNET_ENABLE=1 (``nccl_collnet_enable``); off otherwise, NCCL's default (cost.collnet)."""
    return system.network.collnet_enabled or framework.nccl_collnet_enable


def framework_cluster(framework: FrameworkSpec, cluster: ClusterSpec) -> ClusterSpec:
    """The cluster as this framework uses it: every pool's system under ``framework_system`` (a per-stage
    plan's GPUs run the profile's stack, as a uniform plan's system does)."""
    return cluster_specs(None, cluster, framework)[1]


def cluster_specs(
    model: ModelSpec | None,
    cluster: ClusterSpec,
    profile: FrameworkSpec | None = None,
    overrides: Overrides | None = None,
) -> tuple[ModelSpec | None, ClusterSpec]:
    """(model, cluster) a per-stage plan is priced on: every pool's system built as run_specs builds a
    uniform plan's (the profile, then ``overrides``, the ``--set`` values, on each pool alike)."""
    from paraplan.specs.cluster import ClusterSpec

    pools = []
    for pool in cluster.pools:
        model_of_pool, system = run_specs(model, pool.system, profile, overrides)
        pools.append(pool.model_copy(update={"system": system}))
    model = model_of_pool if pools else model
    return model, ClusterSpec(
        name=cluster.name, source=cluster.source, pools=tuple(pools), links=cluster.links
    )


def put_step_bytes(target: dict, key: str, stated: float | None, optimizer_state: str) -> None:
    """Write into ``target[key]`` the optimizer's traffic per parameter, B, at the plain HBM rate (step.tail):
    ``stated`` where given, else the bytes ``optimizer_state`` implies (state_step_bytes); nothing where neither
    gives a value, so the system's (OPTIMIZER_BYTES_PER_PARAM unless it states its own) stays. One fused optimizer
    kernel such as torch.optim.AdamW(fused=True) streams at that rate, so the eager traffic factor of the
    element-wise ops (cost.compute.memory_time_s) does not apply to it. Read by framework_system (a profile's
    optimizer_step_bytes and optimizer_state) and by ``--set`` of the runtime's optimizer_state
    (cli.estimate_plan.apply_sets: a set optimizer_step_bytes is the stated value)."""
    step_bytes = stated if stated is not None else state_step_bytes(optimizer_state)
    if step_bytes is not None:
        target[key] = step_bytes


def state_step_bytes(optimizer_state: str) -> float | None:
    """The optimizer step's HBM bytes per parameter an optimizer-state precision implies: Megatron-Core's
    precision-aware optimizer's (cost.memory.precision_aware_step_bytes) for one of its states; None (the system's
    default, OPTIMIZER_BYTES_PER_PARAM) for any other. Read by put_step_bytes (framework_system, and ``--set`` of the
    runtime's optimizer_state), so the step's traffic follows the states. Unstated by a profile,
    Megatron-Core's precision-aware optimizer's bytes hold with Transformer Engine v2.13+'s fused bf16 moments
    (a profile of an earlier TE states its optimizer_step_bytes)."""
    if optimizer_state in PRECISION_AWARE_STATES:
        return precision_aware_step_bytes(optimizer_state)
    return None


def host_fields(framework: FrameworkSpec) -> dict[str, Any]:
    """The efficiency fields the host model reads (cost.host), from the profile: per-kernel launch and graph-replay
    times, the synchronisation round trip, the per-tensor step overhead, eager element-wise kernels, CUDA-graph scope."""
    fields = {name: getattr(framework, name) for name in HostFields.model_fields}
    return {**fields, "host_eager": not framework.fused_kernels}


def apply_framework(
    framework: FrameworkSpec, system: SystemSpec, plan_fields: dict[str, Any]
) -> tuple[SystemSpec, dict[str, Any]]:
    """(system, plan fields) under the framework profile (module docstring)."""
    return framework_system(framework, system), framework_plan_fields(framework, plan_fields)


def framework_search_fields(framework: FrameworkSpec) -> dict[str, Any]:
    """``SearchProblem`` fields a profile sets: its name (the error band's framework feature), its
    (overlap_tp_comm, overlap_dp_grad_reduce, overlap_param_gather) defaults, which the overlap switches
    take when the search does not vary them, and the run-wide knobs (``runtime``: specs.plan.RuntimeFields)."""
    return {
        "framework": framework.name,
        "default_overlaps": (
            framework.overlap_tp_comm,
            framework.overlap_dp_grad_reduce,
            framework.overlap_param_gather,
        ),
        "runtime": runtime_of(framework),
    }
