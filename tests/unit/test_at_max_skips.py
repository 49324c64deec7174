"""step.compose's running max over stage entries skips what no candidate reads (issue 31, search speed): the same
bits as the full where chain it replaced, on ties, NaNs, -inf and entries present for some, all or no candidate."""

from __future__ import annotations

import numpy as np

from paraplan.cost.elementwise import where, where_all
from paraplan.step.compose import _argmax, _at_max


def _reference_at_max(values, present, rows):
    """The former _at_max: every entry's where(present, v, -inf), its better mask and each column's where."""
    best, out = None, None
    for v, p, row in zip(values, present, rows):
        v = where_all(p, v, -np.inf)
        if best is None:
            best, out = v, row
            continue
        better = v > best
        best = where(better, v, best)
        out = tuple(where(better, new, old) for new, old in zip(row, out))
    return out


def _reference_argmax(values, present):
    best, index = None, None
    for i, (v, p) in enumerate(zip(values, present)):
        v = where_all(p, v, -np.inf)
        if best is None:
            best, index = v, np.zeros(np.shape(v), dtype=np.int64) if np.ndim(v) else 0
        else:
            better = v > best
            best = where(better, v, best)
            index = where(better, i, index)
    return best, index


def _bits(x, shape):
    return np.broadcast_to(np.asarray(x, dtype=float), shape).view(np.uint64)


def _case(rng, entries: int, shape=(3, 1, 2, 5)):
    values, present, rows = [], [], []
    for i in range(entries):
        v = rng.choice(
            [0.0, 1.0, 2.0, np.inf, -np.inf, np.nan, -0.0], size=shape, p=[0.2] * 3 + [0.1] * 4
        )
        kind = rng.integers(4)
        p = (
            rng.random((1, 1, 1, shape[-1])) < 0.5
            if kind == 0
            else np.full((1, 1, 1, shape[-1]), kind == 1)
            if kind < 3
            else True
        )
        values.append(v)
        present.append(p)
        rows.append((rng.random((3, 1, 1, 5)), rng.random((3, 1, 2, 5)), float(i)))
    return values, present, rows


def test_at_max_and_argmax_match_the_full_where_chain():
    rng = np.random.default_rng(31)
    shape = (3, 1, 2, 5)
    for _ in range(300):
        values, present, rows = _case(rng, int(rng.integers(1, 6)), shape)
        got, want = _at_max(values, present, rows), _reference_at_max(values, present, rows)
        for a, b in zip(got, want):
            assert np.array_equal(_bits(a, shape), _bits(b, shape))
        (best, index), (ref_best, ref_index) = (
            _argmax(values, present),
            _reference_argmax(values, present),
        )
        assert np.array_equal(_bits(best, shape), _bits(ref_best, shape))
        assert np.array_equal(np.broadcast_to(index, shape), np.broadcast_to(ref_index, shape))


def test_scalars_take_the_same_entry():
    assert _at_max([1.0, 3.0, 3.0], [True, True, True], [("a",), ("b",), ("c",)]) == ("b",)
    assert _at_max([1.0, 5.0, 3.0], [True, False, True], [("a",), ("b",), ("c",)]) == ("c",)
    assert _argmax([2.0, 1.0, 2.0], [True, True, True]) == (2.0, 0)


def test_rows_given_as_functions_are_called_for_taken_entries_only():
    rng = np.random.default_rng(7)
    shape = (3, 1, 2, 5)
    for _ in range(100):
        values, present, rows = _case(rng, int(rng.integers(1, 6)), shape)
        called = []

        def lazy(i, called=called, rows=rows):
            def row():
                called.append(i)
                return rows[i]

            return row

        got = _at_max(values, present, [lazy(i) for i in range(len(rows))])
        want = _reference_at_max(values, present, rows)
        for a, b in zip(got, want):
            assert np.array_equal(_bits(a, shape), _bits(b, shape))
        # an entry no candidate takes (``_argmax``'s index never names it) is never built
        _, index = _argmax(values, present)
        assert set(called) >= set(np.unique(index).tolist()) and len(called) == len(set(called))
        assert set(called) <= set(range(len(rows)))
    assert _at_max([1.0, 3.0], [True, True], [lambda: 1 / 0, lambda: ("b",)]) == ("b",)
