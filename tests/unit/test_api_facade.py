"""paraplan.api: names, paths, dicts and specs in; the CLI's plan defaults."""

from __future__ import annotations

import json
import sys
import types

import pytest
import yaml

from paraplan import api
from paraplan.report.frames import estimate_html
from paraplan.catalog import load_model, load_system
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec


def test_names_dicts_specs_and_paths_agree(tmp_path):
    by_name = api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1)
    model = load_model("llama3-8b")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(model.model_dump(exclude={"name"})))
    by_spec = api.estimate(
        model,
        load_system("dgx-h100-80gb"),
        PlanSpec(gpus=8, zero=1, global_batch=8, seq_length=2048),
    )
    by_dict = api.estimate(model.model_dump(), "dgx-h100-80gb", {"gpus": 8, "zero": 1})
    by_path = api.estimate(path, "dgx-h100-80gb", gpus=8, zero=1)
    for other in (by_spec, by_dict, by_path):
        assert other.step_time_s == pytest.approx(by_name.step_time_s)
        assert other.first_stage.peak_bytes == pytest.approx(by_name.first_stage.peak_bytes)


def test_default_global_batch():
    assert api.default_global_batch({"gpus": 64, "tp": 8, "pp": 2}) == 4
    assert (
        api.default_global_batch({"gpus": 64, "tp": 8, "pp": 2, "vpp": 2}) == 8
    )  # interleaved: ·pp
    assert (
        api.default_global_batch(
            {"gpus": 64, "tp": 8, "pp": 2, "micro_batch": 2, "schedule": "interleaved"}
        )
        == 16
    )
    assert (
        api.default_global_batch({"gpus": 6, "tp": 4, "micro_batch": 3}) == 3
    )  # dp unknown: let plan.gpus report it
    # DualPipe: an even count of at least 2·pp micro-batches (specs.rules_schedule.dualpipe_rule)
    assert api.default_global_batch({"gpus": 64, "tp": 8, "pp": 2, "schedule": "dualpipe"}) == 16


def test_dualpipe_takes_its_own_default_batch(cli):
    """Without --global-batch the estimate's default is a batch DualPipe accepts: dp 4 · 2·pp = 16."""
    argv = ["--model", "gpt3-1.3b", "--system", "dgx-a100-80gb", "--gpus", "8", "--pp", "2"]
    code, out, err = cli("estimate", *argv, "--schedule", "dualpipe", "--json")
    assert code == 0, err
    assert json.loads(out)["plan"]["global_batch"] == 16


def test_plan_errors_are_one_line():
    with pytest.raises(InputError) as info:
        api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, placement="dp-tp")
    assert "placement" in str(info.value) and "{" not in str(info.value)
    with pytest.raises(InputError, match="plan.gpus"):
        api.estimate("llama3-8b", "dgx-h100-80gb", gpus=0)


def test_with_ops_and_validate():
    est = api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1, with_ops=True)
    assert est.ops and est.to_dict(include_ops=True)["ops"]
    report = api.validate()
    assert set(report) == {"cases", "summary"} and report["summary"]["cases"] == len(
        report["cases"]
    )


# ---- search, results, labels, DataFrames ------------------------------------------------------------
SMALL = dict(
    gpus=8,
    global_batch=32,
    top=3,
    tp=[1, 2],
    micro_batch=1,
    vary_offload=False,
    vary_placement=False,
)


def test_search_takes_catalog_names_like_estimate():
    from paraplan.search.run import search as run_search
    from paraplan.search.space import SearchProblem

    found = api.search("gpt3-1.3b", "dgx-a100-80gb", **SMALL)
    problem = SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=load_system("dgx-a100-80gb"),
        gpus=8,
        global_batch=32,
        seq_length=2048,
        tp=(1, 2),
        micro_batch=(1,),
        vary_offload=False,
        vary_placement=False,
        price_per_gpu_hour=load_system("dgx-a100-80gb").price_per_gpu_hour,
    )
    direct = run_search(problem, top_k=3)
    assert [r.plan for r in found] == [r.plan for r in direct.plans]
    assert len(found) == 3 and found.best is found[0] and found.best.rank == 1
    assert found.to_dict()["problem"]["model"] == "gpt3-1.3b"
    with pytest.raises(InputError, match="not a search field"):
        api.search("gpt3-1.3b", "dgx-a100-80gb", gpus=8, global_batch=32, tensor_parallel=2)


def test_short_reprs_and_jupyter_view():
    found = api.search("gpt3-1.3b", "dgx-a100-80gb", **SMALL)
    text = repr(found)
    assert (
        text.startswith("<SearchResults gpt3-1.3b on 8 x dgx-a100-80gb")
        and "\n" not in text
        and len(text) < 250
    )
    assert api.plan_label(found.best.plan) in text
    html = found._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == 1 + 3
    assert api.plan_label(found.best.plan.model_dump()) == api.plan_label(found.best.plan)


def test_records_and_dataframe():
    found = api.search("gpt3-1.3b", "dgx-a100-80gb", **SMALL)
    records = found.to_records()
    assert [r["rank"] for r in records] == [1, 2, 3]
    first = records[0]
    assert first["plan_label"] == api.plan_label(found.best.plan)
    assert first["step_time_s"] == found.best.estimate.step_time_s and first["fits"] is True
    assert sum(
        first[k]
        for k in (
            "forward_s",
            "backward_s",
            "recompute_s",
            "optimizer_s",
            "bubble_s",
            "tp_comm_s",
            "cp_comm_s",
            "pp_comm_s",
            "dp_comm_s",
            "offload_s",
        )
    ) == pytest.approx(first["step_time_s"])
    pd = pytest.importorskip("pandas")
    frame = found.to_dataframe()
    assert isinstance(frame, pd.DataFrame) and list(frame["rank"]) == [1, 2, 3]
    est = api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1)
    assert (
        api.to_dataframe([est, est]).shape[0] == 2
        and api.to_dataframe(est)["mfu"].iloc[0] == est.mfu
    )


def test_estimate_ranked_plan_and_plan_reprs_are_one_short_line():
    est = api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1)
    text = repr(est)
    assert text.startswith(
        "<Estimate llama3-8b on 8 x dgx-h100-80gb: tp1 pp1 cp1 dp8 mb1 rc:none zero1; step "
    )
    assert "\n" not in text and len(text) < 200 and "(fits)" in text
    assert (
        estimate_html(est).startswith("<table>")
        and est.to_record()["plan_label"] == "tp1 pp1 cp1 dp8 mb1 rc:none zero1"
    )
    ranked = api.search("gpt3-1.3b", "dgx-a100-80gb", **SMALL).best
    assert (
        repr(ranked).startswith(f"<RankedPlan #1 {api.plan_label(ranked.plan)}: step ")
        and len(repr(ranked)) < 200
    )
    plan = PlanSpec(gpus=8, tp=2, zero=1, global_batch=8, seq_length=2048)
    assert repr(plan) == "PlanSpec(gpus=8, tp=2, dp=4, global_batch=8, seq_length=2048, zero=1)"
    assert PlanSpec.model_validate(plan.model_dump()) == plan  # the data are all still there


def test_the_estimate_view_is_registered_with_a_running_ipython(monkeypatch):
    """An Estimate renders nothing itself; the API registers report.frames.estimate_html with
    IPython's HTML formatter when IPython runs (a stand-in shell here)."""
    registered = {}

    class Formatter:
        def for_type(self, kind, view):
            registered[kind] = view

    shell = types.SimpleNamespace(
        display_formatter=types.SimpleNamespace(formatters={"text/html": Formatter()})
    )
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert api.register_jupyter_views() is True
    assert registered == {api.Estimate: estimate_html}
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert api.register_jupyter_views() is False


def test_a_hugging_face_config_dict_estimates_as_its_pasted_text():
    """api.estimate(model={config.json as a dict}) reads it as a Hugging Face config, as the same
    config pasted as text (api.spec_from_text) or named by path does (catalog.load_model)."""
    import json

    config = {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    }
    by_dict = api.estimate(dict(config), "dgx-h100-80gb", gpus=8, zero=1)
    pasted = api.spec_from_text("model", json.dumps(config))
    by_text = api.estimate(pasted, "dgx-h100-80gb", gpus=8, zero=1)
    assert load_model(dict(config)).hidden == 2048 and load_model(dict(config)).kv_heads == 4
    assert by_dict.step_time_s == pytest.approx(by_text.step_time_s, rel=1e-12)
    assert by_dict.first_stage.peak_bytes == pytest.approx(by_text.first_stage.peak_bytes)


def test_a_degree_given_as_keyword_over_a_planspec_infers_dp_again():
    """api.estimate's keyword overrides of a PlanSpec follow export.planfile.with_overrides: a changed
    tp without dp re-infers dp (8 GPUs, tp 2 -> 4: dp 4 -> 2); with dp given, dp stays as given."""
    plan = PlanSpec(gpus=8, tp=2, global_batch=8, seq_length=2048)
    assert api.estimate("llama3-8b", "dgx-h100-80gb", plan, tp=4).plan["dp"] == 2
    with pytest.raises(InputError):
        api.estimate("llama3-8b", "dgx-h100-80gb", plan, tp=4, dp=4)  # 4·4 ≠ 8 GPUs


def test_a_degree_given_as_keyword_with_a_framework_infers_dp_again():
    """With ``framework=`` the keyword overrides of a PlanSpec follow the same rule: the plan's dp 8
    is dropped when tp 2 is given (8 GPUs: dp 4), not kept to fail the degree product."""
    plan = PlanSpec(gpus=8, tp=1, dp=8, global_batch=8, seq_length=2048)
    out = api.estimate("llama3-8b", "dgx-h100-80gb", plan, tp=2, framework="torchtitan")
    assert (out.plan["tp"], out.plan["dp"]) == (2, 4)


def test_a_degree_given_as_keyword_over_a_dict_plan_infers_dp_again():
    """A plan given as a dict is overridden like a PlanSpec: tp 2 over dp 8 on 8 GPUs gives dp 4."""
    plan = dict(gpus=8, tp=1, dp=8, global_batch=8, seq_length=2048)
    out = api.estimate("llama3-8b", "dgx-h100-80gb", plan, tp=2)
    assert (out.plan["tp"], out.plan["dp"]) == (2, 4)
    with pytest.raises(InputError):
        api.estimate("llama3-8b", "dgx-h100-80gb", plan, tp=2, dp=8)  # 2·8 ≠ 8 GPUs
