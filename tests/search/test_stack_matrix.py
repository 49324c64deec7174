"""search.arrays.stack fills its numeric leaves from one flat iterator (_number_matrix): the same bits as
``np.array(rows, dtype=float)``, for a NamedTuple of numbers, a record with one numeric leaf and one with several."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from paraplan.search.arrays import _number_matrix, stack


class _Pair(NamedTuple):
    a: float
    b: int


@dataclass(frozen=True)
class _Mixed:
    name: str
    x: float
    y: float


@dataclass(frozen=True)
class _One:
    name: str
    x: float


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def test_number_matrix_is_np_array():
    pairs = [_Pair(0.1, 3), _Pair(-0.0, 2**53 + 1), _Pair(float("nan"), -7)]
    got = _number_matrix(pairs, None, 2, True)
    assert got.shape == (3, 2)
    assert _bits(got) == _bits(np.array(pairs, dtype=float))
    mixed = [_Mixed("m", 1.5, 2.0), _Mixed("m", 1e300, -3.25)]
    get = attrgetter("x", "y")
    assert _bits(_number_matrix(mixed, get, 2, False)) == _bits(
        np.array([(1.5, 2.0), (1e300, -3.25)])
    )
    ones = [_One("o", 4.0), _One("o", 0.5)]
    got = _number_matrix(ones, attrgetter("x"), 1, False)
    assert got.shape == (2, 1) and got[:, 0].tolist() == [4.0, 0.5]


def test_stack_takes_varying_leaves_by_index():
    items = [_Mixed("m", 1.0, 2.0), _Mixed("m", 3.0, 2.0)]
    out = stack(items, np.array([1, 0, 1]))
    assert out.name == "m" and out.y == 2.0  # a leaf equal in every item stays a number
    assert out.x.tolist() == [3.0, 1.0, 3.0]
    pairs = stack([_Pair(1.0, 2), _Pair(1.0, 5)], np.array([0, 1]))
    assert pairs.a == 1.0 and pairs.b.tolist() == [2.0, 5.0]
