"""Memory-bound ops of an eager stack priced from measured kernels (a kernels table; issue 32).

An eager PyTorch stack runs each norm, activation, residual add and the loss as its own kernel (or a few),
whose time the op graph's fused byte count does not give (the blended ``eager_traffic_factor`` stood in for
it). Where the system's measured table has a ``kernels`` file (cost.kernel_tables: the shared
gpu_components.py's ``section_kernels``, timed in bf16 on eager PyTorch) and the framework profile names the
op's role in ``efficiency.eager_kernels`` (cost.frameworks), the op (graph.ops.Op.kernel: family, rows,
width) is priced from the kernel of its family at its shape, forward and backward apart:

| family | forward | backward |
|---|---|---|
| rmsnorm, layernorm | ``{family}_fwd`` | ``{family}_fwd_bwd`` − ``{family}_fwd`` − leaf add (RECIPES) |
| gelu | ``gelu_fwd`` | ``add`` (GeluBackward: one element-wise pass over dy, x -> dx, three tensors as add) |
| swiglu | ``swiglu_fwd`` | ``swiglu_fwd_bwd`` − ``swiglu_fwd`` − leaf add − the leaf halves' slice backwards (RECIPES) |
| add | ``add`` | ``add`` (autograd sums the skip's and the branch's gradients) |
| dropout_add | 2 × ``add`` (native_dropout: one pass writing output and mask) | 2 × ``add`` |
| cross_entropy | ``cross_entropy_{p}_fwd_bwd`` less the leaf logits' gradient accumulation, split by the op's forward / backward bytes (3 : 2) | |

Precision p of a role is the profile's (``bf16`` / ``fp32``), or fp32 where the training dtype keeps
activations in fp32 (tf32, fp32). A bf16-measured kernel run in fp32 moves twice the bytes: its time × 2 at
the rate measured for the shape. Where the role's precision is wider than the activations (AMP autocast
over fp32 parameters: the residual stream and the norms in fp32, PyTorch's autocast runs ``layer_norm`` in
fp32, aten/src/ATen/autocast_mode.cpp), the norm's output is cast to bf16 for the next GEMM and its
gradient back (one ``cast_bf16_fp32`` each way), and the residual add's backward casts the branch's
gradient to bf16 (one more). Each kernel takes at least the copies' launch floor (the memory table's
fastest copy, else ``kernel_overhead_s``). An op whose family or kernel the table lacks, or whose role the
profile does not name, keeps cost.compute.memory_time_s (with the traffic factor).

A module the profile's ``module_impl`` runs as a composite of eager element-wise kernels (graph.eager_modules:
transformers' LlamaRMSNorm, NewGELUActivation, apply_rotary_pos_emb) is priced kernel by kernel from the
composite's list at the table's measured element-wise rate (``composite_times_s``), with or without a table.

The fp8 / FP4 casts of GEMM operands (family ``fp8_cast``) are priced by their recipe in every stack, table or
not (Transformer Engine's quantisation kernels run apart from the GEMMs, fused stack or not):
cost.quantisation.quantisation_times_s.
"""

from __future__ import annotations

from paraplan.cost import kernel_tables as kt
from paraplan.cost.autocast import activation_casts
from paraplan.cost.leaf_grads import accumulation_bytes, sliced_halves_bytes
from paraplan.cost.quantisation import CAST, copy_floor_s, quantisation_times_s
from paraplan.graph.eager_modules import (
    FAMILY_ROLE,
    PRECISION_BYTES,
    autocast_runs,
    composite_run,
    composite_widths,
)
from paraplan.graph.ops import Op
from paraplan.graph.transformer import ACTIVATION_BYTES
from paraplan.specs.system import AcceleratorSpec

# the profile role (efficiency.eager_kernels) of each op family; the composite-capable families' roles are
# graph.eager_modules.FAMILY_ROLE's
ROLE = {
    "rmsnorm": "norm",
    "layernorm": "norm",
    "gelu": "activation",
    "swiglu": "activation",
    "add": "residual",
    "dropout_add": "residual",
    "cross_entropy": "loss",
    **{family: FAMILY_ROLE[family][0] for family in ("qk_rmsnorm", "gelu_new")},
}
MEASURED_BYTES = 2  # the kernels table's tensors are bf16 (gpu_components.py section_kernels)

# A backward measured as fwd_bwd: gpu_components.py times ``op(x).backward(g)`` on a leaf x, so each call also
# accumulates dx into x.grad (autograd's AccumulateGrad, ``x.grad += dx``: an add over x's shape that a layer's
# input, not a leaf, does not get; cost.leaf_grads) and runs the forward. The backward is fwd_bwd − fwd − that
# add, priced at the system's HBM rate (specs.system.AcceleratorSpec.hbm_rate), not from a table row, so that no slower
# measured kernel makes an op faster; where the leaf was used as two halves (``sliced``), less the slices'
# backward too (cost.leaf_grads.sliced_halves_bytes).
# family -> (forward kernels, backward: kernels, or (fwd_bwd, fwd, x's width as a multiple of the op's width,
# sliced))
RECIPES: dict[str, tuple[tuple[str, ...], tuple[str, ...] | tuple[str, str, float, bool]]] = {
    "rmsnorm": (("rmsnorm_fwd",), ("rmsnorm_fwd_bwd", "rmsnorm_fwd", 1.0, False)),
    "layernorm": (("layernorm_fwd",), ("layernorm_fwd_bwd", "layernorm_fwd", 1.0, False)),
    "gelu": (("gelu_fwd",), ("add",)),
    # the measured SwiGLU input is one leaf u of T x 2f read as its two halves (gpu_components.py:
    # F.silu(u[:, :f]) * u[:, f:]); the op graph's gate and up come from two linears (cost.leaf_grads)
    "swiglu": (("swiglu_fwd",), ("swiglu_fwd_bwd", "swiglu_fwd", 2.0, True)),
    "add": (("add",), ("add",)),
    "dropout_add": (("add", "add"), ("add", "add")),
}
# run as one fused kernel (not the composite): tanh-approximate GeLU as gelu, the per-head q/k norm as rmsnorm
RECIPES["gelu_new"], RECIPES["qk_rmsnorm"] = RECIPES["gelu"], RECIPES["rmsnorm"]


def _kernel_s(acc: AcceleratorSpec, name: str, rows: float, width: float) -> float | None:
    return kt.kernel_time_s(acc.kernel_tables, acc.l2_cache, name, (rows, width))


def _backward_s(acc, spec, rows: float, width: float) -> float | None:
    """A fwd_bwd row's backward: fwd_bwd − fwd − the leaf gradient's accumulation − a sliced leaf's slice
    backwards (above), at least 0."""
    both, fwd = _kernel_s(acc, spec[0], rows, width), _kernel_s(acc, spec[1], rows, width)
    if both is None or fwd is None:
        return None
    leaf_bytes = accumulation_bytes(rows * width * spec[2])
    if spec[3]:
        leaf_bytes += sliced_halves_bytes(rows * width)
    return max(both - fwd - leaf_bytes / acc.hbm_rate(), 0.0)


def elementwise_rate(acc: AcceleratorSpec, rows: float, width: float) -> float:
    """Bytes/s of an eager element-wise kernel over ``rows`` × ``width``: the measured ``add`` at that shape
    (3 tensors × 2 B per element over its time) where the system's kernels table has it, else the analytical
    HBM rate (AcceleratorSpec.hbm_rate: hbm_bandwidth · efficiency.hbm)."""
    add = _kernel_s(acc, "add", rows, width) if acc.kernel_tables else None
    if add is not None and add > 0:
        return 3 * MEASURED_BYTES * rows * width / add
    return acc.hbm_rate()


# the kernels of a composite that a stack's softmax_rate_share slows (graph.eager_modules.megatron_scores)
SOFTMAX_KERNELS = frozenset({"softmax", "softmax_backward"})


def kernel_rate_share(kernel: str, eff) -> float:
    """Share of the element-wise rate one composite kernel reaches: the stack's ``softmax_rate_share`` for
    the softmax and its backward (SOFTMAX_KERNELS), 1 for the others. PyTorch before 1.2 ran
    torch.nn.Softmax(dim=-1) over rows of <= 1024 elements with its block-per-row kernel; the persistent
    kernel that replaced it (pytorch/pytorch pull 20827, NVIDIA, May 2019) is "2-10x faster ... speedup is
    higher for smaller sizes" on half tensors of [16384, n], n <= 1024, "similar uplifts ... for the backward
    pass": at n = 1024, the low end, half the rate."""
    return eff.softmax_rate_share if kernel in SOFTMAX_KERNELS else 1.0


def composite_times_s(op: Op, acc: AcceleratorSpec, dtype: str) -> tuple[float, float] | None:
    """(forward, backward) of an op the stack runs as a composite of eager kernels (graph.eager_modules, by
    the profile's module_impl; None: not one): Σ over its kernels of max(bytes · n / (rate · share), floor) for
    each of its tensors, n the op's elements per tensor, rate ``elementwise_rate`` at the op's shape, share
    ``kernel_rate_share`` (the stack's softmax kernel), floor the
    copies' launch floor; its kernels are graph.eager_modules.composite_run's list, the one the host counts,
    with autocast's casts around a composite whose input is wider than the activations (a norm's fp32 output
    cast for the next GEMM and that cast's backward, 6 B per element each way, as the fused fp32 norm)."""
    family, rows, width = op.kernel
    eff = acc.efficiency
    if family not in FAMILY_ROLE or not eff.module_impl:
        return None
    act = ACTIVATION_BYTES[dtype]
    autocast = autocast_runs(eff.autocast_casts, act)
    widths = composite_widths(family, eff.module_impl, eff.eager_kernels, act, autocast)
    found = composite_run(family, eff.module_impl, *widths)
    if found is None:
        return None
    rate, floor = elementwise_rate(acc, rows, width), copy_floor_s(acc)
    n = rows * width / found[0].tensors

    def run(kernels) -> float:
        return found[0].tensors * sum(
            max(k.bytes * n / (rate * kernel_rate_share(k.op, eff)), floor) for k in kernels
        )

    return run(found[1]), run(found[2])


def _sum_s(acc, names, shape, scale: float, floor: float) -> float | None:
    times = [_kernel_s(acc, n, *shape) for n in names]
    if any(t is None for t in times):
        return None
    return sum(max(scale * t, floor) for t in times)


def eager_kernel_times_s(op: Op, acc: AcceleratorSpec, dtype: str) -> tuple[float, float] | None:
    """(forward, backward) of ``op`` from the measured kernels of its family (module docstring), or None
    where the op, the table or the profile leave it to cost.compute.memory_time_s."""
    if op.kernel is None:
        return None
    if op.kernel[0] == "fp8_cast":
        return quantisation_times_s(op, acc, dtype)
    mixed = composite_times_s(op, acc, dtype)
    if mixed is not None or not acc.kernel_tables:
        return mixed
    family, rows, width = op.kernel
    precision = acc.efficiency.eager_kernels.get(ROLE.get(family, ""))
    if precision is None or not kt.load_table(acc.kernel_tables, acc.l2_cache).kernels:
        return None
    act = ACTIVATION_BYTES[dtype]
    run_bytes = max(PRECISION_BYTES[precision], act)
    shape, floor = (rows, width), copy_floor_s(acc)
    if family == "cross_entropy":
        p = "fp32" if run_bytes == 4 else "bf16"
        total = _kernel_s(acc, f"cross_entropy_{p}_fwd_bwd", rows, width)
        if total is None:
            return None
        # timed on leaf bf16 logits: less their gradient's accumulation (cost.leaf_grads)
        total = max(total - accumulation_bytes(rows * width) / acc.hbm_rate(), 0.0)
        share = op.fwd_bytes / (op.fwd_bytes + op.bwd_bytes)
        return max(share * total, floor), max((1.0 - share) * total, floor)
    if family not in RECIPES:
        return None
    fwd_kernels, bwd = RECIPES[family]
    wider = autocast_runs(acc.efficiency.autocast_casts, act) and run_bytes > act
    casts = activation_casts(ROLE[family], wider)  # cost.autocast (module docstring)
    cast_fwd, cast_bwd = (CAST,) * casts[0], (CAST,) * casts[1]
    scale = run_bytes / MEASURED_BYTES
    if isinstance(bwd[-1], bool):
        measured = _backward_s(acc, bwd, rows, width)
        bwd_s = None if measured is None else max(scale * measured, floor)
    else:
        bwd_s = _sum_s(acc, bwd, shape, scale, floor)
    parts = (
        _sum_s(acc, fwd_kernels, shape, scale, floor),
        bwd_s,
        _sum_s(acc, cast_fwd, shape, 1.0, floor),
        _sum_s(acc, cast_bwd, shape, 1.0, floor),
    )
    if None in parts:
        return None
    return parts[0] + parts[2], parts[1] + parts[3]
