"""Predictions against published measurements, with the tolerances we promise.

Korthikanti et al. 2022 (arXiv:2205.05198): Table 5 iteration times and Figure 1 memory on the
first pipeline stage (transformer layers only, see paraplan.validate.run.MEMORY_SCOPE_RULE).
NVIDIA DGX Cloud benchmarking recipes v24.11.1: Llama 3.1 8B / 70B step times on DGX H100.
Narayanan et al. 2021 (arXiv:2104.04473) Table 2: GPT-3 175B and 530B, PTD-P against ZeRO-3 on up to
2,240 A100s — a set no constant is fitted on (held out).
"""

from __future__ import annotations

import pytest

from paraplan.validate.case_files import SCOPE_STAGE, SCOPE_TRANSFORMER, load_cases
from tests.validation.published_common import MOE_NAMES, _cases, _mape


def test_korthikanti_step_time(report):
    errors = [
        c["error_pct"]["step_time_s"]
        for c in _cases(report, "Korthikanti")
        if "step_time_s" in c["measured"]
    ]
    assert len(errors) == 8
    assert _mape(errors) <= 3.5
    assert max(abs(e) for e in errors) <= 8.0


def test_korthikanti_figure1_memory_transformer_layers(report):
    figure1 = _cases(report, "Figure 1")
    assert len(figure1) == 8
    for case in figure1:
        assert case["scope"] == SCOPE_TRANSFORMER
        for metric in ("weights_and_optimizer_gib", "activations_gib"):
            assert abs(case["error_pct"][metric]) <= 2.0, (
                case["name"],
                metric,
                case["error_pct"][metric],
            )
        # nothing hidden: the whole first stage holds at least the transformer layers' memory
        assert (
            case["predicted"]["stage_weights_and_optimizer_gib"]
            >= case["predicted"]["weights_and_optimizer_gib"]
        )
        assert case["predicted"]["stage_activations_gib"] >= case["predicted"]["activations_gib"]


def test_figure1_parameter_bar_is_transformer_layers_only():
    """The evidence for the scope rule: the 22B bar is 18 B × 12·l·h²/t exactly (l=48, h=6144, t=8)."""
    assert 18 * 12 * 48 * 6144**2 / 8 / 2**30 == 45.5625
    figure1 = [c for c in load_cases() if "Figure 1" in c.source and c.model.hidden == 6144]
    assert figure1 and all(c.measured["weights_and_optimizer_gib"] == 45.5625 for c in figure1)


def test_scope_is_explicit_in_the_bundled_files():
    """Issue 7: scope is a field of each case, not read from its source text."""
    cases = load_cases()
    for case in cases:
        expected = SCOPE_TRANSFORMER if "Figure 1" in case.source else SCOPE_STAGE
        assert case.scope == expected, case.name
    assert all(
        c.framework
        in (
            "megatron-lm-2021",
            "megatron-core",
            *(
                "nemo-24.09",
                "dgxc-benchmarking-24.11",
            ),  # the DGX Cloud Llama 3.1 runs: its recipe environment
            *("megatron-bridge-25.09", "megatron-bridge-25.11", "megatron-bridge-25.11-mxfp8"),
            "megatron-bridge-26.02-nvfp4",  # NVFP4 rows, held out
            "megatron-bridge-26.04-nvfp4",  # 26.04-26.06 NVFP4 rows (TE RHT cast fusion), held out
            "megatron-bridge-26.06-mxfp8",  # 26.06 MoE rows (v0.5.0 presets), held out
            "megatron-bridge-26.06.01-mxfp8",  # 26.06.01 MoE rows (v0.5.1: cudnn-frontend 1.24.0), held out
            "megatron-bridge-26.08-mxfp8",  # 26.08 MoE rows (v0.6.0 flat perf recipes), held out
            "deepspeed",
            "deepspeed-2021",
            *("pytorch-eager", "pytorch-eager-bf16", "pytorch-compile"),  # single-GPU steps
            "hf-transformers",  # single-GPU Trainer-style steps
            *("llm-foundry", "torchtitan", "torchtitan-compiled"),  # FSDP stacks, held out
            "megatron-deepspeed",  # BLOOM-176B, held out
            "maxtext",  # MaxText on GPU (JAX-Toolbox), held out
            *("megatron-lm-2019", "megatron-lm-v1.0"),  # Megatron-LM 2019 / v1.0 on DGX-2H V100s
        )
        for c in cases
    )


def test_calibration_and_held_out_reported_apart(report):
    summary = report["summary"]
    # every bundled set but Narayanan's fits a constant: Korthikanti (A100), NeMo (H100), mbridge-dense (B200 fp8),
    # moe-visible (the MoE constants)
    assert summary["calibration"]["step_time_cases"] == 46
    # Narayanan et al. 2021 Table 2 (12) and the project's single-GPU steps on H100 / H200
    # (gpu-steps-2026-11, 25): no constant is fitted on them
    # + tiny steps on a second host; + the FSDP-stack sets llmfoundry-mpt (20) and torchtitan-llama3 (23)
    # + BLOOM-176B on Megatron-DeepSpeed (1) + MaxText Llama 2 7B on H100 (1) + Megatron-LM v1 on V100 (8)
    # + Megatron-Bridge dense rows on GB300 (mbridge-gb300, 7) and on GB200 / H100 (mbridge-dense-more, 14)
    # + Megatron-LM on Alps GH200 (alps-gh200, 2) + NeMo on Google Cloud H200 / B200 (gcp-gpu-recipes, 3)
    # + published RTX 4090 steps (consumer-gpus, 3) + DeepSpeedExamples' HF GPT-2 on 16 V100 (dsexamples-hf-v100, 3)
    # + Megatron-Bridge MoE rows on GB200 / GB300 (mbridge-moe-gb, 8)
    # + BigScience's tr11 topology benchmarks on Megatron-DeepSpeed (bigscience-tr11-prequel, 17)
    # + MaxText Llama 3.1 70B / 405B on Google Cloud H200 / B200 and Llama 2 7B on one A3 VM (maxtext-gpu, 4)
    # + Megatron-Bridge 26.02 NVFP4 rows on GB200 / GB300 (mbridge-nvfp4, 4)
    # + Megatron-Bridge 25.11 / 26.02 MoE rows on DGX B200 / H100 / GB200 / GB300 (mbridge-moe-more, 14)
    # + Megatron-Bridge 26.04 dense and MoE rows (mbridge-2604.json, 32)
    # + Megatron-Bridge 26.02.01 MoE and dense rows (mbridge-260201.json, 19 + 13)
    # + Megatron-Bridge 26.08 MoE rows (mbridge-2608.json, 8)
    # + Megatron-Bridge 26.02 MoE rows on DGX B300 (mbridge-moe-b300.json, 4)
    # + Megatron-Bridge 26.06.01 MoE rows (mbridge-260601.json, 8)
    # + Megatron-Bridge 26.04.01 dense and MoE rows (mbridge-260401.json, 14 + 20)
    # + Megatron-Bridge 26.06 dense and MoE rows (mbridge-2606.json, 7 + 14)
    # + published single-GPU steps on hardware with few cases (newhw-steps.json, 1)
    assert (
        summary["held_out"]["step_time_cases"]
        == (12 + 25 + 15 + 8 + 4 + 20 + 23 + 1 + 1 + 8 + 7 + 14)
        + (2 + 3 + 3 + 3 + 8 + 17 + 4 + 4 + 14)
        + 32
        + (19 + 13)
        + 8
        + 4
        + 8
        + (14 + 20)
        + (7 + 14)
        + 1
    )
    assert len(MOE_NAMES) == 10
    assert set(summary["by_group"]) >= {"korthikanti2022-gpt3-175b", "dgxc-llama31-70b-bf16"}


def test_nemo_llama31_step_time(report):
    cases = _cases(report, "dgxc-benchmarking")
    errors = [c["error_pct"]["step_time_s"] for c in cases]
    assert len(errors) == 22
    assert _mape(errors) <= 10.0
    assert max(abs(e) for e in errors) <= 20.0


# Every run that trained is predicted to fit (issue 33). torchtitan's Llama 3.1 8B on 8 H100 96 GB ran per-op
# selective checkpointing; encoded as Megatron-style selective recomputation it was predicted at 96.2 GiB of 94,
# encoded as it ran (recompute_modules ['op_sac'], graph.ops.OP_SAC_SOURCE) at 59.2 GiB (82.4 / 77.0 GiB reserved).
OP_SAC_RUNS = ("torchtitan2412-llama31-8b-fsdp8-eager", "torchtitan2412-llama31-8b-fsdp8-compile")


def test_every_step_time_case_fits(report):
    """Every measured run, dense and MoE, is predicted to fit in memory."""
    timed = [c for c in report["cases"] if "step_time_s" in c["measured"]]
    # + the project's single-GPU steps (gpu, hf, tiny, tiny host 2) + llmfoundry-mpt, torchtitan-llama3, BLOOM, MaxText
    # + megatron-v1-v100 + mbridge-gb300 + mbridge-dense-more + alps-gh200 + gcp-gpu-recipes + consumer-gpus + dsexamples-hf-v100
    # + mbridge-moe-gb + bigscience-tr11-prequel + MaxText on Google Cloud H200 / B200 and one A3 VM (4)
    # + mbridge-nvfp4 (4) + mbridge-moe-more (14) + mbridge-2604 (32) + mbridge-260201 (32) + mbridge-2608 (8)
    # + mbridge-moe-b300 (4) + mbridge-260601 (8) + mbridge-260401 (34) + mbridge-2606 (21) + newhw-steps (1)
    assert (
        len(timed)
        == (58 + 25 + 15 + 8 + 4 + 20 + 23 + 1 + 1 + 8 + 7 + 14)
        + (2 + 3 + 3 + 3 + 8 + 17 + 4 + 4 + 14)
        + 32
        + (19 + 13)
        + 8
        + 4
        + 8
        + 34
        + 21
        + 1
    )
    for case in timed:
        assert case["predicted"]["fits"], case["name"]


def test_the_op_sac_runs_fit_below_what_they_reserved(report):
    """The two 8B runs that were predicted not to fit: now under capacity, and under the 82.4 / 77.0 GiB the
    table reports reserved (the allocator's reserve is at least what the model keeps)."""
    by_name = {c["name"]: c for c in report["cases"]}
    for name, reserved in zip(OP_SAC_RUNS, (82.4, 77.0)):
        predicted = by_name[name]["predicted"]
        assert predicted["fits"] and predicted["peak_memory_gib"] < reserved, name


def test_summary_matches_cases(report):
    summary = report["summary"]
    step = [
        c["error_pct"]["step_time_s"] for c in report["cases"] if "step_time_s" in c["error_pct"]
    ]
    assert summary["step_time_s_mape_pct"] == pytest.approx(_mape(step))
    assert summary["step_time_s_cases"] == len(step)
    everything = [abs(e) for c in report["cases"] for e in c["error_pct"].values()]
    assert summary["max_abs_error_pct"] == pytest.approx(max(everything))
    assert summary["by_source"]["korthikanti2022"]["step_time_cases"] == 8
    assert summary["by_source"]["nemo-llama31-h100"]["cases"] == 22


def test_dense_blackwell_fp8_step_time(report):
    """Megatron-Bridge 25.09/25.11 dense Llama 3 8B / 3.1 405B fp8 runs on DGX B200 and GB200, the set the
    B200 fp8 GEMM cap is fitted on: within issue 2's bar for a calibration set (today 4.4 %, worst 6.5 %)."""
    errors = [
        c["error_pct"]["step_time_s"]
        for c in report["cases"]
        if c["group"].startswith("mbridge-dense-")
    ]
    assert len(errors) == 6
    assert _mape(errors) <= 8.0
    assert max(abs(e) for e in errors) <= 10.0


def test_moe_step_time(report):
    """Published MoE runs (Megatron-Bridge 25.09/25.11 DeepSeek-V3 and Qwen3 on DGX B200 / H100,
    Megatron-LM Mixtral 8x7B), the calibration set of issue 9: the issue's target MAPE <= 8 %, no
    case over 20 % (today 2.5 %, worst 6.4 %)."""
    cases = [c for c in report["cases"] if c["name"] in MOE_NAMES]
    errors = [c["error_pct"]["step_time_s"] for c in cases]
    assert len(errors) == 10
    assert _mape(errors) <= 8.0
    assert max(abs(e) for e in errors) <= 20.0
