"""How far calibration can take the AMP trials: the step-time MAPE of AMP's two clusters over a grid of the
constants fitted on them (validate.fitted: t4.gemm, t4.hbm, deepspeed.host_layer_forward_s), once with the
V100 GEMM cap as shipped and once with both GPUs' GEMM caps taken from component data, AMP's own profile of the
LM-head GEMM (DachengLi1/AMP @ 72eeea4, src/known_cost/gpt2_{P3,G4}_{1,2,4}.npy entry 28, measured at
micro-batch 1 and tp 1/2/4: 35.6-44.5 TFLOPS on the T4, 39.7-44.5 on the V100; cost.compute.gemm_benchmark_cap
turns them into caps of 0.57-0.73 and 0.38). Evidence for docs/heterogeneous.md "Where the error is left": no
point of either grid takes the mixed cluster under 10 %.

    python benchmarks/amp_constants_landscape.py [--markdown]     (~2 minutes)
"""

from __future__ import annotations

import itertools
import sys

from _table import print_table

from paraplan.validate.cv import hetero_step_error
from paraplan.validate.fitted import FITTED_CONSTANTS, FittedConstant
from paraplan.validate.hetero import load_hetero_cases

BY_NAME = {c.name: c for c in FITTED_CONSTANTS}
T4_GEMM, T4_HBM, HOST = (
    BY_NAME["t4.gemm"],
    BY_NAME["t4.hbm"],
    BY_NAME["deepspeed.host_layer_forward_s"],
)
# the V100 GEMM cap is not fitted (docs/heterogeneous.md); this grid moves it to the profile's value
V100_GEMM = FittedConstant(
    "v100.gemm", ("aws-p3.8xlarge",), ("accelerator", "efficiency", "gemm"), (0.1, 1.0), ()
)

GRIDS = {
    "shipped V100 cap (0.80)": dict(
        v100=[0.80],
        gemm=[0.27, 0.4, 0.55],
        hbm=[0.3, 0.4, 0.5, 0.6, 0.8],
        host=[0.5e-3, 1e-3, 1.5e-3, 2e-3, 3e-3],
    ),
    "profiled GEMM caps (V100 0.38)": dict(
        v100=[0.38],
        gemm=[0.57, 0.67],
        hbm=[0.25, 0.3, 0.35, 0.45],
        host=[0.6e-3, 0.8e-3, 1e-3, 1.2e-3, 1.5e-3],
    ),
}


def mapes(cases, values) -> dict[str, float]:
    errors: dict[str, list[float]] = {}
    for case in cases:
        errors.setdefault(case.group, []).append(abs(hetero_step_error(case, values)))
    return {g: sum(v) / len(v) for g, v in errors.items()}


def main() -> None:
    markdown = "--markdown" in sys.argv
    cases = [c for c in load_hetero_cases() if c.measured]
    rows = []
    for label, grid in GRIDS.items():
        points = []
        for v100, gemm, hbm, host in itertools.product(
            grid["v100"], grid["gemm"], grid["hbm"], grid["host"]
        ):
            values = {V100_GEMM: v100, T4_GEMM: gemm, T4_HBM: hbm, HOST: host}
            points.append(((v100, gemm, hbm, host), mapes(cases, values)))
        for goal, key in (
            ("least amp-mixed", lambda p: p[1]["amp-mixed"]),
            ("least amp-t4", lambda p: p[1]["amp-t4"]),
            ("least sum", lambda p: p[1]["amp-mixed"] + p[1]["amp-t4"]),
        ):
            (v100, gemm, hbm, host), m = min(points, key=key)
            rows.append(
                (
                    label,
                    str(len(points)),
                    goal,
                    f"{v100:.2f}",
                    f"{gemm:.2f}",
                    f"{hbm:.2f}",
                    f"{host * 1e3:.1f}",
                    f"{m['amp-mixed']:.2f}",
                    f"{m['amp-t4']:.2f}",
                    str(sum(p[1]["amp-mixed"] < 10 for p in points)),
                )
            )
    shipped = mapes(cases, {})
    rows.append(
        (
            "shipped constants",
            "1",
            "-",
            "0.80",
            f"{T4_GEMM.catalog_value():.2f}",
            f"{T4_HBM.catalog_value():.2f}",
            f"{HOST.catalog_value() * 1e3:.1f}",
            f"{shipped['amp-mixed']:.2f}",
            f"{shipped['amp-t4']:.2f}",
            str(int(shipped["amp-mixed"] < 10)),
        )
    )
    print_table(
        (
            "grid",
            "points",
            "row",
            "V100 gemm",
            "T4 gemm",
            "T4 hbm",
            "host ms",
            "amp-mixed MAPE %",
            "amp-t4 MAPE %",
            "points with amp-mixed < 10 %",
        ),
        rows,
        markdown,
    )


if __name__ == "__main__":
    main()
