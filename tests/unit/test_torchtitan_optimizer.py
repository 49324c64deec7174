"""torchtitan's optimizer step (issue 33): foreach AdamW with foreach clipping (the December 2024 runs) and fused
AdamW with the same clipping (the profile, torchtitan's later default), bytes per fp32 parameter by hand."""

from __future__ import annotations

import json
from importlib import resources

from paraplan.catalog import load_framework
from paraplan.cost.runtimes import (
    clip_grad_norm_bytes,
    foreach_adamw_clip_bytes,
    fused_adamw_clip_bytes,
)


def test_the_optimizer_bytes_counted_by_hand():
    assert clip_grad_norm_bytes() == 12  # _foreach_norm reads 4; _foreach_mul_ reads 4, writes 4
    assert (
        fused_adamw_clip_bytes() == 40
    )  # one kernel: read p, g, m, v (16), write p, m, v (12); + 12
    # mul_ 8, lerp_ 12, mul_ 8, addcmul_ 16, sqrt 8, div_ 8, add_ 8, addcdiv_ 16 = 84; + 12
    assert foreach_adamw_clip_bytes() == 96


def test_the_profiles_and_the_december_2024_cases_state_them():
    for name in ("torchtitan", "torchtitan-compiled"):
        assert load_framework(name).optimizer_step_bytes == fused_adamw_clip_bytes()
    path = resources.files("paraplan.validate") / "cases" / "torchtitan-llama3.json"
    cases = json.loads(path.read_text())["cases"]
    for case in cases:
        stated = case.get("framework_overrides", {}).get("optimizer_step_bytes")
        if case["name"].startswith("torchtitan2412"):
            assert stated == foreach_adamw_clip_bytes(), case["name"]
        else:
            assert stated is None, case["name"]
