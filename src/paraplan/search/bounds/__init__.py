"""The block-by-block search's bounds (search.run._search_blocks) and what the row tables' floors share with them."""

SAFETY = 1.0 - 1e-9  # the floors are sums in another order than the estimator's: keep them below it


def own_or_work(own, work):
    """A kind's (or stage's) own floor of a variant of its work (kept: what a DualPipe pair cannot hide; raw: its
    dispatch unhidden), or its ``work`` floor where it has none of its own (``own`` is None)."""
    return work if own is None else own
