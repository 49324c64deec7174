"""The goodput inputs: failure rates, checkpointing, restart and energy, with sourced defaults.

The defaults live in ``goodput/defaults.yaml``, every number beside its source (the style of the system
catalog); ``default_inputs()`` reads them, ``with_changes`` makes a variant (a test, a sweep, a case)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, ValidationInfo

from paraplan.io.documents import parse_document
from paraplan.specs.strict import InputModel
from paraplan.units import parse_quantity

SECONDS_PER_DAY = 86400.0


def _bandwidth(value, info: ValidationInfo):
    return parse_quantity(value, "bandwidth", field=info.field_name or "bandwidth")


BytesPerS = Annotated[float, BeforeValidator(_bandwidth), Field(gt=0)]


class FailureInputs(InputModel):
    """Interruption rates per day of wall time (exponential arrivals, independent components)."""

    gpu_failures_per_day: float = Field(ge=0, description="interruptions per GPU-day")
    server_failures_per_day: float = Field(
        ge=0, description="interruptions per server-day (host, network, software)"
    )
    gpus_per_server: int = Field(gt=0)
    domain_failures_per_day: float = Field(
        0.0,
        ge=0,
        description="interruptions per NVLink-domain-day (a switch tray: the whole domain)",
    )
    planned_per_day: float = Field(
        0.0, ge=0, description="planned interruptions (maintenance, upgrades) per day of the job"
    )


class CheckpointInputs(InputModel):
    """How the training state is saved: synchronous (the step waits for the write) or asynchronous
    (the step waits for the copy to host memory; the write to storage runs behind training)."""

    mode: Literal["sync", "async"] = "sync"
    storage_write_bandwidth: BytesPerS
    storage_read_bandwidth: BytesPerS
    interval: Literal["optimal", "daly", "young"] | float = Field(
        "optimal", description="seconds of training between checkpoints, or how to choose them"
    )


class RestartInputs(InputModel):
    """What one interruption costs besides the lost progress (checkpoint reload is plan-dependent)."""

    detect_s: float = Field(ge=0, description="from the failure to the job's teardown")
    init_s_per_gpu: float = Field(ge=0, description="rendezvous and communicator set-up per GPU")
    startup_s: float = Field(ge=0, description="the job's first scheduling and launch, once")
    spare_servers: int | None = Field(
        None, ge=0, description="idle servers that replace a failed one (None: ample)"
    )
    repair_s: float = Field(ge=0, description="repair of a failed server when no spare is idle")
    spare_swap_s: float = Field(ge=0, description="time for a spare to join")
    policy: Literal["rollback", "ft-dp"] = Field(
        "rollback",
        description="rollback: the whole job restarts from the last checkpoint; ft-dp: the replicas "
        "a failure hits drop out and the rest continue (goodput.recovery)",
    )
    reconfigure_s: float = Field(
        0.0, ge=0, description="ft-dp: the survivors' regrouping after the detection"
    )


class AcceleratorPower(InputModel):
    tdp_w: float = Field(gt=0)
    system_w_per_gpu: float | None = Field(None, gt=0)


class EnergyInputs(InputModel):
    pue: float = Field(ge=1.0)
    wait_power_fraction: float = Field(ge=0, le=1)
    grid_gco2_per_kwh: float = Field(
        0.0, ge=0, description="grid carbon intensity for emissions, gCO2 per kWh"
    )


class GoodputInputs(InputModel):
    """Everything the goodput model needs beyond the estimate (docs/goodput.md)."""

    failures: FailureInputs
    checkpoint: CheckpointInputs
    restart: RestartInputs
    energy: EnergyInputs
    accelerator_power: dict[str, AcceleratorPower]
    sources: dict[str, str] = Field(default_factory=dict)

    def with_changes(self, **sections: dict) -> GoodputInputs:
        """A copy with fields of sections changed: ``with_changes(restart={"detect_s": 60})``."""
        data = self.model_dump()
        for section, changes in sections.items():
            data[section] = {**data[section], **changes}
        return GoodputInputs.model_validate(data)

    def power(self, accelerator: str) -> AcceleratorPower | None:
        return self.accelerator_power.get(accelerator)


@lru_cache(maxsize=1)
def default_inputs() -> GoodputInputs:
    """The defaults of ``goodput/defaults.yaml`` (each with its source under ``sources``)."""
    text = (resources.files("paraplan.goodput") / "defaults.yaml").read_text()
    data = parse_document(text, "goodput/defaults.yaml", "goodput", as_json=False)
    return GoodputInputs.model_validate(data)
