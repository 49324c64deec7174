"""The block-by-block search's bounds (search.run._search_blocks) and what the row tables' floors share with them."""

SAFETY = 1.0 - 1e-9  # the floors are sums in another order than the estimator's: keep them below it
