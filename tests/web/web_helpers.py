"""Shared helpers of the web tests: the small problem every test searches (GPT-3 13B on 64 A100s
with tp and pp restricted, well under a second), and a job waited for through the JSON API."""

from __future__ import annotations

import time

SMALL = {
    "model": "gpt3-13b",
    "system": "dgx-a100-80gb",
    "gpus": "64",
    "max-global-batch": "512",
    "seq-length": "2048",
    "tp": "1,2,4",
    "pp": "1,2,4",
    "top": "5",
}


def wait(client, job_id: str, limit_s: float = 120.0) -> dict:
    """The job's state once it is no longer running."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        job = client.get(f"/api/jobs/{job_id}").json()
        if job["state"] != "running":
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still running after {limit_s} s")


# a sweep file as the page takes it (``paraplan sweep``'s definition document): 2 GPU counts x 2 HBM rates
SWEEP = """model: gpt3-13b
systems: [dgx-a100-80gb]
gpus: [32, 64]
max_global_batch: 512
restrictions: {tp: [1, 2, 4], pp: [1, 2, 4]}
sets: [{path: accelerator.hbm_bandwidth, values: [2TB/s, 3TB/s]}]
"""


# a cluster of pools as the page takes it (``search --cluster``'s schema), and the search the page runs
CLUSTER = """name: mixed
pools:
  - {name: a100, system: dgx-a100-80gb, nodes: 1}
  - {name: h100, system: dgx-h100-80gb, nodes: 1}
"""


def cluster_search(model: str = "gpt3-1.3b", global_batch: int = 32, **fields) -> dict:
    """api.search_cluster of ``model`` on CLUSTER, top 3, sequence 2048, bf16, FlashAttention, with
    ``fields`` (default: GPT-3 1.3B, global batch 32, tp and pp in {1, 2}): what the page's cluster
    search (those fields filled) must show."""
    from paraplan import api

    fields = fields or {"tps": (1, 2), "pps": (1, 2)}
    return api.search_cluster(
        model,
        CLUSTER,
        global_batch,
        top=3,
        seq_length=2048,
        dtype="bf16",
        attention="flash",
        **fields,
    )


# a mixture-of-experts model on CLUSTER with the per-stage options beyond a dense model's, as the page
# takes them: the expert axes and routing spread (search.staged.experts), cp and the schedules
# (search.staged.axes), the time budget
MOE_CLUSTER = {"model": "qwen3-30b-a3b", "cluster-text": CLUSTER, "global-batch": "16", "top": "3"}
MOE_CLUSTER |= {"tp": "1", "pp": "2", "micro-batch": "2", "recompute": "none", "cp": "1,2"}
MOE_CLUSTER |= {"ep": "8", "etp": "1", "dispatcher": "alltoall,allgather", "expert-load-cv": "0.5"}
MOE_CLUSTER |= {"schedule": "1f1b,zb-h1", "time-budget": "120"}


def moe_cluster_search() -> dict:
    """api.search_cluster of MOE_CLUSTER's problem: what the page's cluster search of it must show."""
    axes = {"tps": (1,), "pps": (2,), "micro_batches": (2,), "recompute": ("none",), "cps": (1, 2)}
    axes |= {"schedules": ("1f1b", "zb-h1"), "ep": (8,), "etp": (1,), "expert_load_cv": 0.5}
    axes |= {"dispatchers": ("alltoall", "allgather"), "time_budget_s": 120.0}
    return cluster_search("qwen3-30b-a3b", 16, **axes)
