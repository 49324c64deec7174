"""Held-out sets against published step times: Megatron-Bridge performance tables (dense and MoE, H100 to
GB300, NVFP4), Google Cloud's GPU recipes, CSCS Alps GH200 and Narayanan et al. 2021 (arXiv:2104.04473)
Table 2 (GPT-3 175B and 530B, PTD-P against ZeRO-3 on up to 2,240 A100s): no constant is fitted on them."""

from __future__ import annotations

from tests.validation.published_common import CASE_FILES, _mape


def _file_cases(report: dict, stem: str) -> list[dict]:
    """The validation report's cases of one case file (its stem)."""
    return [c for c in report["cases"] if c["name"] in FILE_CASES[stem]]


def _group_errors(cases: list[dict], group: str) -> list[float]:
    """Step-time errors of the cases of one group."""
    return [c["error_pct"]["step_time_s"] for c in cases if c["group"] == group]


def _file_errors(report: dict, stem: str, count: int) -> list[float]:
    cases = _file_cases(report, stem)
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
        "mbridge-260401",
        "mbridge-2606",
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
    GB200's fp8 GEMM fraction 0.525 times the two parts' measured sustained cuBLASLt fp8 rate ratio (1.184, one
    harness on both: catalog gb300-nvl72), its bf16 GEMM and cuDNN attention fractions (0.734, 0.45) times the
    power law's 1.109 (specs.power.power_bound_rate_ratio; the datasheets give both the same dense peaks). Today MAPE
    4.9 %, worst -10.0 % (70B FP8-CS FSDP, 25.11), with the law's 1.109 for fp8 too 6.6 % and +14.4 %, before it
    14.6 % and +24.9 %; the two 405B FP8-CS rows stay 6-9 % slow, where the runs are 1.23-1.25x the GB200 ones
    (docs/model.md, Known limits). Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-gb300", 7)
    assert _mape(errors) <= 5.0 and max(abs(e) for e in errors) <= 10.5
    slow = [
        c
        for c in report["cases"]
        if c["name"] in FILE_CASES["mbridge-gb300"]
        and "405b" in c["name"]
        and c["name"].endswith("-fp8")
    ]
    assert len(slow) == 2 and all(
        c["error_pct"]["step_time_s"] > 0 for c in slow
    )  # FP8-CS 405B: still slow


def test_megatron_bridge_nvfp4_held_out(report):
    """Megatron-Bridge 26.02 NVFP4 Llama 3 70B / 3.1 405B rows on GB200 / GB300 NVL72 (mbridge-nvfp4), held out: no
    constant is fitted on an FP4 run; the FP4 GEMMs run at the datasheet FP4 dense peak (GB200 10, GB300 15 PFLOP/s)
    x the system's gemm_fp8 cap x its fp4_gemm_share (GB300 0.627, Transformer Engine's B300 GEMM kernels; GB200 1),
    the recipe's passes and the per-GEMM scale swizzles as Transformer Engine 2.12 runs them (cost.quantisation,
    cost.compute.scale_swizzle_s). Today the GB200 rows too fast, 70B -19.7 % and 405B -6.6 %, the GB300 rows 70B
    -0.7 % and 405B +8.6 % (its same-layout FP8 row +8.8 %), MAPE 8.9 % (10.5 % with the GB300 fp8 fraction from the
    power law): within issue 33's MAPE bar, not its 25 % one (docs/model.md, Known limits). Pinned so that a change
    is seen."""
    errors = _file_errors(report, "mbridge-nvfp4", 4)
    assert _mape(errors) <= 9.0 and max(abs(e) for e in errors) <= 20.5
    cases = _file_cases(report, "mbridge-nvfp4")
    assert all(c["error_pct"]["step_time_s"] < 0 for c in cases if "gb200" in c["name"])
    assert all(c["error_pct"]["step_time_s"] > 0 for c in cases if "405b-gb300" in c["name"])


def test_megatron_bridge_2604_held_out(report):
    """Megatron-Bridge 26.04 rows (v0.4.0 presets) whose model and GPU the catalog has (mbridge-2604.json), held out.
    Dense (Llama 3 70B / 3.1 405B on GB300 / GB200 / H100): MAPE 6.5 %, worst +14.1 % (405B FP8-CS on GB300; its
    NVFP4 twin +13.5 % with TE #2555's Hadamard cast fusion, +16.0 % without). MoE (DeepSeek-V3, GPT-OSS 120B, Qwen3
    30B / 235B, Kimi-K2): MAPE 15.6 %, worst +36.9 % (Qwen3 235B MXFP8 on 256 GB200), outside issue 33's bar as the
    26.02 GB200 / GB300 MoE rows are (docs/model.md, Known limits). Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-2604", 32)
    cases = _file_cases(report, "mbridge-2604")
    dense = _group_errors(cases, "mbridge2604-dense")
    moe = _group_errors(cases, "mbridge2604-moe")
    assert len(dense) == 13 and len(moe) == 19 and len(errors) == 32
    assert _mape(dense) <= 6.6 and max(abs(e) for e in dense) <= 14.5
    assert _mape(moe) <= 16.0 and max(abs(e) for e in moe) <= 38.0


def test_megatron_bridge_260201_held_out(report):
    """Megatron-Bridge 26.02.01 rows (v0.3.1 presets), held out (mbridge-260201.json). MoE (GPT-OSS B200 / B300 as
    #2915 set them, Qwen3 30B H100 as the v0.3.1 preset, Qwen3 235B B300 as the table's v0.3.0 layout: confidence
    medium where table and recipe disagree): MAPE 14.6 %, worst +36.8 % (Qwen3 235B MXFP8 on 256 GB200), outside
    issue 33's bar as the 26.02 GB200 / GB300 MoE rows are. Dense (Llama 3 70B / 3.1 405B on GB300 / GB200 / H100;
    the 70B GB300 NVFP4 / MXFP8 and 405B GB300 FP8 rows at the preset's layout, 405B GB200 NVFP4 at the table's VP 4,
    confidence medium): MAPE 5.7 %, worst -17.9 % (70B NVFP4 on 64 GB200; 405B FP8-CS on 256 GB300 +12.8 %). Pinned
    so that a change is seen."""
    errors = _file_errors(report, "mbridge-260201", 32)
    cases = _file_cases(report, "mbridge-260201")
    dense = _group_errors(cases, "mbridge260201-dense")
    moe = _group_errors(cases, "mbridge260201-moe")
    assert len(dense) == 13 and len(moe) == 19 and len(errors) == 32
    assert _mape(moe) <= 15.5 and max(abs(e) for e in moe) <= 38.0
    assert _mape(dense) <= 6.0 and max(abs(e) for e in dense) <= 18.5


def test_megatron_bridge_2608_held_out(report):
    """Megatron-Bridge 26.08 rows (v0.6.0 flat perf recipes, src/megatron/bridge/perf_recipes) whose model and GPU
    the catalog has (mbridge-2608.json: DeepSeek-V3, GPT-OSS 120B, Qwen3 30B / 235B in MXFP8 on GB300 / GB200; the
    table has no dense row), held out. The runs are 1.26-1.53x the 26.04 ones of the same layout; the v0.6.0
    presets add full-iteration CUDA graphs, the EP all-to-all overlap, the fused MoE MLP (Transformer Engine op
    fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP: the profile's moe_fused_grouped_mlp) on a static HybridEP receive
    budget (moe_hybridep_budget: no dispatch host synchronisation), fp8 attention and paged stashing. With the
    two profile inputs, fp8 attention's unwindowed backward, the fused MLP's fc1 / fc2 priced as one kernel over
    the local experts (Op.one_kernel, session 18) and the paged stash's copies (moe_paged_stash, session 18):
    MAPE 7.5 %, worst -22.5 % (GPT-OSS 120B on 64 GB200), every row but DeepSeek-V3 on GB300 (+9.8 %) too fast,
    the GPT-OSS rows most (-19.2 / -22.5 %; without the stash 11.1 %, worst -26.8 %, DeepSeek-V3 GB300 +6.6 %;
    -11.8 / -20.8 % with the
    per-expert loop, 13.6 % MAPE and DeepSeek-V3 GB300 +26.7 %; 43.2 %, worst +56.3 %, every row too slow, without
    the two inputs): outside issue 33's bar. Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-2608", 8)
    cases = _file_cases(report, "mbridge-2608")
    assert all(c["group"] == "mbridge2608-moe" for c in cases)
    assert _mape(errors) <= 8.0 and max(abs(e) for e in errors) <= 23.0
    signs = {c["name"]: c["error_pct"]["step_time_s"] > 0 for c in cases}
    assert signs == {name: name == "mbridge2608-deepseekv3-gb300-256-mxfp8" for name in signs}


def test_megatron_bridge_2602_b300_held_out(report):
    """Megatron-Bridge 26.02 MoE rows on DGX B300 (v0.3.0 presets: DeepSeek-V3, GPT-OSS 120B at EP 64, Qwen3 30B /
    235B; mbridge-moe-b300.json), held out: MAPE 19.3 %, DeepSeek-V3 +7.4 %, Qwen3 30B +8.4 %, GPT-OSS 120B -30.6 %
    (its EP 64 all-to-all over the 800 Gb/s ConnectX-8 NICs priced at half the B200 run's, where the run is only 4 %
    faster than the 26.02 B200 one at the same layout), Qwen3 235B -30.6 %: outside issue 33's bar. Pinned so that
    a change is seen."""
    errors = _file_errors(report, "mbridge-moe-b300", 4)
    cases = _file_cases(report, "mbridge-moe-b300")
    assert all(c["group"] == "mbridge-moe-b300" for c in cases)
    assert _mape(errors) <= 20.0 and max(abs(e) for e in errors) <= 31.5


def test_megatron_bridge_260601_held_out(report):
    """Megatron-Bridge 26.06.01 rows (v0.5.1 presets, scripts/performance/configs) whose model and GPU the catalog
    has (mbridge-260601.json: DeepSeek-V3, GPT-OSS 120B, Qwen3 30B / 235B in MXFP8 on GB300 / GB200; the table has no
    dense row), held out. The presets are the 26.08 ones but
    for DeepSeek-V3 GB300's core_attn recompute (Megatron-Core's default module under the recipe's selective
    granularity), with the same two stack inputs (v0.5.1's cutedsl_fused_grouped_mlp: the TE op fuser and
    NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 over Transformer Engine b9d690e04's fused grouped MLP; set_full_iter_cg_configs'
    moe_expert_rank_capacity_factor 1.5: HybridEP's static budget, no dispatch host sync at Megatron-LM 458c8d0ec):
    with the cuDNN-frontend regression the table footnotes as a stack input (cudnn-frontend issue 256: the fused
    grouped MLP's dGLU-dbias backward kernel 8.756x slower, megatron-bridge-26.06.01-mxfp8), fp8 attention's
    unwindowed backward, the fused MLP's fc1 / fc2 priced as one kernel over the local experts and the paged
    stash's copies (session 18): MAPE 11.8 %, worst -36.3 % (GPT-OSS 120B on 64 GB300), DeepSeek-V3 on GB300
    (+15.2 %), Qwen3 235B on GB300 / GB200 (+2.1 / +0.3 %) and Qwen3 30B on GB200 (+0.2 %) too slow, the others too
    fast, the GPT-OSS rows most (-36.3 / -35.7 %; the runs 1.6x slower than 26.08's; without the stash 14.4 %,
    worst -39.3 %, every row but DeepSeek-V3 GB300 too fast). Outside issue 33's bar. Pinned so
    that a change is seen (23.0 %, worst -49.5 %, DeepSeek-V3 / Qwen3 +8.6 .. +32.2 % before session 18; 39.5 /
    62.5 before the two inputs)."""
    errors = _file_errors(report, "mbridge-260601", 8)
    cases = _file_cases(report, "mbridge-260601")
    assert all(c["group"] == "mbridge260601-moe" for c in cases)
    assert _mape(errors) <= 12.5 and max(abs(e) for e in errors) <= 37.0
    slow = ("deepseekv3-gb300", "qwen3-235b-gb300", "qwen3-235b-gb200", "qwen3-30b-gb200")
    assert all((e > 0) == any(k in c["name"] for k in slow) for c, e in zip(cases, errors))


def test_megatron_bridge_260401_held_out(report):
    """Megatron-Bridge 26.04.01 rows (v0.4.2 presets, scripts/performance/configs) whose model and GPU the catalog
    has (mbridge-260401.json: Llama 3 70B / 3.1 405B, DeepSeek-V3, GPT-OSS 120B, Qwen3 30B / 235B, Kimi K2 on GB300,
    GB200, B300, B200 and H100), held out. The presets are the 26.04 ones but for DeepSeek-V3 on B300 (MBS 2, PP 8,
    TE graphs) and B200 (DeepEP, PP 8 x VP 2, EP 32, EP overlap), GPT-OSS 120B on GB200 / B200 (NCCL all-to-all) and
    Qwen3 235B on B300 (HybridEP). Dense MAPE 6.8 %, worst +14.8 % (405B NVFP4 on 256 GB300; 7.2 % and +17.3 %
    without TE #2555's Hadamard cast fusion, 9.3 % and +21.6 % with the GB300 fp8 fraction from the power law); MoE
    MAPE 16.6 %, worst +37.1 % (Qwen3 235B on 256 GB200), as the 26.04 rows of the same layouts: outside issue 33's
    bar. Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-260401", 34)
    cases = _file_cases(report, "mbridge-260401")
    dense = _group_errors(cases, "mbridge260401-dense")
    moe = _group_errors(cases, "mbridge260401-moe")
    assert len(dense) == 14 and len(moe) == 20 and len(errors) == 34
    assert _mape(dense) <= 7.0 and max(abs(e) for e in dense) <= 15.0
    assert _mape(moe) <= 17.0 and max(abs(e) for e in moe) <= 37.5


def test_megatron_bridge_2606_held_out(report):
    """Megatron-Bridge 26.06 pre-training rows (v0.5.0 presets) whose model and GPU the catalog has
    (mbridge-2606.json: Llama 3.1 405B, DeepSeek-V3, GPT-OSS 120B, Qwen3 30B / 235B, Kimi K2), held out. The GB300 /
    GB200 MoE rows run the 26.06.01 stack (full-iteration graphs, fused grouped MLP, HybridEP budget) before the
    cudnn-frontend 1.24.0 regression: the GPT-OSS rows are 1.6x the 26.06.01 ones. Dense MAPE 7.0 % (7.4 % without
    TE #2555's Hadamard cast fusion on the NVFP4 rows), worst +15.4 % (405B FP8 on 256 GB300; 9.6 % and +21.3 % with
    the GB300 fp8 fraction from the power law); MoE MAPE 8.6 %, worst -21.8 % (GPT-OSS 120B on 64 GB200; with
    session 18's fused-MLP one-kernel GEMMs, fp8 attention and the paged stash's copies; 10.5 %, worst -26.1 %
    without the stash): outside issue 33's bar. Pinned so that a change is seen."""
    errors = _file_errors(report, "mbridge-2606", 21)
    cases = _file_cases(report, "mbridge-2606")
    dense = _group_errors(cases, "mbridge2606-dense")
    moe = _group_errors(cases, "mbridge2606-moe")
    assert len(dense) == 7 and len(moe) == 14 and len(errors) == 21
    assert _mape(dense) <= 7.0 and max(abs(e) for e in dense) <= 16.0
    assert _mape(moe) <= 9.0 and max(abs(e) for e in moe) <= 22.5


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
