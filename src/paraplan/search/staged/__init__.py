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
# the other options both per-stage searches take, by the CLI's parameter name -> the keyword of
# api.search_cluster (a hetero.HeteroProblem field, or the search's own: model, global_batch, top,
# time_budget_s, framework): the run's inputs, an MoE model's axes and routing spread (search.staged.
# experts); the CLI's per-stage options (cli.search_cmd.HETERO_SEARCH_OPTIONS) and the page's cluster
# form read them
STAGE_SEARCH_INPUTS = {
    "model": "model",
    "global_batch": "global_batch",
    "seq_length": "seq_length",
    "dtype": "dtype",
    "attention": "attention",
    "top": "top",
    "time_budget": "time_budget_s",
    "framework": "framework",
    "ep": "ep",
    "etp": "etp",
    "dispatcher": "dispatchers",
    "expert_load_cv": "expert_load_cv",
}
# every option the AMP-style search (``search --cluster FILE``, api.search_cluster) honours -> its keyword
CLUSTER_SEARCH_OPTIONS = {"cluster": "cluster", **STAGE_SEARCH_INPUTS, **AMP_SEARCH_AXES}
CLUSTER_SEARCH_OPTIONS |= {name: field for name, (_, field) in STAGE_SEARCH_AXES.items()}
