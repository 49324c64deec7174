"""FlashAttention-3 runs on Hopper only (issue 33): elsewhere the kernel a stack runs in its place is priced
(cost.attention.KERNEL_FALLBACK), and the estimate reports it."""

from __future__ import annotations

import json

import pytest

from paraplan.catalog import load_framework, load_model, load_system, system_names
from paraplan.cost.attention import effective_kernel, kernel_fallback
from paraplan.cost.frameworks import framework_system
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

FA3_PROFILE = {"name": "megatron-core-fa3", "base": "megatron-core", "attention_kernel": "fa3"}


def test_fa3_runs_on_hopper_only_in_every_catalog_architecture():
    """FA3 README: 'Requirements: H100 / H800 GPU'; Transformer Engine drops it for compute capability != sm90."""
    architectures = {load_system(n).accelerator.architecture for n in system_names()} - {None}
    assert {"hopper", "blackwell", "blackwell-rtx"} <= architectures
    for arch in architectures:
        assert (effective_kernel("fa3", arch) == "fa3") == (arch == "hopper"), arch


def test_after_hopper_fa3_falls_back_to_what_the_stack_runs():
    # data-centre Blackwell and Rubin: Transformer Engine prefers FusedAttention (cuDNN) on sm90+
    assert kernel_fallback("fa3", "blackwell") == "cudnn"
    assert kernel_fallback("fa3", "rubin") == "cudnn"
    # RTX Blackwell (sm120) and AMD CDNA: FlashAttention-2, as their catalog entries price it
    assert kernel_fallback("fa3", "blackwell-rtx") == "fa2"
    assert kernel_fallback("fa3", "cdna3") == kernel_fallback("fa3", "cdna4") == "fa2"
    assert kernel_fallback("fa3", "hopper") is None
    assert kernel_fallback("cudnn", "blackwell") is None


def _plan() -> PlanSpec:
    return PlanSpec(gpus=8, global_batch=8, seq_length=4096, micro_batch=1)


def test_an_fa3_profile_on_b200_prices_cudnn_and_on_h100_prices_fa3():
    """On B200 the fa3 profile's system is the cudnn profile's (same fraction, kernel cudnn), so the step is the
    same; on H100 FA3 runs and is faster than cuDNN (672 vs 627 TFLOP/s plateaus, FA3 paper Fig. 5)."""
    model = load_model("llama3-8b")
    fa3, cudnn = load_framework(FA3_PROFILE), load_framework("megatron-core")
    b200 = load_system("dgx-b200")
    as_fa3, as_cudnn = framework_system(fa3, b200), framework_system(cudnn, b200)
    assert as_fa3.accelerator.efficiency.attention_kernel == "cudnn"
    assert as_fa3.accelerator.efficiency.attention == as_cudnn.accelerator.efficiency.attention
    assert (
        estimate(model, as_fa3, _plan()).step_time_s
        == estimate(model, as_cudnn, _plan()).step_time_s
    )
    h100 = load_system("dgx-h100-80gb")
    h_fa3, h_cudnn = framework_system(fa3, h100), framework_system(cudnn, h100)
    assert h_fa3.accelerator.efficiency.attention_kernel == "fa3"
    assert h_fa3.accelerator.efficiency.attention > h_cudnn.accelerator.efficiency.attention
    assert (
        estimate(model, h_fa3, _plan()).step_time_s < estimate(model, h_cudnn, _plan()).step_time_s
    )


def _cli(capsys, *argv: str) -> tuple[int, str]:
    from paraplan.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code or 0, out + err


ESTIMATE = "estimate -m llama3-8b --gpus 8 --global-batch 8 --seq-length 4096".split()


def test_estimate_reports_the_kernel_priced_in_place_of_fa3(capsys, tmp_path):
    profile = tmp_path / "fa3.json"
    profile.write_text(json.dumps(FA3_PROFILE))
    code, text = _cli(capsys, *ESTIMATE, "-s", "dgx-b200", "--framework", str(profile))
    assert code == 0
    assert "attention kernel: fa3 asked, priced as cudnn on blackwell" in text
    code, text = _cli(capsys, *ESTIMATE, "-s", "dgx-b200", "--framework", str(profile), "--json")
    assert json.loads(text)["attention_kernel"] == {
        "asked": "fa3",
        "priced": "cudnn",
        "architecture": "blackwell",
    }
    # where the asked kernel runs (H100), or attention is unfused, nothing is reported
    code, text = _cli(
        capsys, *ESTIMATE, "-s", "dgx-h100-80gb", "--framework", str(profile), "--json"
    )
    assert "attention_kernel" not in json.loads(text)
    code, text = _cli(
        capsys, *ESTIMATE, "-s", "dgx-b200", "--framework", str(profile), "--attention", "unfused"
    )
    assert code in (0, 1) and "attention kernel:" not in text  # fits or not, nothing to report
