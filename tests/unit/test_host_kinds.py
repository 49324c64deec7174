"""Eager host time by call kind (cost/host_kinds.py): the kinds of each op's calls, the seconds of an op against
hand-computed values, the profile's figures against the measured host table, the context factor recomputed from
the measured MLP stack, the tiny GPT layer against the measured per-layer growth of host-bound steps (a check, not
a fit), and the property that a slower call never makes a step faster."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from tests.unit.test_host import MLP_LAYER  # the ops of the residual MLP stack's layer

from paraplan import api
from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost import host as H
from paraplan.cost import host_kinds as K
from paraplan.cost.frameworks import framework_system
from paraplan.graph.ops import Op
from paraplan.graph.transformer import LayerShape, decoder_layer_1d

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks/gpu/measured"
KINDS = ("linear", "layer_norm", "sdpa", "activation", "elementwise", "autograd_node")

GEMM = Op("attention_projection", "gemm", 1.0, 0.0, 2.0, 0.0, (1, 8, 8, 8))
ATTN = Op("flash_attention", "attention", 1.0, 0.0, 2.0, 0.0)
NORM = Op("input_norm", "memory", 1.0, 1.0, 2.0, 2.0, kernel=("layernorm", 1024, 4096))
GELU = Op("mlp_activation", "memory", 1.0, 1.0, 2.0, 2.0, kernel=("gelu", 1024, 4096))
ADD = Op("mlp_residual", "memory", 1.0, 1.0, 2.0, 2.0, kernel=("add", 1024, 4096))

# round figures, so each expected value below is worked by hand: d_kind and d_node in us
TABLE_US = {
    "linear": 20,
    "layer_norm": 16,
    "sdpa": 30,
    "activation": 8,
    "elementwise": 10,
    "autograd_node": 6,
}


def _eff(factor=2.0, speed=1.0, view_us=11.0, **dispatch_us):
    eff = framework_system(load_framework("pytorch-eager"), load_system("dgx-h100-80gb"))
    table = {k: v * 1e-6 for k, v in {**TABLE_US, **dispatch_us}.items()}
    update = {"host_dispatch_s": table, "host_context_factor": factor, "host_speed": speed}
    return eff.accelerator.efficiency.model_copy(update={**update, "host_view_s": view_us * 1e-6})


def test_call_kinds():
    E, L = "elementwise", K.LAUNCH
    # a biased GEMM under autocast (3, 5): the linear call and two casts; dgrad, wgrad, two casts back, bias sum
    assert K.call_kinds(GEMM, (3, 5)) == (("linear", E, E), ("linear", "linear", E, E, E))
    # eager attention (2, 4): SDPA and the output's layout copy; SDPA backward, its two launches, the q/k/v cat
    assert K.call_kinds(ATTN, (2, 4)) == (("sdpa", E), ("sdpa", L, L, E))
    # an autocast LayerNorm (2, 4): the norm and its output cast; backward the norm's call, the gain/bias kernel
    # and the zero fill it launches, and the cast back
    assert K.call_kinds(NORM, (2, 4), zero_fill=1) == (("layer_norm", E), ("layer_norm", L, L, E))
    assert K.call_kinds(GELU, (1, 1)) == (("activation",), ("activation",))
    assert K.call_kinds(ADD, (1, 2)) == ((E,), (E, E))
    # the embedding's backward is one call launching its sort-based kernels and zero fill; cross-entropy's
    # nll_loss_backward zero fills and scatters from one call
    embedding = Op("embedding_lookup", "memory", 0.0, 1.0, 0.0, 2.0)
    assert K.call_kinds(embedding, (1, 6)) == ((E,), (E, L, L, L, L, L))
    loss = Op("cross_entropy", "memory", 1.0, 1.0, 2.0, 2.0, kernel=("cross_entropy", 1024, 8192))
    assert K.call_kinds(loss, (3, 4)) == ((E, E, E), (E, L, E, E))
    # a composite module's pieces are element-wise calls, whatever the family
    assert K.call_kinds(NORM, (3, 6), composite=True) == ((E,) * 3, (E,) * 6)
    assert K.call_kinds(GEMM, (0, 0)) == ((), ())
    assert K.autograd_nodes(("layer_norm", E), ("layer_norm", L, L, E)) == 2
    assert K.autograd_nodes((E,), ()) == 0  # no backward, no node


def test_kind_host_seconds_by_hand():
    eff = _eff()
    # backward calls come from C++ (1 us less each, PYTHON_ARG_PARSE_S), a node 1 us more than the table's 6
    # GEMM (3, 5): 2 x (20 + 2 x 10) = 80 us forward; 2 x (2 x 19 + 3 x 9 + 3 nodes x 7) = 172 us backward
    assert K.kind_host_s(GEMM, eff, (3, 5)) == pytest.approx((80e-6, 172e-6))
    # attention (2, 4) with 5 views at 11 us: 2 x (30 + 10 + 27.5) = 135 us; 2 x (29 + 2 x 3.8 + 9 + 2 x 7
    # + 27.5) = 174.2 us
    assert K.kind_host_s(ATTN, eff, (2, 4), views=5) == pytest.approx((135e-6, 174.2e-6))
    # LayerNorm (2, 4), zero fill 1: 2 x (16 + 10) = 52 us; 2 x (15 + 2 x 3.8 + 9 + 2 x 7) = 91.2 us
    assert K.kind_host_s(NORM, eff, (2, 4), zero_fill=1) == pytest.approx((52e-6, 91.2e-6))
    # a host at half the speed takes twice as long
    assert K.kind_host_s(GELU, _eff(speed=0.5), (1, 1)) == pytest.approx((32e-6, 56e-6))


def test_op_host_uses_the_kinds_only_outside_a_graph():
    eff = _eff()
    assert H.op_host_s(GELU, eff, False) == pytest.approx((16e-6, 28e-6))
    graphed = eff.model_copy(update={"cuda_graph_scope": "full_iteration"})
    per_kernel = eff.graph_kernel_s / eff.host_speed
    assert H.op_host_s(GELU, graphed, False) == pytest.approx((per_kernel, per_kernel))
    unpriced = eff.model_copy(update={"host_launch_s": 0.0})
    assert H.op_host_s(GELU, unpriced, False) == (0.0, 0.0)


def _host_csv(run: str) -> dict[str, float]:
    rows = csv.DictReader((MEASURED / run / "host/host.csv").open())
    return {r["what"]: float(r["value_us"]) for r in rows}


@pytest.mark.parametrize("name", ["pytorch-eager", "pytorch-eager-bf16", "hf-transformers"])
def test_profile_figures_are_the_measured_host_table(name):
    """host_dispatch_s is h100-2026-11-27c's host.csv (the host of the MLP stack that gives the context factor):
    each call kind its dispatch row, autograd_node the node's row less its two mul calls."""
    row = _host_csv("h100-2026-11-27c")
    expected = {
        "linear": row["dispatch_linear"],
        "layer_norm": row["dispatch_layer_norm"],
        "sdpa": row["dispatch_sdpa"],
        "activation": row["dispatch_gelu"],
        "elementwise": row["dispatch_mul"],
        "autograd_node": row["autograd_node"] - 2 * row["dispatch_mul"],
    }
    table = load_framework(name).host_dispatch_s
    assert set(table) == set(KINDS)
    for kind, us in expected.items():
        assert table[kind] == pytest.approx(us * 1e-6, abs=0.01e-6)


def _tiny_layer_ops(layers=2):
    model = load_model("gpt3-125m").model_copy(
        update={"hidden": 256, "heads": 4, "kv_heads": 4, "ffn_hidden": 1024, "layers": layers}
    )
    return decoder_layer_1d(model, LayerShape(1, 1, 4, 256, False, "flash", "bf16")).ops


def _layer_host_s(eff, names=None) -> tuple[float, float]:
    pairs = [
        H.op_host_s(op, eff, False, (True, True))
        for op in _tiny_layer_ops()
        if names is None or op.name in names
    ]
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def test_the_context_factor_is_the_measured_mlp_stack_over_its_calls():
    """host_context_factor = the residual MLP stack's measured growth per layer (960.7 us eager, 2 to 16 layers,
    h100-2026-11-27c/modules/inductor_host.csv) over the same layer's calls and nodes at host_dispatch_s
    (LayerNorm, two biased Linears with autocast's casts, GeLU, the residual add: 407.6 us)."""
    rows = csv.DictReader((MEASURED / "h100-2026-11-27c/modules/inductor_host.csv").open())
    step = {int(r["layers"]): float(r["step_us"]) for r in rows if r["mode"] == "eager"}
    growth = (step[16] - step[2]) / 14 * 1e-6
    profile = load_framework("pytorch-eager")
    eff = framework_system(profile, load_system("dgx-h100-80gb")).accelerator.efficiency
    calls = sum(_layer_host_s(eff.model_copy(update={"host_context_factor": 1.0}), MLP_LAYER))
    assert calls == pytest.approx(407.6e-6, abs=0.1e-6)
    assert profile.host_context_factor == pytest.approx(growth / calls, abs=5e-4)


def _ls_fit(points: dict[int, float]) -> tuple[float, float]:
    xs, ys = list(points), list(points.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def test_the_tiny_gpt_layer_against_the_measured_growth():
    """A check, not a fit: the host time cost.host prices for one tiny GPT layer (hidden 256, 1,024 tokens, eager
    AMP; 2.25 ms) against the least-squares growth per layer of the host-bound 2/4/8/16-layer steps measured on
    two H100 hosts (h100-2026-11-27b and -27c/host/tiny_steps.json: 2.76 and 2.29 ms a layer): within 20 % of
    each; and its forward share (31.7 %) within the measured forward shares (forward_s over forward_backward_s
    growth, 2 to 8 layers: 31.2 % and 37.7 %)."""
    eff = framework_system(load_framework("pytorch-eager"), load_system("dgx-h100-80gb"))
    forward, backward = _layer_host_s(eff.accelerator.efficiency)
    layer = forward + backward
    shares = []
    for run in ("h100-2026-11-27b", "h100-2026-11-27c"):
        records = json.loads((MEASURED / run / "host/tiny_steps.json").read_text())["records"]
        measured = {r["model"]["layers"]: r["measured"] for r in records}
        slope, _ = _ls_fit({n: m["step_time_s"] for n, m in measured.items()})
        assert abs(layer / slope - 1) < 0.20
        growth = {
            k: (measured[8][k] - measured[2][k]) / 6 for k in ("forward_s", "forward_backward_s")
        }
        shares.append(growth["forward_s"] / growth["forward_backward_s"])
    assert min(shares) <= forward / layer <= max(shares)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("model", ["gpt3-125m", "llama3-8b"])
def test_a_slower_call_never_makes_a_step_faster(kind, model):
    base = load_framework("pytorch-eager").model_dump()
    slower = {**base["host_dispatch_s"], kind: base["host_dispatch_s"][kind] * 1.5}
    args = {"system": "dgx-h100-80gb", "gpus": 1, "micro_batch": 1, "seq_length": 256}
    fast = api.estimate(model, framework=base, **args).step_time_s
    slow = api.estimate(model, framework={**base, "host_dispatch_s": slower}, **args).step_time_s
    assert slow >= fast
    context = api.estimate(model, framework={**base, "host_context_factor": 3.0}, **args)
    assert context.step_time_s >= fast
