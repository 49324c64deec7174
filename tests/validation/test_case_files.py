"""Loading validation-case files: JSON and YAML, and one-line errors naming the case and field."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from paraplan.specs.errors import InputError
from paraplan.validate.case_files import bundled_case_files, load_cases

GOOD = {
    "name": "ok",
    "source": "made up",
    "model": {"layers": 4, "hidden": 1024, "heads": 8, "ffn_hidden": 4096, "vocab": 32000},
    "system": "dgx-a100-80gb",
    "plan": {"gpus": 8, "tp": 2, "pp": 2, "global_batch": 8, "seq_length": 1024, "dtype": "fp16"},
    "measured": {"step_time_s": 0.5, "peak_memory_gib": 10},
}


def write(tmp_path, cases, suffix=".json"):
    path = tmp_path / f"cases{suffix}"
    text = json.dumps({"cases": cases}) if suffix == ".json" else yaml.safe_dump({"cases": cases})
    path.write_text(text)
    return path


def test_bundled_files_load():
    names = [p.name for p in bundled_case_files()]
    assert {
        "korthikanti2022.json",
        "nemo-llama31-h100.json",
        "mbridge-dense.json",
        "moe-visible.json",
        "narayanan2021.json",
        "gpu-steps-2026-11.json",
        "hf-steps-2026-11.json",
        "tiny-steps-2026-11.json",
        "llmfoundry-mpt.json",
        "torchtitan-llama3.json",
        "bloom-megatron-deepspeed.json",
        "maxtext-gpu.json",
        "megatron-v1-v100.json",
        "consumer-gpus.json",
        "mbridge-gb300.json",
        "mbridge-dense-more.json",
        "alps-gh200.json",
        "gcp-gpu-recipes.json",
        "dsexamples-hf-v100.json",
        "mbridge-moe-gb.json",
        "bigscience-tr11-prequel.json",
        "mbridge-nvfp4.json",
        "mbridge-moe-more.json",
        "mbridge-2604.json",
        "mbridge-260201.json",
        "mbridge-2608.json",
        "mbridge-moe-b300.json",
        "mbridge-260601.json",
        "mbridge-260401.json",
        "mbridge-2606.json",
        "newhw-steps.json",
    } <= set(names)
    cases = load_cases()
    # 118 + the held-out FSDP-stack sets (20 llm-foundry, 23 torchtitan) + BLOOM-176B (1) + MaxText (1 + 4)
    # + Megatron-LM v1 on V100 (8) + Megatron-Bridge dense rows on GB300 (7) and GB200 / H100 (14)
    # + Alps GH200 (2) + Google Cloud H200 / B200 (3) + published RTX 4090 steps (3)
    # + DeepSpeedExamples' HF GPT-2 on V100 (3) + Megatron-Bridge MoE rows on GB200 / GB300 (8)
    # + BigScience's tr11 topology benchmarks on Megatron-DeepSpeed (17)
    # + MaxText on Google Cloud H200 / B200 (3) and Llama 2 7B on one A3 VM (1)
    # + Megatron-Bridge 26.02 NVFP4 rows on GB200 / GB300 (4)
    # + Megatron-Bridge 25.11 / 26.02 MoE rows on DGX B200 / H100 / GB200 / GB300 (mbridge-moe-more, 14)
    # + Megatron-Bridge 26.04 rows whose model and GPU the catalog has (mbridge-2604.json, 13 dense + 19 MoE)
    # + Megatron-Bridge 26.02.01 rows (mbridge-260201.json, 19 MoE + 13 dense)
    # + Megatron-Bridge 26.08 MoE rows whose model and GPU the catalog has (mbridge-2608.json, 8)
    # + Megatron-Bridge 26.02 MoE rows on DGX B300 (mbridge-moe-b300.json, 4)
    # + Megatron-Bridge 26.06.01 MoE rows whose model and GPU the catalog has (mbridge-260601.json, 8)
    # + Megatron-Bridge 26.04.01 rows whose model and GPU the catalog has (mbridge-260401.json, 14 dense + 20 MoE)
    # + Megatron-Bridge 26.06 pre-training rows whose model and GPU the catalog has (mbridge-2606.json, 7 + 14)
    # + published single-GPU steps on hardware with few cases (newhw-steps.json, 1)
    assert len(cases) == 390 and len({(c.file, c.name) for c in cases}) == 390


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_good_file(tmp_path, suffix):
    (case,) = load_cases([write(tmp_path, [GOOD], suffix)])
    assert case.name == "ok" and case.file == "cases" and case.plan.dp == 2
    assert case.measured == {"step_time_s": 0.5, "peak_memory_gib": 10.0}


def broken(**changes):
    case = copy.deepcopy(GOOD)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = case
        for p in parents:
            target = target[p]
        if value is ...:
            del target[leaf]
        else:
            target[leaf] = value
    return case


BAD = {
    "missing measured": (broken(measured=...), "measured"),
    "unknown metric": (broken(measured={"step_time": 1}), "measured.step_time"),
    "negative measurement": (broken(measured={"step_time_s": -1}), "measured.step_time_s"),
    "unknown case field": (broken(nots="x"), "nots"),
    "bad scope": (broken(scope="layers"), "scope"),
    "unknown framework": (broken(framework="megatron"), "framework"),
    "only documentation metrics": (broken(measured={"tflops_per_gpu": 400}), "measured"),
    "bad model field": (broken(model__hidden=0), "model.hidden"),
    "more GPUs used than a domain has": (broken(gpus_per_domain_used=9), "gpus_per_domain_used"),
    "GPUs used not a whole number": (broken(gpus_per_domain_used=4.0), "gpus_per_domain_used"),
    "bad plan field": (broken(plan__recompute="most"), "plan.recompute"),
    "system with bad unit": (
        broken(
            system={
                "accelerator": {
                    "name": "x",
                    "matrix_flops": {"bf16": "1 PFLOPS"},
                    "vector_flops": {},
                    "hbm_capacity": "80 GiBB",
                    "hbm_bandwidth": "2 TB/s",
                    "sm_count": 100,
                },
                "node": {"gpus_per_domain": 8, "nvlink_bandwidth": "300 GB/s"},
                "network": {"nic_bandwidth": "200 Gb/s"},
            }
        ),
        "hbm_capacity",
    ),
}


@pytest.mark.parametrize("case, field", list(BAD.values()), ids=list(BAD))
def test_bad_case_names_case_and_field(tmp_path, case, field):
    with pytest.raises(InputError) as info:
        load_cases([write(tmp_path, [GOOD, case])])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("cases: case 'ok'") or message.startswith("cases: case #2"), message
    assert field in message


def test_gpus_per_domain_used_sets_the_jobs_domain(tmp_path):
    """A launcher that fills 4 of each 8-GPU domain: the case's system has 4-GPU domains, the rest as
    the catalog's (validate.case_files.job_system)."""
    (plain, used) = load_cases(
        [write(tmp_path, [GOOD, dict(GOOD, name="half", gpus_per_domain_used=4)])]
    )
    assert plain.system.node.gpus_per_domain == 8 and used.system.node.gpus_per_domain == 4
    assert used.system.node.nvlink_bandwidth == plain.system.node.nvlink_bandwidth


def test_gb_cases_over_one_rack_use_64_gpus_per_rack():
    """Megatron-Bridge's performance launcher asks for sbatch --segment 16 on 4-GPU trays past 18 nodes
    (scripts/performance/utils/executors.py): every bundled GB200 / GB300 case of more than 72 GPUs is
    priced on 64-GPU domains, the smaller ones on the catalog's 72."""
    gb = [c for c in load_cases() if c.system.name in ("gb200-nvl72", "gb300-nvl72")]
    assert {c.system.node.gpus_per_domain for c in gb if c.plan.gpus > 72} == {64}
    assert {c.system.node.gpus_per_domain for c in gb if c.plan.gpus <= 72} == {72}
    # + the 26.02.01 405B rows (6) and the 26.06.01 DeepSeek-V3 / Qwen3 235B rows (4) on 256 GB200 / GB300
    # + the 26.04.01 rows of mbridge-260401.json (405B 6, DeepSeek-V3 2, Qwen3 235B 2, Kimi K2 1) and the 26.06
    # rows of mbridge-2606.json (405B 6, DeepSeek-V3 3, Qwen3 235B 2, Kimi K2 1) on 256 GB200 / GB300
    assert sum(c.plan.gpus > 72 for c in gb) == 44 + 11 + 12


def test_documentation_keys_accepted(tmp_path):
    doc = dict(
        GOOD,
        notes="n",
        group="g1",
        tier="main",
        confidence="high",
        derived="d",
        quote="q",
        record="r",
        config_id="v1",
        framework="torchtitan",
        scope="stage",
    )
    doc["measured"] = {"step_time_s": 0.5, "tflops_per_gpu": 300}
    (case,) = load_cases([write(tmp_path, [doc])])
    assert (
        case.cv_group == "g1"
        and case.framework == "torchtitan"
        and case.measured == {"step_time_s": 0.5}
    )
    # the framework's defaults fill what the plan leaves out, an explicit plan value wins
    assert case.plan.overlap_tp_comm is False and case.plan.attention == "flash"
    assert (
        case.system.accelerator.reserved_memory > 2 * 2**30
    )  # torchtitan: fragmentation on top of buffers


def test_unsupported_case_is_reported_and_the_rest_run(tmp_path):
    from paraplan.validate.case_files import UnsupportedCase
    from paraplan.validate.run import run_cases

    # a field the model does not know (MoE fields are known since issue 9: a state-space layer is not)
    ssm = broken(model__mamba_layers=8, plan__mamba_chunk=256)
    ssm["name"] = "ssm"
    cases = load_cases([write(tmp_path, [GOOD, ssm])])
    assert isinstance(cases[1], UnsupportedCase) and "mamba_layers" in cases[1].reason
    report = run_cases(cases)
    assert [e["status"] for e in report["cases"]] == ["ok", "unsupported"]
    assert report["summary"]["cases"] == 1 and report["summary"]["unsupported"] == 1
    assert report["summary"]["unsupported_cases"][0]["name"] == "ssm"


def test_case_whose_plan_breaks_a_rule_is_reported_and_the_rest_run(tmp_path):
    """A published run whose plan paraplan's rules refuse (tp 3 does not divide the heads) is not bad input: the case
    is reported unsupported with the field and the rule, and the other cases still run and are scored."""
    from paraplan.validate.case_files import UnsupportedCase
    from paraplan.validate.run import run_cases

    refused = broken(plan__tp=3, plan__gpus=12)
    refused["name"] = "tp3"
    cases = load_cases([write(tmp_path, [GOOD, refused])])
    assert (
        isinstance(cases[1], UnsupportedCase)
        and "plan.tp" in cases[1].reason
        and "\n" not in cases[1].reason
    )
    report = run_cases(cases)
    assert [e["status"] for e in report["cases"]] == ["ok", "unsupported"]
    assert (
        report["summary"]["cases"] == 1
        and report["summary"]["unsupported_cases"][0]["name"] == "tp3"
    )


def test_unknown_catalog_names_are_reported_and_the_rest_run(tmp_path):
    """A case naming a model or system the catalog does not have is reported unsupported with the name and the
    catalog's suggestions (a system this tool does not know yet is not a malformed file); the others still run."""
    from paraplan.validate.case_files import UnsupportedCase
    from paraplan.validate.run import run_cases

    model, system = broken(model="llama9"), broken(system="dgx-z100")
    model["name"], system["name"] = "m", "s"
    cases = load_cases([write(tmp_path, [GOOD, model, system])])
    assert [type(c) for c in cases[1:]] == [UnsupportedCase, UnsupportedCase]
    assert (
        "model: unknown model 'llama9'" in cases[1].reason
        and "system: unknown system 'dgx-z100'" in cases[2].reason
    )
    assert run_cases(cases)["summary"]["cases"] == 1


def test_bad_file_shapes(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("- just a list\n")
    with pytest.raises(InputError, match="'cases'"):
        load_cases([path])
    path.write_text("cases: [\n")
    with pytest.raises(InputError, match="not valid"):
        load_cases([path])
    with pytest.raises(InputError, match="cannot read"):
        load_cases([tmp_path / "missing.json"])
    with pytest.raises(InputError, match="duplicated"):
        load_cases([write(tmp_path, [GOOD, GOOD])])
