"""Catalog entries beyond decoder-only GPT (BERT, T5, ViT): parameter counts against the papers, and
each evaluates as a non-uniform plan."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.graph.params import parameter_counts
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.stage_plan import stage_plan_from_dict


@pytest.mark.parametrize(
    ("name", "paper_params", "extra"),
    [
        ("bert-large", 340e6, 0.0),  # Devlin et al. 2019 §3
        ("t5-3b", 2.8e9, 0.0),  # Raffel et al. 2020 §3.7 ("3B"; 2.85e9 in the released checkpoint)
        (
            "vit-large",
            307e6,
            21843 * 1024,
        ),  # Dosovitskiy et al. 2021 Table 1, without the 21k-class head
    ],
)
def test_parameters_match_the_papers(name, paper_params, extra):
    counts = parameter_counts(load_model(name))
    assert counts.total == pytest.approx(paper_params + extra, rel=0.05)


@pytest.mark.parametrize(("name", "seq"), [("bert-large", 512), ("t5-3b", 512), ("vit-large", 197)])
def test_each_runs_as_a_stage_plan(name, seq):
    model = load_model(name)
    cluster = uniform_cluster(load_system("dgx-1-v100"), 8)
    pool = cluster.pools[0].name
    layers = model.total_layers
    plan = stage_plan_from_dict(
        {
            "global_batch": 16,
            "seq_length": seq,
            "microbatches": 4,
            "dtype": "fp16",
            "attention": "unfused",
            "stages": [
                {"pool": pool, "gpus": 4, "layers": layers // 2, "tp": 2},
                {"pool": pool, "gpus": 4, "layers": layers - layers // 2, "tp": 4},
            ],
        }
    )
    est = estimate_stage_plan(model, cluster, plan)
    assert est.step_time_s > 0 and est.fits
