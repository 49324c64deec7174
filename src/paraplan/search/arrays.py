"""Structures of arrays: the search's facts are the estimator's records (dataclasses and NamedTuples) with numpy arrays
as leaves.

``stack`` gathers many same-shaped records / dicts / numbers into one whose leaves are arrays;
``take`` selects candidates from such a structure. Used by search/table.py on step.build.RowFacts.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from functools import lru_cache
from itertools import chain
from operator import attrgetter

import numpy as np


@lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    """The fields of a record class: a dataclass's, or a NamedTuple's."""
    return cls._fields if issubclass(cls, tuple) else tuple(f.name for f in fields(cls))


def _is_record(value) -> bool:
    """A dataclass instance or a NamedTuple (a tuple with named fields): stacked and taken field by field."""
    return is_dataclass(value) or (isinstance(value, tuple) and hasattr(type(value), "_fields"))


@lru_cache(maxsize=None)
def _leaf_split(
    cls: type, types: tuple[type, ...]
) -> tuple[tuple[str, ...], attrgetter | None, tuple[str, ...]]:
    """(numeric field names, a getter of them, the other field names) of a dataclass whose fields hold values of
    these types: ints and floats are numeric, bools are not."""
    names = _field_names(cls)
    numeric = [issubclass(t, (int, float)) and not issubclass(t, bool) for t in types]
    columns = tuple(n for n, is_number in zip(names, numeric) if is_number)
    return (
        columns,
        (attrgetter(*columns) if columns else None),
        tuple(n for n, is_number in zip(names, numeric) if not is_number),
    )


def stack(items: list, index: np.ndarray):
    """Dataclasses / dicts / numbers of the same shape → one of the same shape whose leaves are
    arrays, entry i taken from items[index[i]] (a leaf equal in every item stays a number)."""
    first = items[0]
    if _is_record(first):
        cls = type(first)
        columns, get, others = _leaf_split(
            cls,
            tuple(map(type, first))
            if isinstance(first, tuple)
            else tuple(type(getattr(first, n)) for n in _field_names(cls)),
        )
        out = {}
        if columns:  # all numeric leaves at once: one (items × leaves) matrix
            matrix = _number_matrix(items, get, len(columns), isinstance(first, tuple))
            uniform = (matrix == matrix[0]).all(axis=0)
            # the varying leaves taken at once, each a contiguous row of one (varying × index) matrix
            varying = matrix[:, ~uniform].T.copy()[:, index]
            row = 0
            for j, n in enumerate(columns):
                if uniform[j]:
                    out[n] = getattr(first, n)
                else:
                    out[n] = varying[row]
                    row += 1
        for n in others:
            out[n] = stack([getattr(i, n) for i in items], index)
        return cls(**out)
    if isinstance(first, dict):
        return {k: stack([i[k] for i in items], index) for k in first}
    if isinstance(first, str) or all(i == first for i in items):
        return first
    if (
        isinstance(first, tuple) and len({len(i) for i in items}) > 1
    ):  # number lists of different lengths: 0-padded
        width = max(len(i) for i in items)
        items = [tuple(i) + (0.0,) * (width - len(i)) for i in items]
    return np.asarray(items, dtype=float)[index]


def _number_matrix(items: list, get, width: int, is_tuple: bool) -> np.ndarray:
    """The (items × ``width``) float matrix of the items' numeric leaves (``get`` of each; the item itself where
    it is a NamedTuple of numbers alone), filled from one flat iterator (np.fromiter): the values of
    ``np.array(rows, dtype=float)``, each number converted alike, without numpy walking every record as a
    sequence (~1.8x faster on the search's BlockCompute / BlockComm records)."""
    if is_tuple and width == len(items[0]):  # a NamedTuple of numbers: its own fields
        flat = chain.from_iterable(items)
    elif width == 1:  # attrgetter of one name gives the number itself
        flat = map(get, items)
    else:
        flat = chain.from_iterable(map(get, items))
    return np.fromiter(flat, dtype=float, count=len(items) * width).reshape(len(items), width)


def take(value, index: np.ndarray):
    """The candidates ``index`` of a structure of arrays (scalars and strings pass through). A NamedTuple is rebuilt
    with ``_make`` (its fields in order: no keyword call), the class tested before ``is_dataclass``: ~250 leaves a
    call in the search's ``RowTable.inputs``."""
    cls = value.__class__
    if cls is np.ndarray:
        return value[index] if value.ndim else value
    if cls in _PASSED:
        return value
    if isinstance(value, tuple):
        if hasattr(cls, "_fields"):  # a NamedTuple
            return cls._make([take(v, index) for v in value])
        return tuple(take(v, index) for v in value)
    if isinstance(value, dict):
        return {k: take(v, index) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value[index] if value.ndim else value
    if is_dataclass(value):
        return cls(**{n: take(getattr(value, n), index) for n in _field_names(cls)})
    return value


_PASSED = frozenset((float, int, bool, str, type(None)))  # leaves ``take`` returns as they are


def allocate(template, size: int, widths: dict[str, int] | None = None):
    """A structure like ``template`` (a record / dict of records as ``stack`` gives) whose numeric leaves are zeroed
    arrays of ``size`` entries (``put`` fills them): a number lists leaf (a tuple, or an array of them) gets
    ``widths[field name]`` columns; strings stay."""
    if _is_record(template):
        out = {}
        for n in _field_names(type(template)):
            leaf = getattr(template, n)
            if isinstance(leaf, str):
                out[n] = leaf
            elif _is_record(leaf):
                out[n] = allocate(leaf, size, widths)
            elif isinstance(leaf, tuple) or np.ndim(leaf) > 1:
                out[n] = np.zeros((size, (widths or {})[n]))
            else:
                out[n] = np.zeros(size)
        return type(template)(**out)
    if isinstance(template, dict):
        return {k: allocate(v, size, widths) for k, v in template.items()}
    raise TypeError(f"cannot allocate for {type(template).__name__}")


def put(store, index: np.ndarray, value) -> None:
    """Entries ``index`` of the arrays of ``store`` (``allocate``) set to ``value``, a structure of the same shape
    whose leaves are arrays over ``index`` or one value for all of them; strings must agree."""
    if _is_record(store):
        for n in _field_names(type(store)):
            target, given = getattr(store, n), getattr(value, n)
            if isinstance(target, np.ndarray):
                target[index] = given
            elif isinstance(target, str):
                assert target == given, (n, target, given)
            else:
                put(target, index, given)
        return
    for k, v in store.items():
        put(v, index, value[k])


def at_rows(value, rows: np.ndarray):
    """value[rows] of a per-row array; a number as it is."""
    return value[rows] if np.ndim(value) else value


def missing(units: np.ndarray, done: np.ndarray) -> np.ndarray:
    """The distinct units among ``units`` not ``done`` yet, in increasing order (no np.unique: it imports
    numpy.ma, ~7 ms of a search's start)."""
    wanted = np.zeros(len(done), dtype=bool)
    wanted[units] = True
    return np.flatnonzero(wanted & ~done)


def padded(facts, width: int):
    """A step.build.BlockCostFacts with its small-tensor list padded with zeros to ``width`` entries (``stack``'s
    padding)."""
    small = tuple(facts.small_numels)
    if len(small) == width:
        return facts
    return facts._replace(small_numels=small + (0.0,) * (width - len(small)))
