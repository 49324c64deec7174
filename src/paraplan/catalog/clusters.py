"""Clusters of node pools and per-stage plans read from files or mappings (specs/cluster.py,
specs/stage_plan.py hold the types and their rules; this module resolves catalog names and files)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from paraplan.catalog import _read_file, load_system, system_names
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.errors import InputError
from paraplan.specs.stage_plan import StagePlanSpec, stage_plan_from_dict
from paraplan.specs.errors import input_error_from_pydantic


def cluster_from_dict(data: dict, field: str = "cluster") -> ClusterSpec:
    """Validate a cluster mapping; each pool's ``system`` may be a catalog name, a file or a mapping."""
    if not isinstance(data, dict):
        raise InputError(f"{field}: {data!r} is not allowed; give a mapping with 'pools'")
    pools = data.get("pools")
    if isinstance(pools, list):
        resolved = []
        for i, pool in enumerate(pools):
            if isinstance(pool, dict) and isinstance(pool.get("system"), (str, dict)):
                pool = dict(
                    pool,
                    system=load_system(
                        pool["system"], field=f"{field}.pools.{i}.system", referenced=True
                    ),
                )
            resolved.append(pool)
        data = dict(data, pools=resolved)
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field, ClusterSpec) from None


def load_cluster(ref: str | Path | dict | ClusterSpec, field: str = "cluster") -> ClusterSpec:
    """A cluster from a YAML/JSON file, a mapping, or an existing ClusterSpec."""
    if isinstance(ref, ClusterSpec):
        return ref
    if isinstance(ref, (str, Path)):
        data = _read_file(Path(ref), field)
        data.setdefault("name", Path(ref).stem)
        return cluster_from_dict(data, field)
    return cluster_from_dict(ref, field)


def pasted_cluster(data: dict) -> dict:
    """A cluster held in memory (pasted text, read by the caller): its pools may name catalog systems
    only, since no file named in it is read; named ``pasted``."""
    for i, pool in enumerate(p for p in data.get("pools") or [] if isinstance(p, dict)):
        if isinstance(pool.get("system"), str) and pool["system"] not in system_names():
            raise InputError(
                f"cluster.pools[{i}].system: {pool['system']!r} is not in the catalog; "
                "name a catalog system or give the system inline"
            )
    return {"name": "pasted", **data}


def load_stage_plan(path: str | Path, field: str = "plan") -> StagePlanSpec:
    """A per-stage plan from a YAML/JSON file (``estimate --plan FILE`` with a list of stages)."""
    return stage_plan_from_dict(_read_file(Path(path), field), field)
