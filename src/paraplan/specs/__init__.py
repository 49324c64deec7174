"""Validated, frozen inputs: the model, the system and the plan."""

from paraplan.specs.errors import InputError, Violation
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import AcceleratorSpec, NetworkSpec, NodeSpec, SystemSpec

__all__ = [
    "AcceleratorSpec",
    "InputError",
    "ModelSpec",
    "NetworkSpec",
    "NodeSpec",
    "PlanSpec",
    "SystemSpec",
    "Violation",
]
