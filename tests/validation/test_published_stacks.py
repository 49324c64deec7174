"""The bundled case files are the published ones (with the documented additions), and the held-out sets of
other stacks: FSDP (LLM Foundry, torchtitan), single-run stacks, BigScience tr11, Megatron v1 on V100,
DeepSpeed examples and consumer GPUs."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from paraplan.catalog import framework_chain
from paraplan.validate.case_files import load_cases
from paraplan.validate.run import run_cases
from tests.validation.published_common import _mape


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
# model fields the bundled copies add with their source appended to the published notes (which they extend,
# never change): DeepSeek-V3's group-limited routing (cost.moe.experts_units_hit)
CITED_MODEL_KEYS = ("router_groups", "router_group_topk")


@pytest.mark.parametrize("stem", ["korthikanti2022", "nemo-llama31-h100", "moe-visible"])
def test_bundled_cases_are_the_published_files(stem):
    """The bundled case files hold the published cases as given — plans, measurements and notes — adding only a
    framework profile, a memory scope and a cross-validation group, model fields with their source appended to
    the notes (CITED_MODEL_KEYS), or naming the recipe profile the case ran
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
            cited = [k for k in CITED_MODEL_KEYS if k in model and k not in case["model"]]
            if cited:
                appended = ours["notes"].removeprefix(case["notes"])
                assert appended != ours["notes"], case["name"]  # the published notes, extended
                assert all(k in appended for k in cited), (case["name"], cited)
                ours["notes"] = case["notes"]
                for key in cited:
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
    case (megatron-lm-v1.0, the blog's baseline as the README's case 1B: hidden 1920, 24 layers) is at -1.9 %,
    the 2019 code's seven cases all too fast (-15.3 to -28.3 %; the 1.2B steps derived as Eq. 3 FLOPs / 39 TFLOPS =
    2.2136 s, the count the team published in 2020-21; the paper states none: case notes) with PyTorch 1.1's
    blocking RNG-state copies (cost.rng_state), its block-per-row softmax, F.linear's separate bias adds, the
    head copies of the [b, s, np, hn] layout and the fp32-copy loss priced (graph.megatron_eager; docs/validation.md,
    megatron-v1-v100; docs/hardware.md, V100). This pins today's state so that a change to it is seen; it is not a
    tolerance we promise."""
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
    assert abs(v1) <= 2.5
    assert all(-29.0 <= e <= -15.0 for e in errors.values()), errors
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


def test_newhw_steps_held_out(report):
    """Published steps on hardware with few cases (newhw-steps): llm.c's PyTorch reference, GPT-2 124M on one
    A100 40GB PCIe (torch.compile, bf16 autocast, vocabulary 50,257 unpadded), held out. Today -7.6 %: the
    LM head at the odd vocabulary runs cost.gemm_alignment's align-1 kernel at the H100's rate per SM per
    clock (docs/model.md); issue 32's bar, 25 %."""
    cases = [c for c in report["cases"] if c["group"] == "llmc2405-a100-40gb"]
    assert len(cases) == 1 and all(
        c["role"] == "held_out" and c["predicted"]["fits"] for c in cases
    )
    assert abs(cases[0]["error_pct"]["step_time_s"]) <= 25.0
