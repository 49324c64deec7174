"""AMPeD-style configurations -> paraplan model and plan (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paraplan.api import plan_from_fields
from paraplan.catalog import load_model
from paraplan.importers.amped import convert
from paraplan.specs.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data" / "amped"


def test_config_with_lookup_tables():
    model, plan, notes = convert(DATA / "config.json", DATA / "lookup_tables.json")
    m, p = load_model(model), plan_from_fields(plan)
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden) == (24, 1024, 16, 4096)
    assert (p.gpus, p.tp, p.pp, p.dp, p.micro_batch, p.global_batch, p.seq_length) == (
        16,
        4,
        2,
        2,
        4,
        64,
        1024,
    )
    assert p.placement == "tp-cp-dp-pp"  # tp intra-node innermost; dp and pp across nodes
    assert any("not mapped" in n and "frequency" in n for n in notes)


def test_calculated_parameters_are_refused(tmp_path):
    cfg = json.loads((DATA / "config.json").read_text())
    cfg["mapping_parameters"]["parameters"]["microbatch_size"] = {"calculated": True, "value": 0}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="calculated"):
        convert(path, DATA / "lookup_tables.json")


def test_missing_lookup_row_is_named(tmp_path):
    with pytest.raises(InputError, match="lookup table"):
        convert(DATA / "config.json", None)


def test_two_groups_split_over_nodes_are_refused(tmp_path):
    cfg = json.loads((DATA / "config.json").read_text())
    pars = cfg["mapping_parameters"]["parameters"]
    pars["tensor_parallelism_inter_node"] = {"value": 2}
    pars["data_parallelism_intra_node"] = {"value": 2}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="both span"):
        convert(path, DATA / "lookup_tables.json")
