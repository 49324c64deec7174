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
# the run-wide axes both per-stage searches (--cluster, --non-uniform) honour (search.staged.axes), by the CLI's
# parameter name -> (the key of cli.app.search_restrictions' dict, the hetero.HeteroProblem field): the uniform
# search's --cp and --schedule, read by its parsers
STAGE_SEARCH_AXES = {
    "cp": ("cp", "cps"),
    "schedule": ("schedules", "schedules"),
}
