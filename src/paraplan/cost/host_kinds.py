"""An eager op's host time priced call by call, by kind (docs/model.md §11, "Host time by call kind").

Where an eager profile states ``host_dispatch_s`` (measured host seconds per call of each kind), an op's host time
is the sum of its calls and autograd nodes rather than its kernel count times one per-kernel figure:

    H_fwd = c · (Σ_forward calls d_kind + ½ · v · t_view)
    H_bwd = c · (Σ_backward calls (d_kind − t_parse) + n · (d_node + t_parse) + ½ · v · t_view)

d_kind the hot-loop host time of one eager call of that kind (benchmarks/gpu/host_fp8.py ``dispatch_<op>``: a
GEMM's F.linear, F.layer_norm, F.scaled_dot_product_attention, F.gelu, and an element-wise op as ``a * 2.0``);
a kernel a library launches from inside a call (a norm backward's gain/bias kernel and zero fill, FlashAttention's
backward pre- and post-processing, the embedding's sort-based backward) CXX_LAUNCH_S; t_parse the Python argument
parsing that a backward call, made from C++ by the autograd engine, does without (PYTHON_ARG_PARSE_S); n the op's
forward calls, each of which records an autograd node that backward runs, d_node what such a node costs beyond
its two calls (``autograd_node`` less two ``dispatch_mul``); v the op's zero-kernel view calls
(cost.host.eager_views) at host_view_s, their nodes included; c the profile's ``host_context_factor``, the
measured host time of a whole eager layer over the sum of its calls' hot-loop figures (module calls, autocast's
wrapper, the caching allocator and the Python between calls, which a hot loop of one call does not see).
"""

from __future__ import annotations

from paraplan.cost.eager_kernels import ROLE
from paraplan.graph.ops import Op
from paraplan.specs.system import EfficiencySpec

# Host seconds of one kernel launched from C++ (no Python, no dispatcher): back-to-back launches of a 2.9 us kernel
# ran at 3.8 us per kernel (NVIDIA, "Getting Started with CUDA Graphs", A. Gray, 2019), an upper bound of the
# launch itself. Transformer Engine's grouped GEMM issues its per-expert cuBLAS GEMMs this way, from one Python
# call (general_grouped_gemm, transformer_engine/pytorch/cpp_extensions/gemm.py).
CXX_LAUNCH_S = 3.8e-6
LAUNCH = "launch"  # a kernel launched from inside another call (CXX_LAUNCH_S)
# Python's argument parsing of one eager call, which a call the autograd engine makes from C++ in backward does not
# pay: about half of a 2 us x * x, "the same operation called using C++ API would take about a microsecond"
# (N. Gimelshein, pytorch/pytorch#41383). The host table's calls are Python calls; its autograd_node row (a Python
# multiply forward, its node and the node's C++ multiply backward) then holds this much more node than
# autograd_node - 2 x dispatch_mul.
PYTHON_ARG_PARSE_S = 1.0e-6

NORM_FAMILIES = frozenset({"layernorm", "rmsnorm"})
# kernels one norm backward call launches (aten native_layer_norm_backward / _fused_rms_norm_backward): the input
# gradient, then the gain (and bias) gradient kernel (aten/src/ATen/native/cuda/layer_norm_kernel.cu)
NORM_BACKWARD_LAUNCHES = 1
# (forward, backward) kernels of an eager op that one of its calls launches from inside itself: the embedding's
# backward is one embedding_dense_backward call whose sort-based kernels (index sort, segment offsets, partial
# sums, gradient write) and zero fill it launches (aten/src/ATen/native/cuda/Embedding.cu, EmbeddingBackwardKernel.cu:
# cost.host.EAGER_KERNELS counts six); fp32 cross-entropy's backward runs nll_loss_backward, one call that zero
# fills the gradient and scatters into it (aten/src/ATen/native/cuda/Loss.cu)
CALL_LAUNCHES: dict[str, tuple[int, int]] = {
    "embedding_lookup": (0, 5),
    "mtp_embedding_lookup": (0, 5),
    "cross_entropy": (0, 1),
}
# FlashAttention-2's backward beyond its main loop: the dO·O pre-processing and the dQ conversion, launched from
# the one backward call (csrc/flash_attn/src/flash_bwd_launch_template.h)
ATTENTION_BACKWARD_LAUNCHES = 2


def _kinds(main: str, total: int, launches: int = 0) -> tuple[str, ...]:
    """One call of ``main``, ``launches`` kernels it launches itself, and the rest of ``total`` as element-wise
    calls (autocast's casts, bias-gradient reductions, the reshapes and concatenations around attention)."""
    if total <= 0:
        return ()
    launches = min(launches, total - 1)
    return (main,) + (LAUNCH,) * launches + ("elementwise",) * (total - 1 - launches)


def call_kinds(
    op: Op, counts: tuple[int, int], composite: bool = False, zero_fill: int = 0
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(forward, backward) kinds of the ``counts`` = (forward, backward) kernels cost.host.op_kernels counts for an
    eager ``op``: a GEMM one linear call forward and two backward (data and weight gradient), its casts and bias
    reduction element-wise; attention one sdpa call each way, its backward's ATTENTION_BACKWARD_LAUNCHES launched
    from it; a norm one layer_norm call each way, its backward's NORM_BACKWARD_LAUNCHES and ``zero_fill`` launched
    from it; an activation (cost.eager_kernels.ROLE) one activation call each way; a composite's pieces
    (``composite``) element-wise calls, as every other op's kernels but those CALL_LAUNCHES launches from
    inside one of them."""
    fwd, bwd = counts
    family = op.kernel[0] if op.kernel is not None else None
    if op.kind == "gemm":
        return _kinds("linear", fwd), ("linear",) * min(bwd, 2) + ("elementwise",) * max(bwd - 2, 0)
    if op.kind == "attention":
        return _kinds("sdpa", fwd), _kinds("sdpa", bwd, ATTENTION_BACKWARD_LAUNCHES)
    if composite:
        return _kinds("elementwise", fwd), _kinds("elementwise", bwd)
    if family in NORM_FAMILIES:
        return _kinds("layer_norm", fwd), _kinds(
            "layer_norm", bwd, NORM_BACKWARD_LAUNCHES + zero_fill
        )
    if ROLE.get(family) == "activation":
        return _kinds("activation", fwd), _kinds("activation", bwd)
    inside = CALL_LAUNCHES.get(op.name, (0, 0))
    return _kinds("elementwise", fwd, inside[0]), _kinds("elementwise", bwd, inside[1])


def calls_s(kinds: tuple[str, ...], dispatch: dict[str, float], python: bool = True) -> float:
    """Hot-loop host seconds of ``kinds``: Σ d_kind, less PYTHON_ARG_PARSE_S each (never below 0) for calls made
    from C++ (not ``python``: the autograd engine's, in backward); a LAUNCH at CXX_LAUNCH_S."""
    parse = 0.0 if python else PYTHON_ARG_PARSE_S
    return sum(CXX_LAUNCH_S if k == LAUNCH else max(dispatch[k] - parse, 0.0) for k in kinds)


def autograd_nodes(forward: tuple[str, ...], backward: tuple[str, ...]) -> int:
    """Autograd nodes an op's forward records and its backward runs: one per forward call (not a kernel launched
    from inside one), none when the op has no backward (a view's node is inside host_view_s)."""
    if not backward:
        return 0
    return sum(kind != LAUNCH for kind in forward)


def kind_host_s(
    op: Op,
    eff: EfficiencySpec,
    counts: tuple[int, int],
    views: int = 0,
    composite: bool = False,
    zero_fill: int = 0,
) -> tuple[float, float]:
    """(forward, backward) host seconds of an eager ``op`` called outside a CUDA graph (module docstring):
    c · (Σ forward d_kind + ½ v·t_view), c · (Σ backward (d_kind − t_parse) + n·(d_node + t_parse) + ½ v·t_view),
    divided by the host's relative speed (host_speed). ``counts``: its kernels (cost.host.op_kernels),
    ``views`` its zero-kernel calls (cost.host.eager_views), ``composite``: a composite module's pieces,
    ``zero_fill``: kernels a norm backward launches to zero its gradients (cost.host.LAYERNORM_ZERO_FILL)."""
    dispatch = eff.host_dispatch_s
    forward, backward = call_kinds(op, counts, composite, zero_fill)
    nodes = autograd_nodes(forward, backward)
    view = 0.5 * views * eff.host_view_s
    scale = eff.host_context_factor / eff.host_speed
    fwd = calls_s(forward, dispatch) + view
    node = dispatch["autograd_node"] + PYTHON_ARG_PARSE_S
    bwd = calls_s(backward, dispatch, python=False) + nodes * node + view
    return scale * fwd, scale * bwd
