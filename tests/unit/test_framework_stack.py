"""One mapping of a framework profile name to its software stack (catalog.framework_stack, issue 31 review
finding 3): the search's recomputation modes (search.launch.recompute_modes) and the error bands' stack
(validate.features.band_keys, validate.coverage) both read it."""

from __future__ import annotations

import pytest

from paraplan.catalog import (
    MEGATRON_FAMILY,
    MEGATRON_STACK,
    framework_names,
    framework_stack,
    load_framework,
    load_model,
    load_system,
)
from paraplan.search.launch import recompute_modes
from paraplan.specs.plan import PlanSpec
from paraplan.specs.recompute import COMMON_MODES, MODES
from paraplan.validate.features import band_keys, case_population

# every catalog profile's stack: a recipe runs the stack at the root of its base chain, the Megatron-LM
# family (and its recipes) is one stack
STACKS = {
    "deepspeed": "deepspeed",
    "deepspeed-2021": "deepspeed-2021",
    "hf-transformers": "hf-transformers",
    "hf-transformers-deepspeed": "hf-transformers",
    "hf-transformers-fsdp": "hf-transformers",
    "llm-foundry": "llm-foundry",
    "maxtext": "maxtext",
    "megatron-bridge-25.09": MEGATRON_STACK,
    "megatron-bridge-25.11": MEGATRON_STACK,
    "megatron-bridge-25.11-mxfp8": MEGATRON_STACK,
    "megatron-bridge-26.02-nvfp4": MEGATRON_STACK,
    "megatron-bridge-26.04-nvfp4": MEGATRON_STACK,
    "megatron-bridge-26.06-mxfp8": MEGATRON_STACK,
    "megatron-bridge-26.06.01-mxfp8": MEGATRON_STACK,
    "megatron-bridge-26.08-mxfp8": MEGATRON_STACK,
    "megatron-core": MEGATRON_STACK,
    "megatron-deepspeed": "deepspeed",
    "megatron-lm-2019": "megatron-lm-2019",
    "megatron-lm-2021": MEGATRON_STACK,
    "megatron-lm-v1.0": "megatron-lm-2019",
    "nemo-24.09": MEGATRON_STACK,
    "dgxc-benchmarking-24.11": MEGATRON_STACK,
    "pytorch-compile": "pytorch-compile",
    "pytorch-eager": "pytorch-eager",
    "pytorch-eager-bf16": "pytorch-eager-bf16",
    "torchtitan": "torchtitan",
    "torchtitan-compiled": "torchtitan",
}


def test_every_catalog_profile_has_its_stated_stack():
    assert set(framework_names()) == set(STACKS), "a profile added: state its stack here"
    assert {name: framework_stack(name) for name in STACKS} == STACKS


def test_base_chains_end_at_a_stack_profile_of_the_catalog():
    """Every base names a catalog profile and no chain loops (framework_stack walks them)."""
    names = set(framework_names())
    for name in names:
        seen, root = {name}, load_framework(name).base
        while root is not None:
            assert root in names and root not in seen, (name, root)
            seen.add(root)
            root = load_framework(root).base


def test_no_profile_and_unknown_names():
    """No profile prices Megatron-LM's defaults: the Megatron stack; a name the catalog does not have is
    its own stack, and is not read as a file (an existing path's name stays the name)."""
    assert framework_stack(None) == MEGATRON_STACK
    assert framework_stack("my-stack") == "my-stack"
    yaml_path = "src/paraplan/catalog/frameworks/torchtitan-compiled.yaml"
    assert framework_stack(yaml_path) == yaml_path


@pytest.mark.parametrize("name", [None, "my-stack", *sorted(STACKS)])
def test_the_search_varies_its_stacks_own_modes(name):
    """The stack-only modes (specs.recompute: op_sac with torchtitan, save_dots with maxtext) go to the
    profiles of that stack, recipes included; the Megatron stack, no profile and an unknown name vary
    the common ones (of those the launcher's exporter states)."""
    own = {m for m, mode in MODES.items() if framework_stack(name) in mode.stacks}
    assert set(recompute_modes(name)) - set(COMMON_MODES) == own
    if name is not None and name.startswith("torchtitan"):
        assert own == {"op_sac"}
    if name == "maxtext":
        assert own == {"save_dots"}
    if name is None or framework_stack(name) == MEGATRON_STACK:
        assert not own


def test_the_megatron_family_is_stack_profiles():
    assert all(load_framework(name).base is None for name in MEGATRON_FAMILY)


@pytest.mark.parametrize("name", [None, "nemo-24.09", "torchtitan-compiled", "my-stack"])
def test_the_bands_read_the_same_stack(name):
    """validate.features: the band's stack and the case population (the Megatron stack pools as the
    dense / MoE population alone, any other stack is named by its stack, not the profile's name: a
    recipe pools with the stack it refines)."""
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=8, tp=2, global_batch=16, seq_length=4096, dtype="bf16")
    assert band_keys(model, system, plan, name).stack == framework_stack(name)
    population = case_population(model, name)
    stack = framework_stack(name)
    assert population == ("dense" if stack == MEGATRON_STACK else f"dense {stack}")
    if name == "torchtitan-compiled":
        assert population == "dense torchtitan"  # the profile's name before


def _file_profile(name: str, base: str | None):
    """A profile as a file would give it (not a catalog entry): torchtitan's fields under another name."""
    data = load_framework("torchtitan").model_dump()
    return load_framework({**data, "name": name, "base": base})


def test_one_chain_walk_for_the_stack_and_the_launcher():
    """catalog.framework_chain is the walk both read: a recipe two levels above its launcher (a file
    built on torchtitan-compiled) launches through torchtitan and runs its stack (search.launch.launcher
    looked one base deep before: no launcher)."""
    from paraplan.catalog import framework_chain
    from paraplan.search.launch import launcher

    assert framework_chain("torchtitan-compiled") == ("torchtitan-compiled", "torchtitan")
    assert framework_chain("megatron-lm-v1.0") == ("megatron-lm-v1.0", "megatron-lm-2019")
    two_levels = _file_profile("my-recipe", "torchtitan-compiled")
    assert framework_chain(two_levels) == ("my-recipe", "torchtitan-compiled", "torchtitan")
    assert launcher(two_levels) == "torchtitan"
    assert framework_stack(two_levels) == "torchtitan"
    assert launcher("megatron-deepspeed") is None  # launches through its own arguments
    assert launcher("nemo-24.09") == "megatron-core"


def test_a_profile_file_runs_its_bases_stack():
    """A profile given as a file with ``base: torchtitan`` runs torchtitan's stack (its name alone is no
    catalog entry: before, it was a stack of its own); without a base it is its own stack."""
    assert framework_stack(_file_profile("my-titan", "torchtitan")) == "torchtitan"
    assert framework_stack(_file_profile("my-nemo", "nemo-24.09")) == MEGATRON_STACK
    assert framework_stack(_file_profile("my-stack", None)) == "my-stack"
