"""``paraplan calibrate``: fit a system's constants to nccl-tests, kernel benchmarks and step times."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from paraplan.cli.app import app
from paraplan.cli.declare import given, optional, switch


@app.command("calibrate")
def calibrate_command(
    system: given(
        str,
        "--system",
        "-s",
        help="base system (catalog name or file): nominal bandwidths and peaks",
    ),
    nccl: optional(
        list[str], "--nccl", help="nccl-tests output (FILE or KIND=FILE); repeat"
    ) = None,
    gemm: optional(Path, "--gemm", help="CSV m,n,k,dtype,time_us|time_ms|time_s|tflops") = None,
    attention: optional(
        Path, "--attention", help="CSV batch,heads,seq_len,head_dim,causal,direction,dtype,time_us"
    ) = None,
    memory: optional(Path, "--memory", help="CSV bytes,time_us of memory-bound kernels") = None,
    steps: optional(
        Path, "--steps", help="YAML/JSON of measured runs: model, plan, step_time_s"
    ) = None,
    fit_in_step_share: switch(
        "--fit-in-step-share",
        help="with --steps: also fit the in-step GEMM share (of the attached table, else the cap) to "
        "the step times",
    ) = False,
    domain_spans_nodes: switch(
        "--domain-spans-nodes",
        help="rack-scale NVLink: the hosts of an nccl-tests run share one NVLink domain",
    ) = False,
    name: optional(str, "--name", help="name of the calibrated system") = None,
    out: optional(Path, "--out", "-o", help="write the system YAML here (default: stdout)") = None,
    report: optional(
        Path, "--report", help="also write the fit (values, residuals, leave-one-out) as JSON"
    ) = None,
    write_synthetic: optional(
        Path, "--write-synthetic", help="write a synthetic cluster's measurements to DIR and exit"
    ) = None,
) -> None:
    """Fit link efficiencies and latencies, GEMM / attention / HBM efficiencies and overlap costs;
    attach the measured kernel tables to the written system (a shipped table's name, or a folder
    OUT-kernels/ next to --out)."""
    from paraplan.calibrate import calibrate, system_yaml
    from paraplan.catalog import load_system
    from paraplan.io.documents import atomic_write_text

    if write_synthetic is not None:
        from paraplan.calibrate.synthetic import write_samples

        for path in write_samples(write_synthetic):
            print(f"wrote {path}", file=sys.stderr)
        return
    cal = calibrate(
        load_system(system, field="system"),
        nccl=list(nccl or ()),
        gemm=gemm,
        attention=attention,
        memory=memory,
        steps=steps,
        name=name,
        domain_spans_nodes=domain_spans_nodes,
        tables_dir=None if out is None else out.parent / f"{out.stem}-kernels",
        fit_in_step_share=fit_in_step_share,
    )
    text = system_yaml(cal)
    if report is not None:
        atomic_write_text(report, json.dumps(cal.to_dict(), indent=2) + "\n", make_parents=True)
    if out is None:
        sys.stdout.write(text)
        return
    atomic_write_text(out, text, make_parents=True)
    print(f"wrote {out}", file=sys.stderr)
    for r in cal.residuals:
        print(
            f"  {Path(r.source).name}: {r.what}: RMS {r.rms_rel:.2%}, max {r.max_rel:.2%} over {r.points} points",
            file=sys.stderr,
        )
    if cal.leave_one_out:
        print(
            f"  leave-one-out step time error: mean {cal.leave_one_out['mean_abs_error']:.2%}, "
            f"max {cal.leave_one_out['max_abs_error']:.2%}",
            file=sys.stderr,
        )
