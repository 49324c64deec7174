"""Predictions against published measurements, with the tolerances we promise.

Korthikanti et al. 2022 (arXiv:2205.05198): Table 5 iteration times and Figure 1 memory on the
first pipeline stage (transformer layers only, see paraplan.validate.run.MEMORY_SCOPE_RULE).
NVIDIA DGX Cloud benchmarking recipes v24.11.1: Llama 3.1 8B / 70B step times on DGX H100.
Narayanan et al. 2021 (arXiv:2104.04473) Table 2: GPT-3 175B and 530B, PTD-P against ZeRO-3 on up to
2,240 A100s — a set no constant is fitted on (held out).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from paraplan.catalog import framework_chain
from paraplan.validate.case_files import SCOPE_STAGE, SCOPE_TRANSFORMER, load_cases
from paraplan.validate.run import run_cases


# (name, file stem) of every bundled case, read once at collection (the sets below are made from it)
CASE_FILES = tuple((c.name, c.file) for c in load_cases())
MOE_NAMES = {name for name, file in CASE_FILES if file == "moe-visible"}


@pytest.fixture(scope="module")
def report() -> dict:
    return run_cases(load_cases())


def _cases(report: dict, marker: str) -> list[dict]:
    found = [c for c in report["cases"] if marker in c["source"]]
    assert found, marker
    return found


def _mape(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)


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
    assert (
        summary["held_out"]["step_time_cases"]
        == (12 + 25 + 15 + 8 + 4 + 20 + 23 + 1 + 1 + 8 + 7 + 14)
        + (2 + 3 + 3 + 3 + 8 + 17 + 4 + 4 + 14)
        + 32
        + (19 + 13)
        + 8
        + 4
        + 8
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
    # + mbridge-moe-b300 (4) + mbridge-260601 (8)
    assert (
        len(timed)
        == (58 + 25 + 15 + 8 + 4 + 20 + 23 + 1 + 1 + 8 + 7 + 14)
        + (2 + 3 + 3 + 3 + 8 + 17 + 4 + 4 + 14)
        + 32
        + (19 + 13)
        + 8
        + 4
        + 8
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


def _file_errors(report: dict, stem: str, count: int) -> list[float]:
    cases = [c for c in report["cases"] if c["name"] in FILE_CASES[stem]]
    assert len(cases) == count and all(c["role"] == "held_out" for c in cases), stem
    return [c["error_pct"]["step_time_s"] for c in cases]


FILE_CASES = {
    stem: {name for name, file in CASE_FILES if file == stem}
    for stem in (
        "mbridge-gb300",
        "mbridge-dense-more",
        "alps-gh200",
        "gcp-gpu-recipes",
        "mbridge-nvfp4",
        "mbridge-2604",
        "mbridge-260201",
        "mbridge-2608",
        "mbridge-moe-b300",
        "mbridge-260601",
    )
}


def test_megatron_bridge_dense_more_held_out(report):
    """Megatron-Bridge 25.09 / 25.11 / 26.02 dense Llama 3 70B / 3.1 405B rows on GB200 NVL72 and DGX H100 that no
    constant is fitted on (mbridge-dense-more), held out: within issue 33's bar (MAPE <= 10 %, no case over 25 %);
    today MAPE 5.2 %, worst -9.4 % (70B MXFP8 on 64 GB200). The pinned 6 / 12 % make a change to it seen."""
    errors = _file_errors(report, "mbridge-dense-more", 14)
    assert _mape(errors) <= 6.0 and max(abs(e) for e in errors) <= 12.0


def test_megatron_bridge_gb300_held_out(report):
    """Megatron-Bridge 25.11 / 26.02 dense rows on GB300 NVL72 (mbridge-gb300), held out. The GB300 takes the
    GB200's fractions (fp8 GEMM 0.525, bf16 GEMM 0.734, cuDNN attention 0.45) times the sustained-rate ratio of the
    two parts at their rated power under a full tensor load, specs.power.power_bound_rate_ratio (160 SMs at 1,400 W
    against 148 at 1,200 W: 1.109; the datasheets give both the same dense peaks). Today MAPE 6.6 %, worst +14.4 %
    (405B FP8-CS, 26.02), before it 14.6 % and +24.9 %; the two 405B FP8-CS rows stay 12-14 % slow, where the runs
    are 1.19-1.25x the GB200 ones of the same release and the rate law gives 1.11 (docs/model.md, Known limits).
    Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-gb300", 7)
    assert _mape(errors) <= 7.0 and max(abs(e) for e in errors) <= 15.0
    slow = [
        c
        for c in report["cases"]
        if c["name"] in FILE_CASES["mbridge-gb300"] and "405b" in c["name"]
    ]
    assert all(c["error_pct"]["step_time_s"] > 0 for c in slow)  # the 405B runs still too slow


def test_megatron_bridge_nvfp4_held_out(report):
    """Megatron-Bridge 26.02 NVFP4 Llama 3 70B / 3.1 405B rows on GB200 / GB300 NVL72 (mbridge-nvfp4), held out: no
    constant is fitted on an FP4 run; the FP4 GEMMs run at the datasheet FP4 dense peak (GB200 10, GB300 15 PFLOP/s)
    x the system's gemm_fp8 cap x its fp4_gemm_share (GB300 0.627, Transformer Engine's B300 GEMM kernels; GB200 1),
    the recipe's passes and the per-GEMM scale swizzles as Transformer Engine 2.12 runs them (cost.quantisation,
    cost.compute.scale_swizzle_s). Today the GB200 rows too fast, 70B -19.7 % and 405B -6.6 %, the GB300 rows too
    slow, 70B +3.0 % and 405B +12.6 % (its same-layout FP8 row +14.4 %), MAPE 10.5 %: outside issue 33's bar
    (docs/model.md, Known limits). Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-nvfp4", 4)
    assert _mape(errors) <= 11.0 and max(abs(e) for e in errors) <= 20.5
    cases = [c for c in report["cases"] if c["name"] in FILE_CASES["mbridge-nvfp4"]]
    assert all((c["error_pct"]["step_time_s"] > 0) == ("gb300" in c["name"]) for c in cases)


def test_megatron_bridge_2604_held_out(report):
    """Megatron-Bridge 26.04 rows (v0.4.0 presets) whose model and GPU the catalog has (mbridge-2604.json), held out.
    Dense (Llama 3 70B / 3.1 405B on GB300 / GB200 / H100): MAPE 8.6 %, worst +20.3 % (405B NVFP4 on GB300; its
    FP8-CS twin +20.0 %). MoE (DeepSeek-V3, GPT-OSS 120B, Qwen3 30B / 235B, Kimi-K2): MAPE 15.8 %, worst +36.9 %
    (Qwen3 235B MXFP8 on 256 GB200), outside issue 33's bar as the 26.02 GB200 / GB300 MoE rows are (docs/model.md,
    Known limits). Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-2604", 32)
    cases = [c for c in report["cases"] if c["name"] in FILE_CASES["mbridge-2604"]]
    dense = [c["error_pct"]["step_time_s"] for c in cases if c["group"] == "mbridge2604-dense"]
    moe = [c["error_pct"]["step_time_s"] for c in cases if c["group"] == "mbridge2604-moe"]
    assert len(dense) == 13 and len(moe) == 19 and len(errors) == 32
    assert _mape(dense) <= 9.0 and max(abs(e) for e in dense) <= 21.0
    assert _mape(moe) <= 16.0 and max(abs(e) for e in moe) <= 38.0


def test_megatron_bridge_260201_held_out(report):
    """Megatron-Bridge 26.02.01 rows (v0.3.1 presets), held out (mbridge-260201.json). MoE (GPT-OSS B200 / B300 as
    #2915 set them, Qwen3 30B H100 as the v0.3.1 preset, Qwen3 235B B300 as the table's v0.3.0 layout: confidence
    medium where table and recipe disagree): MAPE 14.8 %, worst +36.8 % (Qwen3 235B MXFP8 on 256 GB200), outside
    issue 33's bar as the 26.02 GB200 / GB300 MoE rows are. Dense (Llama 3 70B / 3.1 405B on GB300 / GB200 / H100;
    the 70B GB300 NVFP4 / MXFP8 and 405B GB300 FP8 rows at the preset's layout, 405B GB200 NVFP4 at the table's VP 4,
    confidence medium): MAPE 7.9 %, worst +18.6 % (405B FP8-CS on 256 GB300). Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-260201", 32)
    cases = [c for c in report["cases"] if c["name"] in FILE_CASES["mbridge-260201"]]
    dense = [c["error_pct"]["step_time_s"] for c in cases if c["group"] == "mbridge260201-dense"]
    moe = [c["error_pct"]["step_time_s"] for c in cases if c["group"] == "mbridge260201-moe"]
    assert len(dense) == 13 and len(moe) == 19 and len(errors) == 32
    assert _mape(moe) <= 15.5 and max(abs(e) for e in moe) <= 38.0
    assert _mape(dense) <= 8.5 and max(abs(e) for e in dense) <= 19.5


def test_megatron_bridge_2608_held_out(report):
    """Megatron-Bridge 26.08 rows (v0.6.0 flat perf recipes, src/megatron/bridge/perf_recipes) whose model and GPU
    the catalog has (mbridge-2608.json: DeepSeek-V3, GPT-OSS 120B, Qwen3 30B / 235B in MXFP8 on GB300 / GB200; the
    table has no dense row), held out. The runs are 1.26-1.53x the 26.04 ones of the same layout; the v0.6.0
    presets add full-iteration CUDA graphs, the EP all-to-all overlap, the fused MoE MLP (Transformer Engine op
    fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP: the profile's moe_fused_grouped_mlp) on a static HybridEP receive
    budget (moe_hybridep_budget: no dispatch host synchronisation), fp8 attention and paged stashing. With the
    two profile inputs: MAPE 14.0 %, worst +28.3 % (DeepSeek-V3 on 256 GB300), the GPT-OSS rows too fast (-11.1,
    -20.8 %), the others too slow (was 43.2 %, worst +56.3 %, every row too slow, without them): outside issue
    33's bar. Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-2608", 8)
    cases = [c for c in report["cases"] if c["name"] in FILE_CASES["mbridge-2608"]]
    assert all(c["group"] == "mbridge2608-moe" for c in cases)
    assert _mape(errors) <= 14.0 and max(abs(e) for e in errors) <= 28.5
    signs = {c["name"]: c["error_pct"]["step_time_s"] > 0 for c in cases}
    assert signs == {
        name: "gptoss" not in name for name in signs
    }  # GPT-OSS too fast, the rest too slow


def test_megatron_bridge_2602_b300_held_out(report):
    """Megatron-Bridge 26.02 MoE rows on DGX B300 (v0.3.0 presets: DeepSeek-V3, GPT-OSS 120B at EP 64, Qwen3 30B /
    235B; mbridge-moe-b300.json), held out: MAPE 19.3 %, DeepSeek-V3 +7.4 %, Qwen3 30B +8.4 %, GPT-OSS 120B -30.6 %
    (its EP 64 all-to-all over the 800 Gb/s ConnectX-8 NICs priced at half the B200 run's, where the run is only 4 %
    faster than the 26.02 B200 one at the same layout), Qwen3 235B -30.6 %: outside issue 33's bar. Pinned so that
    a change is seen."""
    errors = _file_errors(report, "mbridge-moe-b300", 4)
    cases = [c for c in report["cases"] if c["name"] in FILE_CASES["mbridge-moe-b300"]]
    assert all(c["group"] == "mbridge-moe-b300" for c in cases)
    assert _mape(errors) <= 20.0 and max(abs(e) for e in errors) <= 31.5


def test_megatron_bridge_260601_held_out(report):
    """Megatron-Bridge 26.06.01 rows (v0.5.1 presets, scripts/performance/configs) whose model and GPU the catalog
    has (mbridge-260601.json: DeepSeek-V3, GPT-OSS 120B, Qwen3 30B / 235B in MXFP8 on GB300 / GB200; the table has no
    dense row), held out: MAPE 23.4 %, worst -49.5 % (GPT-OSS 120B on 64 GB200). The presets are the 26.08 ones but
    for DeepSeek-V3 GB300's core_attn recompute (Megatron-Core's default module under the recipe's selective
    granularity), with the same two stack inputs (v0.5.1's cutedsl_fused_grouped_mlp: the TE op fuser and
    NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 over Transformer Engine b9d690e04's fused grouped MLP; set_full_iter_cg_configs'
    moe_expert_rank_capacity_factor 1.5: HybridEP's static budget, no dispatch host sync at Megatron-LM 458c8d0ec):
    the DeepSeek-V3 and Qwen3 rows +8.9 .. +33.8 % (full-iteration CUDA graphs, fp8 attention and paged stashing the
    model lacks), the GPT-OSS rows predicted too fast (-45.4 / -49.5 %), the runs 1.6x slower than 26.08's under the
    cuDNN-frontend regression the table footnotes (cudnn-frontend issue 256: the fused grouped MLP's dGLU-dbias
    backward kernel about 10x slower). Outside issue 33's bar. Pinned so that a change is seen (was 39.5 / 62.5
    before the two inputs)."""
    errors = _file_errors(report, "mbridge-260601", 8)
    cases = [c for c in report["cases"] if c["name"] in FILE_CASES["mbridge-260601"]]
    assert all(c["group"] == "mbridge260601-moe" for c in cases)
    assert _mape(errors) <= 24.0 and max(abs(e) for e in errors) <= 50.0
    assert all((e > 0) == ("gptoss" not in c["name"]) for c, e in zip(cases, errors))


def test_gcp_gpu_recipes_held_out(report):
    """NeMo Llama 3.1 70B / 405B fp8 steps on Google Cloud A3 Ultra (H200) and A4 (B200) from the gpu-recipes READMEs'
    logged steps (gcp-gpu-recipes), held out: within issue 33's bar; today -9.4, -2.5 and -8.7 %, all too fast. The
    pinned 8 / 12 % make a change to it seen."""
    errors = _file_errors(report, "gcp-gpu-recipes", 3)
    assert _mape(errors) <= 8.0 and max(abs(e) for e in errors) <= 12.0
    assert all(e < 0 for e in errors)


def test_alps_gh200_held_out(report):
    """Megatron-LM Llama 3 8B runs on 256 CSCS Alps GH200 (swiss-ai/Megatron-LM pull request #33; alps-gh200), held
    out, on the catalog's alps-gh200: each GH200 module capped at 660 W by CSCS, the GPU's share 410 W (the Grace
    CPU's rated 250 W taken out), and TP 2 on one pair of the node's NVLink mesh (docs/hardware.md, "GH200 on
    Alps"). Within issue 33's bar, today -8.0 and -7.4 %, both too fast; before the cap and the mesh -27.6 and
    -21.1 %. The pinned 10 % makes a change to it seen."""
    errors = _file_errors(report, "alps-gh200", 2)
    assert _mape(errors) <= 10.0 and all(-10.0 <= e < 0 for e in errors), errors


def test_narayanan2021_held_out(report):
    """Narayanan et al. 2021 Table 2, held out (no constant fitted on it). PTD-P (Megatron-LM, t 8) is
    within 9 % (today -0.3 to -7.0 %). ZeRO-3 without model parallelism, run as DeepSpeed ran it in April 2021
    (profile deepspeed-2021: per-tensor gathers and reduce-scatters, recomputed layers gathered again, the Python
    loops over the ranks), is within 20 % (today -18.0 to +4.9 %), the 530B runs still too fast
    (docs/model.md, "Known limits"). This test pins today's state so that a change to it is seen; it is not a
    tolerance we promise."""
    cases = [c for c in report["cases"] if c["name"].startswith("narayanan2021-")]
    assert len(cases) == 12 and all(c["role"] == "held_out" for c in cases)
    ptdp = [c["error_pct"]["step_time_s"] for c in cases if "-ptdp-" in c["name"]]
    assert max(abs(e) for e in ptdp) <= 10.0
    zero3 = {c["name"]: c["error_pct"]["step_time_s"] for c in cases if "-zero3-" in c["name"]}
    assert max(abs(e) for e in zero3.values()) <= 20.0
    assert all(
        e < 0 for name, e in zero3.items() if "-530b-" in name
    )  # optimistic (docs/model.md, Known limits)


REFERENCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "published"
ADDED_KEYS = (
    "framework",
    "framework_overrides",
    "gpus_per_domain_used",
    "scope",
    "group",
)  # what the bundled copies add to a published case (documented per file; framework_overrides: docs/model.md)
# model fields the bundled copies add where the case's own notes state the feature (as the recipe ran)
ADDED_MODEL_KEYS = {
    "qk_norm": "qk-layernorm",
    "router_balancing": "--moe-router-load-balancing-type aux_loss",  # the router as the recipe trained it
}


@pytest.mark.parametrize("stem", ["korthikanti2022", "nemo-llama31-h100", "moe-visible"])
def test_bundled_cases_are_the_published_files(stem):
    """The bundled case files hold the published cases as given — plans, measurements and notes — adding only a
    framework profile, a memory scope and a cross-validation group, or naming the recipe profile the case ran
    under in place of the stack profile it refines (its ``base``); a plan is never restated to suit the model
    (skipped where the reference files are not beside the repository, as on a clean CI machine)."""
    path = REFERENCE / f"{stem}.json"
    if not path.exists():
        pytest.skip("the shared reference files are not beside this checkout")
    published = json.loads(path.read_text())["cases"]
    bundled = {
        c["name"]: c
        for c in json.loads(
            (resources.files("paraplan.validate") / "cases" / f"{stem}.json").read_text()
        )["cases"]
    }
    assert [c["name"] for c in published] == list(bundled)
    for case in published:
        ours = {k: v for k, v in bundled[case["name"]].items() if k in case or k not in ADDED_KEYS}
        if ours.get("framework") != case.get("framework") and "framework" in case:
            # a recipe profile (issue 33) may stand in for the published stack profile it refines
            assert case["framework"] in framework_chain(ours["framework"])[1:], case["name"]
            ours["framework"] = case["framework"]
        if isinstance(ours.get("model"), dict):
            model = dict(ours["model"])
            for key, stated in ADDED_MODEL_KEYS.items():
                if key in model and key not in case["model"]:
                    assert stated in case["notes"], (case["name"], key)
                    del model[key]
            ours["model"] = model
        assert ours == case, case["name"]


def test_published_moe_file_validates_as_given():
    """`paraplan validate --cases` on the MoE issue's own file (interleaved splits given as first / last stage
    counts that do not cut into equal chunks, as the Megatron-Bridge layouts run them): every case scored, MAPE
    <= 8 %, no case over 20 % (issue 9)."""
    path = REFERENCE / "moe-visible.json"
    if not path.exists():
        pytest.skip("the shared reference files are not beside this checkout")
    report = run_cases(load_cases([path]))
    assert all(c["status"] == "ok" for c in report["cases"]), [
        c.get("reason") for c in report["cases"]
    ]
    errors = [c["error_pct"]["step_time_s"] for c in report["cases"]]
    assert len(errors) == 10 and _mape(errors) <= 8.0 and max(abs(e) for e in errors) <= 20.0


FSDP_SETS = {"llmfoundry-mpt": ("llmfoundry-", 20), "torchtitan-llama3": ("torchtitan", 23)}


def _set_errors(report: dict, stem: str) -> list[float]:
    prefix, count = FSDP_SETS[stem]
    cases = [c for c in report["cases"] if c["name"].startswith(prefix)]
    assert len(cases) == count and all(c["role"] == "held_out" for c in cases), stem
    return [c["error_pct"]["step_time_s"] for c in cases]


@pytest.mark.parametrize(
    ("stem", "max_mape", "max_abs"),
    [("torchtitan-llama3", 8.0, 22.0)],
)
def test_fsdp_stack_sets_held_out(report, stem, max_mape, max_abs):
    """The FSDP-stack sets (issue 33), held out: no constant is fitted on them. Today torchtitan-llama3 is at
    MAPE 6.95 %, worst -20.1 % (8B at 262,144 tokens), 17 of 23 too fast (7.48 % and 18 before the complex
    rotary's Inductor fallback was priced under compile, torchtitan-compiled module_impl; 9.25 % before
    torchtitan's eager RMSNorm and rotary composites, DTensor's TP layout copies and float8 all-gathers and
    its AdamW steps were priced; 19 too fast before hidden collectives were priced by the SMs and HBM their NCCL kernels hold,
    cost.comm_contention; 16 of 23 since AsyncTP is priced as torch's symmetric-memory decomposition, cost.async_tp,
    where the userbuffers overlap had over-hidden it and the 405B at 32,768 tokens moved -0.24 -> +0.29 %;
    6.04 % at session 13's start; the all-gather matmul's shard copy priced by cost.compute.memory_time_s, with
    its kernel overhead, added 1.92 ms to each 70B AsyncTP step and 4.39-5.72 ms to each 405B step: the 405B
    at 32,768 tokens +0.29 -> +0.30 %, the set's MAPE 6.039 -> 6.038 %, still 16 too fast; 15 since torch's ring
    prices its per-step flash-backward calls, graph.cp_ring_torch.torch_ring_merge_bytes, the 405B at
    262,144 tokens -0.21 -> +0.09 % (the set 5.907 -> 5.890 %); docs/validation.md, section
    torchtitan-llama3). This pins today's state so that a change to it is seen; it is not a tolerance we
    promise."""
    errors = _set_errors(report, stem)
    assert _mape(errors) <= max_mape
    assert max(abs(e) for e in errors) <= max_abs
    assert sum(e < 0 for e in errors) >= 15  # mostly too fast, as issue 33 measured


@pytest.mark.parametrize("stem", ["llmfoundry-mpt", "torchtitan-llama3"])
def test_fsdp_stack_sets_meet_the_issue_33_bar(report, stem):
    """Issue 33: MAPE <= 10 % on each held-out set and no case off by more than 25 %. llmfoundry-mpt, encoded
    as its recipes ran (attn_impl triton: cost.attention triton_flash; Composer's fp32 reduce where the install
    had it), is at MAPE 6.3 %, worst +17.3 % (MPT-7B at 65,536 tokens); torchtitan-llama3 at 6.95 %, worst
    -20.1 % (docs/validation.md)."""
    errors = _set_errors(report, stem)
    assert _mape(errors) <= 10.0 and max(abs(e) for e in errors) <= 25.0


@pytest.mark.parametrize(
    "name",
    ["bloom176b-megatron-deepspeed-a100-384", "jaxtoolbox-maxtext-llama2-7b-h100-8-bf16"],
)
def test_single_run_stacks_held_out(report, name):
    """BLOOM-176B on DeepSpeed's pipeline engine (Megatron-DeepSpeed, 384 A100 80 GB on Jean Zay, synchronous kernel
    launches as the run's CUDA_LAUNCH_BLOCKING=1 made them), today -6.3 %, and
    MaxText's Llama 2 7B on 8 H100 (NVIDIA JAX-Toolbox), today -9.6 %: held out, both too fast, as issue 33
    measured for these stacks. Pins today's state; not a promised tolerance."""
    (case,) = [c for c in report["cases"] if c["name"] == name]
    assert case["role"] == "held_out" and case["predicted"]["fits"]
    assert -15.0 <= case["error_pct"]["step_time_s"] < 0.0


def test_bigscience_tr11_prequel_held_out(report):
    """BigScience's tr11 topology benchmarks of 2022-02-28 (bigscience-tr11-prequel: 17 runs of the BLOOM recipe on 384
    A100 80 GB, DeepSpeed's pipeline engine, TP 4/8, PP 6/12, micro-batch 2/4, 70-106 layers): held out, all fit, every
    one predicted too fast, today MAPE 8.13 %, worst -19.1 % (104 heads; TP 8 with micro-batch 2 at -18.0 and -14.5 %,
    the other rows -3.4 to -9.1 %). Pins today's state so that a change to it is seen; not a promised tolerance."""
    cases = [c for c in report["cases"] if c["group"] == "bigscience-tr11-prequel"]
    assert len(cases) == 17 and all(c["role"] == "held_out" for c in cases)
    errors = [c["error_pct"]["step_time_s"] for c in cases]
    assert all(c["predicted"]["fits"] for c in cases)
    assert all(-25.0 <= e < 0.0 for e in errors) and _mape(errors) <= 10.0


def test_megatron_v1_v100_held_out(report):
    """Megatron-LM as Shoeybi et al. 2019 ran it on DGX-2H V100s (megatron-v1-v100: the paper's Table 2 epoch
    times, its 39-TFLOPS baseline and Table 8 strong scaling, and the ADLR v1.0 blog's 1288 ms), held out: no
    constant is fitted on it. GEMMs from DeepBench's V100 kernel table (catalog/kernels/v100-sxm2-deepbench),
    each release's score kernels as its code runs them (graph.eager_modules.megatron_scores): the v1.0 release's
    case (megatron-lm-v1.0, the blog's baseline as the README's case 1B: hidden 1920, 24 layers) is at -9.3 %,
    the 2019 code's seven cases all too fast (-21.4 to -32.1 %; the 1.2B steps derived as Eq. 3 FLOPs / 39 TFLOPS =
    2.2136 s, the count the team published in 2020-21; the paper states none: case notes) with PyTorch 1.1's
    blocking RNG-state copies (cost.rng_state) and its block-per-row softmax priced (docs/validation.md,
    megatron-v1-v100; docs/hardware.md, V100). This pins today's state so that a change to it is seen; it is not a tolerance we promise."""
    cases = {
        c["name"]: c
        for c in report["cases"]
        if c["group"].startswith(("shoeybi2019", "megatronv1"))
    }
    assert len(cases) == 8 and all(
        c["role"] == "held_out" and c["predicted"]["fits"] for c in cases.values()
    )
    errors = {name: c["error_pct"]["step_time_s"] for name, c in cases.items()}
    v1 = errors.pop("megatronv1-blog-1.2b-1gpu")
    assert abs(v1) <= 10.0
    assert all(-40.0 <= e <= -10.0 for e in errors.values()), errors
    # the predicted speed-up of the 1.2B model by tensor parallelism grows faster than Table 8's 1.64 / 2.34 / 2.98
    baseline = cases["shoeybi2019-baseline-1.2b-1gpu"]["predicted"]["step_time_s"]
    for tp, measured in ((2, 1.64), (4, 2.34), (8, 2.98)):
        predicted = baseline / cases[f"shoeybi2019-tab8-1.2b-tp{tp}"]["predicted"]["step_time_s"]
        assert measured < predicted < 1.5 * measured, (tp, predicted)


def test_dsexamples_hf_v100_held_out(report):
    """Vanilla Hugging Face GPT-2 training (transformers 4.12, PyTorch DDP, fp16 AMP) on one node of 16 V100s, as
    DeepSpeedExamples' autotuning READMEs publish it (dsexamples-hf-v100: GPT2 at micro-batch 8, GPT2-medium at 2,
    GPT2-large at 1), held out: no constant is fitted on it. Encoded as the 2021 stack ran (unfused GPT-2 attention
    with its fp32-promoted score chain, module_impl scores transformers-gpt2-4.12-amp; transformers' own
    multi-kernel AdamW, DDP's bucket copies and zero-filled gradients: optimizer_step_bytes 130). Today GPT2 is at
    +7.5 %, GPT2-medium at -24.2 % and GPT2-large at -27.1 %: the smaller the micro-batch, the further too fast
    (docs/validation.md, dsexamples-hf-v100). This pins today's state so that a change to it is seen; it is not a tolerance we promise."""
    cases = {c["name"]: c for c in report["cases"] if c["group"] == "dsexamples-hf-v100"}
    assert len(cases) == 3 and all(
        c["role"] == "held_out" and c["predicted"]["fits"] for c in cases.values()
    )
    errors = {name: c["error_pct"]["step_time_s"] for name, c in cases.items()}
    assert abs(errors["dsex-autotuning-hf-gpt2-ddp16-mb8"]) <= 10.0
    assert -45.0 <= errors["dsex-autotuning-hf-gpt2-medium-ddp16-mb2"] <= -20.0
    assert -50.0 <= errors["dsex-autotuning-hf-gpt2-large-ddp16-mb1"] <= -25.0
    # the run at the smallest micro-batch is the furthest too fast
    assert (
        errors["dsex-autotuning-hf-gpt2-large-ddp16-mb1"]
        < errors["dsex-autotuning-hf-gpt2-medium-ddp16-mb2"]
    )


def test_consumer_gpus_held_out(report):
    """Published training steps on GeForce RTX 4090s (consumer-gpus: llm.c's PyTorch GPT-2 trainer and its
    rotary / ReLU^2 variant under DDP on two, nanoGPT on one; torch.compile, bf16), held out: issue 32's bar,
    MAPE <= 10 %, no case over 25 % (today +6.0, -8.2 and +7.8 %: the loss is priced as fp32 logits whether the
    stack upcasts inside a fused kernel or materialises them, docs/validation.md)."""
    cases = [c for c in report["cases"] if c["group"] in ("romero2501-4090", "nanogpt2303-4090")]
    errors = [c["error_pct"]["step_time_s"] for c in cases]
    assert len(errors) == 3 and all(c["role"] == "held_out" for c in cases)
    assert _mape(errors) <= 10.0
    assert max(abs(e) for e in errors) <= 25.0
