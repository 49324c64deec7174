"""Issue 37: ``search --cluster`` with six pools (720 pool orders) ran past 120 s; the AMP-style
search now stops at its time budget and says how far it got."""

from __future__ import annotations

import time

from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.specs.model import ModelSpec

TINY = ModelSpec(layers=4, hidden=512, heads=8, ffn_hidden=2048, vocab=8000, max_position=512)
SYSTEMS = ("aws-p3.8xlarge", "aws-g4dn.12xlarge")
SIX = cluster_from_dict(
    {
        "pools": [
            {"name": f"p{i}", "system": SYSTEMS[i % 2], "nodes": 1, "gpus": 2} for i in range(6)
        ]
    }
)


def test_a_zero_budget_stops_before_the_first_pool_order_and_says_so():
    result = search_cluster(HeteroProblem(TINY, SIX, 8, 128), top_k=1, time_budget_s=0.0)
    assert result.stopped.startswith("time budget 0 s reached: 0 of 720 pool orders")
    assert result.evaluated == 0 and not result.plans


def test_six_pools_return_within_the_budget_with_the_best_found_so_far():
    t0 = time.perf_counter()
    result = search_cluster(HeteroProblem(TINY, SIX, 8, 128), top_k=1, time_budget_s=1.0)
    assert time.perf_counter() - t0 < 1.0 + 5.0
    assert "of 720 pool orders" in result.stopped
    assert result.to_dict()["stopped"] == result.stopped


def test_the_cli_prints_where_the_budget_stopped_the_cluster_search(tmp_path, capsys):
    import json

    import pytest

    from paraplan.cli import main

    path = tmp_path / "six.json"
    path.write_text(json.dumps({"pools": [p.model_dump() for p in SIX.pools]}))
    argv = ["search", "-m", "gpt3-125m", "--cluster", str(path), "--global-batch", "8"]
    with pytest.raises(SystemExit):  # exit 1: no plan found in no time
        main([*argv, "--seq-length", "128", "--time-budget", "0"])
    out = capsys.readouterr().out
    assert "stopped: time budget 0 s reached: 0 of 720 pool orders" in out
