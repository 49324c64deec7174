"""cost.elementwise: the scalar path returns numpy's value bit for bit (ties of signed zeros, NaN, inf)."""

from __future__ import annotations

import itertools
import math
import struct

import numpy as np
import pytest

from paraplan.cost import elementwise as ew

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-300, -1e-300, 1e300, math.inf, -math.inf]
SPECIAL += [math.nan, 3, 0, -2, True, False]


def _bits(x) -> bytes:
    return struct.pack("<d", float(x))


def _same(got, want) -> bool:
    want = np.asarray(want)
    assert not isinstance(got, np.ndarray), "the scalar path returns a scalar"
    if want.dtype.kind == "f" or isinstance(got, float):
        return _bits(got) == _bits(want) or (math.isnan(float(got)) and np.isnan(want))
    return got == want.item()


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_and_minimum_pick_numpys_operand(name):
    ours, theirs = getattr(ew, name), getattr(np, name)
    for a, b in itertools.product(SPECIAL, repeat=2):
        assert _same(ours(a, b), theirs(a, b)), (name, a, b, ours(a, b), theirs(a, b))


def test_where_on_scalars():
    for c, x, y in itertools.product([True, False, 0, 1, 0.0, 2.0], [1.5, -0.0], [0.0, 7]):
        assert _same(ew.where(c, x, y), np.where(c, x, y))


def test_ceil_keeps_the_sign_of_zero():
    rng = np.random.default_rng(0)
    values = [*SPECIAL[:-6], -0.9, -0.1, 0.1, 4.0, 4.000001, *rng.normal(0, 1e6, 200)]
    for x in values:
        if math.isfinite(x):
            assert _same(ew.ceil(x), np.ceil(x)), x


def test_random_scalars_match_numpy():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=2000), rng.normal(size=2000)
    b[::7] = a[::7]  # ties
    for x, y in zip(a.tolist(), b.tolist()):
        assert _same(ew.maximum(x, y), np.maximum(x, y))
        assert _same(ew.minimum(x, y), np.minimum(x, y))


def test_arrays_go_to_numpy():
    a = np.array([1.0, -0.0, math.nan])
    np.testing.assert_array_equal(ew.maximum(a, 0.0), np.maximum(a, 0.0))
    np.testing.assert_array_equal(ew.minimum(0.0, a), np.minimum(0.0, a))
    np.testing.assert_array_equal(ew.where(a > 0, a, 2.0), np.where(a > 0, a, 2.0))
    np.testing.assert_array_equal(ew.where(True, a, 2.0), np.where(True, a, 2.0))
    np.testing.assert_array_equal(ew.ceil(a), np.ceil(a))
    assert ew.any_positive(a) and not ew.any_positive(np.zeros(3)) and ew.any_positive(2.0)
    assert ew.any_true(a > 0) and not ew.any_true(False)


def test_where_all_is_x_itself_where_every_condition_holds():
    x = np.array([[1.0, -0.0], [np.nan, 2.0]])
    assert ew.where_all(np.array([True, True]), x, -np.inf) is x  # no copy, no broadcast
    assert ew.where_all(True, 3.0, 0.0) == 3.0 and ew.where_all(False, 3.0, 0.0) == 0.0
    got = ew.where_all(np.array([True, False]), x, -np.inf)  # else numpy's where
    assert np.array_equal(got, [[1.0, -np.inf], [np.nan, -np.inf]], equal_nan=True)
    # the same values as where's, as they broadcast against the condition's shape
    cond = np.ones((2, 1, 2), dtype=bool)
    assert np.array_equal(
        np.broadcast_to(ew.where_all(cond, x, 0.0), (2, 2, 2)),
        np.where(cond, x, 0.0),
        equal_nan=True,
    )
