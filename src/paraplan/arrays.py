"""Structures of arrays: the search's facts are the estimator's dataclasses with numpy arrays as leaves.

``stack`` gathers many same-shaped dataclasses / dicts / numbers into one whose leaves are arrays;
``take`` selects candidates from such a structure. Used by search/table.py on stages.RowFacts.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from functools import lru_cache
from operator import attrgetter

import numpy as np


@lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def stack(items: list, index: np.ndarray):
    """Dataclasses / dicts / numbers of the same shape → one of the same shape whose leaves are
    arrays, entry i taken from items[index[i]] (a leaf equal in every item stays a number)."""
    first = items[0]
    if is_dataclass(first):
        names = _field_names(type(first))
        values = [getattr(first, n) for n in names]
        numeric = [isinstance(v, (int, float)) and not isinstance(v, bool) for v in values]
        out = {}
        if any(numeric):  # all numeric leaves at once: one (items × leaves) matrix
            columns = [n for n, is_number in zip(names, numeric) if is_number]
            get = attrgetter(*columns)
            matrix = np.array([get(i) for i in items], dtype=float).reshape(len(items), len(columns))
            uniform = (matrix == matrix[0]).all(axis=0)
            for j, n in enumerate(columns):
                out[n] = getattr(first, n) if uniform[j] else matrix[index, j]
        for n, is_number in zip(names, numeric):
            if not is_number:
                out[n] = stack([getattr(i, n) for i in items], index)
        return type(first)(**out)
    if isinstance(first, dict):
        return {k: stack([i[k] for i in items], index) for k in first}
    if isinstance(first, str) or all(i == first for i in items):
        return first
    if isinstance(first, tuple) and len({len(i) for i in items}) > 1:  # number lists of different lengths: 0-padded
        width = max(len(i) for i in items)
        items = [tuple(i) + (0.0,) * (width - len(i)) for i in items]
    return np.asarray(items, dtype=float)[index]


def take(value, index: np.ndarray):
    """The candidates ``index`` of a structure of arrays (scalars and strings pass through)."""
    if isinstance(value, np.ndarray):
        return value[index] if value.ndim else value
    if is_dataclass(value):
        return type(value)(**{n: take(getattr(value, n), index) for n in _field_names(type(value))})
    if isinstance(value, dict):
        return {k: take(v, index) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(take(v, index) for v in value)
    return value
