"""The per-stage plan searches: AMP-style over a cluster of pools (``hetero``), non-uniform splits
(``non_uniform``) and their balancing helpers."""

# the axis restrictions the AMP-style search (--cluster, encoder-decoder models) honours, by the
# CLI's parameter name -> hetero.HeteroProblem field (the CLI and the page's cluster form read it)
AMP_SEARCH_AXES = {
    "tp": "tps",
    "pp": "pps",
    "micro_batch": "micro_batches",
    "recompute": "recompute",
}
