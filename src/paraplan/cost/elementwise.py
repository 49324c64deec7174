"""numpy's elementwise maximum, minimum, where and ceil, without numpy when every argument is a scalar.

The cost and step formulas are written once for floats (one plan: ``estimate``) and numpy arrays (one
element per candidate: the search). A numpy ufunc on two Python floats costs ~1-3 µs of dispatch, a
Python comparison ~50 ns; an estimate makes hundreds of such calls. These functions take the Python
path when no argument is an ``np.ndarray`` and call numpy otherwise, so each formula stays one
implementation. The scalar path returns exactly what numpy's scalar loop returns, bit for bit: IEEE
comparisons and the same operand on ties and NaNs (``np.maximum(0.0, -0.0)`` is ``-0.0``: the second
operand unless the first is larger or NaN). What differs is the type: a Python scalar, not
``np.float64`` (tests/unit/test_elementwise.py checks both against numpy).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Num = Any  # float or numpy array, broadcastable

_ARRAY = np.ndarray


def maximum(a: Num, b: Num) -> Num:
    """np.maximum(a, b); for scalars ``a if a > b or a is NaN else b`` (numpy's choice of operand)."""
    if a.__class__ is _ARRAY or b.__class__ is _ARRAY:
        return np.maximum(a, b)
    return a if a > b or a != a else b


def minimum(a: Num, b: Num) -> Num:
    """np.minimum(a, b); for scalars ``a if a < b or a is NaN else b`` (numpy's choice of operand)."""
    if a.__class__ is _ARRAY or b.__class__ is _ARRAY:
        return np.minimum(a, b)
    return a if a < b or a != a else b


def where(condition: Num, x: Num, y: Num) -> Num:
    """np.where(condition, x, y); for scalars ``x if condition else y``."""
    if condition.__class__ is _ARRAY or x.__class__ is _ARRAY or y.__class__ is _ARRAY:
        return np.where(condition, x, y)
    return x if condition else y


def where_all(condition: Num, x: Num, y: Num) -> Num:
    """where(condition, x, y), or ``x`` itself where every element of ``condition`` holds (no copy; its own shape,
    which broadcasts to the same values): the search's stage entries are mostly present in every candidate."""
    if condition is True or (condition.__class__ is _ARRAY and condition.all()):
        return x
    return where(condition, x, y)


def ceil(x: Num) -> Num:
    """np.ceil(x); for a finite scalar ``float(math.ceil(x))``, -0.0 where numpy's is (x in (-1, 0])."""
    if x.__class__ is _ARRAY or not math.isfinite(x):
        return np.ceil(x)
    out = float(math.ceil(x))
    return math.copysign(out, x) if out == 0.0 else out


def any_positive(x: Num) -> bool:
    """Whether any element of ``x`` is > 0 (``np.any(np.asarray(x) > 0)``)."""
    if x.__class__ is _ARRAY:
        return bool(np.any(x > 0))
    return bool(x > 0)


def is_array(x: Num) -> bool:
    """Whether ``x`` is a numpy array (the search's candidates) rather than one plan's scalar."""
    return x.__class__ is _ARRAY


def scalar_zero(x: Num) -> bool:
    """Whether ``x`` is one plan's 0 or False (not an array): where it selects or weights a term, the term
    need not be computed (``where(False, t, y)`` is ``y``; 0 × a finite, non-negative term is +0.0)."""
    return x.__class__ is not _ARRAY and x == 0


def any_true(x: Num) -> bool:
    """Whether any element of ``x`` is true (``np.any(x)``)."""
    if x.__class__ is _ARRAY:
        return bool(np.any(x))
    return bool(x)


def logical_and(a: Num, b: Num) -> Num:
    """np.logical_and(a, b); for scalars ``bool(a) and bool(b)``."""
    if a.__class__ is _ARRAY or b.__class__ is _ARRAY:
        return np.logical_and(a, b)
    return bool(a) and bool(b)
