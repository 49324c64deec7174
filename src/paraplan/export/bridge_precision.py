"""Megatron-Bridge's precision: a plan written as one of its mixed-precision recipes, as Bridge runs it.

A recipe (``get_mixed_precision_config(name)``) sets MixedPrecisionConfig fields, and Bridge's setup
copies them onto the model, optimizer and DDP configs; the lines an export writes after it override
single fields. What each recipe sets and what Bridge and the Megatron-Core it pins check on those
fields at start-up are facts (``facts/megatron-bridge_precision.yaml``, Megatron-Bridge v0.2.0 at
7af9601c, each with file and line). The export writes the recipe of the plan's framework profile
(``megatron_bridge.FP8_RECIPES``) and on top of it only:

- ``fp8_param_gather``, the plan's fp8 primary weights (``fp8_weight_copies`` false: the weights kept
  and all-gathered in fp8) where the recipe gathers fp8 parameters itself; a recipe that turns the
  gather off (blockwise subchannel scaling, NVFP4, both ``fp8_param_gather = False``) runs bf16
  weights with fp8 copies, so a plan priced with fp8 primary weights is refused by name there (for
  NVFP4, whose fp8 is off, the override would also break Megatron-Core's 'fp8_param must be used
  together with fp8 mode'); the plan Bridge runs is the one with ``fp8_weight_copies`` true, which the
  estimate prices with the fp8 weight copies and no fp8 gather.
- the fields a recipe turns on that no plan prices, turned off as Bridge's own performance scripts
  turn them off (current scaling's first and last layers in bf16, ``first_last_layers_bf16``).

The start-up checks the facts list on these fields (finalize's mxfp8 buffer reuse, fp4 xor fp8,
Megatron-Core's fp8_param needing fp8) are kept as documented facts only: no recipe breaks them, and the
overrides cannot (the gather is written on only where the recipe gathers, so with its fp8 and, for
mxfp8, its buffer reuse; first_last_layers_bf16 is in none of them).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from paraplan.export.common import FOLDER, ExportRefused, refuse
from paraplan.export.megatron_core import fp8_primary_weights
from paraplan.export.startup import Release
from paraplan.io.parsed_cache import packaged_yaml
from paraplan.specs.plan import PlanSpec

FACTS = "megatron-bridge_precision.yaml"


@lru_cache(maxsize=None)
def precision_facts() -> dict[str, Any]:
    """The recipe facts (module doc)."""
    return packaged_yaml((FOLDER / "facts" / FACTS).read_text())


def recipe_fields(recipe: str) -> dict[str, Any]:
    """MixedPrecisionConfig's fields after ``get_mixed_precision_config(recipe)``: the dataclass
    defaults and what the recipe sets."""
    facts = precision_facts()
    if recipe not in facts["recipes"]:
        raise ExportRefused(
            f"megatron-bridge: mixed_precision {recipe!r} is not a recipe of v0.2.0"
        )
    return dict(facts["defaults"]) | dict(facts["recipes"][recipe]["sets"])


def _recipe_line(line: int) -> str:
    """``repo@tag file:line`` of a line of the recipes' file (``startup.Release.at``)."""
    facts = precision_facts()
    release = Release(facts["repo"], facts["tag"], facts["commit"])
    return f"{release.at({})} {facts['file']}:{line}"


def precision_overrides(recipe: str, plan: PlanSpec, label: str) -> list[tuple[str, object]]:
    """(``mixed_precision.<field>``, value) lines an fp8 or fp4 plan needs on top of ``recipe``
    (module doc); refuses by name what Bridge would not run as the plan was priced."""
    if plan.dtype != "fp8":
        return []
    fields = recipe_fields(recipe)
    facts = precision_facts()
    primary = fp8_primary_weights(plan)
    if primary and not fields["fp8_param_gather"]:
        at = _recipe_line(facts["recipes"][recipe]["fp8_param_gather_line"])
        raise refuse(
            label,
            "fp8_weight_copies",
            False,
            f"Bridge's {recipe} recipe sets fp8_param_gather False ({at}): bf16 weights with "
            "quantised copies, not fp8 primary weights; plan it with fp8_weight_copies",
        )
    out: list[tuple[str, object]] = [("mixed_precision.fp8_param_gather", primary)]
    for name, fact in facts["unpriced"].items():
        if fields.get(name) != fact["value"]:
            out.append((f"mixed_precision.{name}", fact["value"]))
    return out


def read_precision(recipe: str, given: dict[str, object]) -> bool:
    """fp8 primary weights (the recipe's ``fp8_param_gather`` unless a line overrides it) of an import's
    lines ``given`` ({ConfigContainer path: value}), whose ``mixed_precision`` fields this reads are
    taken out of it; refuses an unpriced field turned back on."""
    fields = recipe_fields(recipe)
    for name, fact in precision_facts()["unpriced"].items():
        value = given.pop(f"mixed_precision.{name}", fields.get(name))
        if value != fact["value"]:
            raise ExportRefused(
                f"megatron-bridge: mixed_precision.{name} {value!r} (the {recipe} recipe's layers "
                "outside fp8) has no plan field"
            )
    return bool(given.pop("mixed_precision.fp8_param_gather", fields["fp8_param_gather"]))
