"""Design-space exploration: the plan search over systems × GPU counts × ``--set`` field values.

``run.run_sweep(SweepConfig(...), out_dir)`` runs a sweep (``point.run_point`` each point) (in this process, on local processes or
on Dask) and writes ``sweep.json``, ``sweep.csv`` and the plots; ``params`` parses the
``--set PATH=V1,V2`` and ``--gpus`` axes and applies field overrides to the specs.
"""

from paraplan.sweep.params import SetAxis, apply_overrides, numeric_fields, parse_gpus, parse_set
from paraplan.sweep.point import run_point
from paraplan.sweep.results import load_results
from paraplan.sweep.run import SweepConfig, run_sweep

__all__ = [
    "SetAxis",
    "SweepConfig",
    "apply_overrides",
    "load_results",
    "numeric_fields",
    "parse_gpus",
    "parse_set",
    "run_point",
    "run_sweep",
]
