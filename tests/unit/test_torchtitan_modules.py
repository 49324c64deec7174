"""torchtitan's eager RMSNorm and complex rotary embedding as composites of eager kernels (graph.eager_modules;
issue 33): the bytes and kernels against a hand count of torchtitan's model code at 9dec370, built at the
activations' own dtype (FSDP2 bf16 parameters, no autocast), priced and counted by the host from the same list,
for the eager torchtitan profile; under torch.compile the rotary only (Inductor falls back on complex dtypes)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost import host as H
from paraplan.cost.eager_kernels import composite_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.graph import eager_modules as em
from paraplan.graph.ops import Op

TITAN = {"norm": "torchtitan-rmsnorm", "rotary": "torchtitan-complex"}


def _bytes(kernels) -> float:
    return sum(k.bytes for k in kernels)


def test_the_rmsnorm_moves_the_bytes_counted_by_hand():
    c = em.rmsnorm_native(2)
    # x.float() 2 + 4, pow 8, mean 4, + eps 0, rsqrt 0, x·r 8, type_as 4 + 2, ·weight (bf16) 2 + 2 = 36
    assert _bytes(c.forward) == 36
    # grad·weight 4, grad·output 6 and its row sum 2, type_as back 6, dy·r 8, dy·x 12 and its sum 4,
    # rsqrt_backward 0 × 3, mean's 4, pow_backward 8 + 8 + 12, the two gradients of x 12, float() back 6 = 92
    assert _bytes(c.backward) == 92
    assert c.kernels == (8, 16)
    assert c.saved == 6
    # in fp32 the two casts go and the weight's passes widen: 8 + 4 + 8 + 8 = 28 forward,
    # 8 + 12 + 4 + 8 + 12 + 4 + 4 + 28 + 12 = 92 backward
    assert _bytes(em.rmsnorm_native(4).forward) == 28
    assert _bytes(em.rmsnorm_native(4).backward) == 8 + 12 + 4 + 8 + 12 + 4 + 4 + 28 + 12


def test_the_complex_rotary_moves_the_bytes_counted_by_hand():
    c = em.rotary_complex(2)
    # per tensor: float() 2 + 4, complex64 product 4 + 4, type_as 4 + 2 = 20, the backward the same three
    assert (_bytes(c.forward), _bytes(c.backward)) == (20, 20)
    assert c.kernels == (6, 6)  # q and k
    assert c.saved == 0


def test_the_torchtitan_composites_run_at_the_activation_width_without_autocast():
    assert em.runs_native("rmsnorm", TITAN) and em.runs_native("rotary", TITAN)
    assert not em.runs_native("rmsnorm", {"norm": "transformers-rmsnorm"})
    assert not em.runs_native("swiglu", TITAN)
    assert em.composite_widths("rmsnorm", TITAN, {}, 2, False) == (2, 2)
    assert em.composite_widths("rmsnorm", {}, {}, 2, False) == (
        4,
        4,
    )  # the transformers composites as before
    assert em.composite("rmsnorm", TITAN, 2, 2) == em.rmsnorm_native(2)
    assert em.composite("rotary", TITAN, 2, 2) == em.rotary_complex(2)
    assert em.composite("qk_rmsnorm", TITAN, 2, 2) is None  # torchtitan's Llama has no q/k norm


def _op(family: str, rows: float, width: float) -> Op:
    kernel = (family, rows, width)  # composites read the kernel's shape only
    return Op("x", "memory", 0.0, 0.0, 0.0, 0.0, kernel=kernel)


def test_the_eager_profile_prices_them_at_the_hbm_rate_and_the_compiled_one_the_rotary_only():
    system = load_system("hgx-h100-96gb-500w")  # no kernels table: the analytical HBM rate
    acc = framework_system(load_framework("torchtitan"), system).accelerator
    rate = 2.41e12 * 0.85
    n = (
        16384 * 4096
    )  # Llama 3 8B's hidden width at 2 x 8192 tokens: every kernel above the launch floor
    fwd, bwd = composite_times_s(_op("rmsnorm", 16384, 4096), acc, "bf16")
    floor = 4e-6  # the per-row kernels (+ eps, rsqrt; rsqrt_backward's three) at the launch floor
    assert fwd == pytest.approx(36 * n / rate + 2 * floor)
    assert bwd == pytest.approx(92 * n / rate + 3 * floor)
    n = 16384 * (4096 + 1024)  # q and k together
    fwd, bwd = composite_times_s(_op("rotary", 16384, 5120), acc, "bf16")
    assert (fwd, bwd) == (pytest.approx(20 * n / rate), pytest.approx(20 * n / rate))
    compiled = framework_system(load_framework("torchtitan-compiled"), system).accelerator
    assert composite_times_s(_op("rmsnorm", 16384, 4096), compiled, "bf16") is None
    # Inductor generates no code for the complex64 product: under torch.compile the rotary's upcast, product
    # and downcast stay three kernels per tensor, the same bytes as eager (torchtitan-compiled's module_impl)
    assert composite_times_s(_op("rotary", 16384, 5120), compiled, "bf16") == (fwd, bwd)


def test_the_host_counts_the_torchtitan_kernels():
    impl = (TITAN, {"norm": "bf16"})
    norm = _op("rmsnorm", 16384, 4096)
    assert H.op_kernels(norm, eager=True, autocast=False, impl=impl) == (8, 16)
    rotary = _op("rotary", 16384, 5120)
    assert H.op_kernels(rotary, eager=True, autocast=False, impl=impl) == (6, 6)
