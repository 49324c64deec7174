"""A framework profile takes every field it does not state from its ``base`` (catalog._over_base, issue 31
mends item 1): a file ``{name: my-titan, base: torchtitan}`` priced gpt3-1.3b on 8 H100 at forward
15.3 ms and optimizer 25.0 ms where ``--framework torchtitan`` gives 17.8 and 18.5 ms, because the file
profile took FrameworkSpec's defaults (Megatron-LM's) for every field it left out."""

from __future__ import annotations

import pytest

from paraplan.api import estimate
from paraplan.catalog import framework_names, load_framework
from paraplan.specs.errors import InputError, UnknownNameError

# a plan each base prices through its own paths (FSDP2 ZeRO-3, distributed optimizer with TP, DDP)
PLANS = {
    "torchtitan": {"gpus": 8, "zero": 3, "global_batch": 16, "seq_length": 2048},
    "megatron-core": {"gpus": 8, "tp": 2, "zero": 1, "global_batch": 16, "seq_length": 2048},
    "hf-transformers": {"gpus": 8, "global_batch": 16, "seq_length": 2048},
}


def _profile_file(tmp_path, name: str, base: str, extra: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nbase: {base}\n{extra}", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("base", sorted(PLANS))
def test_a_file_with_only_name_and_base_prices_as_its_base(tmp_path, base):
    """Step time, memory and every breakdown field equal the base profile's, to the last bit."""
    mine = _profile_file(tmp_path, "my-" + base, base)
    by_name = estimate("gpt3-1.3b", "dgx-h100-80gb", framework=base, **PLANS[base]).to_dict()
    by_file = estimate("gpt3-1.3b", "dgx-h100-80gb", framework=mine, **PLANS[base]).to_dict()
    assert by_file == by_name


def test_the_profile_keeps_what_it_says_of_itself_and_what_it_states(tmp_path):
    """Its name, source and description are its own; a field it states wins; sources merge per field."""
    extra = 'source: "my notes"\nhost_step_s: 1 ms\nsources:\n  host_step_s: "measured"\n'
    mine = load_framework(_profile_file(tmp_path, "my-titan", "torchtitan", extra))
    titan = load_framework("torchtitan")
    assert (mine.name, mine.base, mine.source, mine.description) == (
        "my-titan",
        "torchtitan",
        "my notes",
        "",
    )
    assert mine.host_step_s == pytest.approx(1e-3) != titan.host_step_s
    assert mine.optimizer_step_bytes == titan.optimizer_step_bytes == 40
    assert mine.sources["host_step_s"] == "measured"
    assert mine.sources["optimizer_step_bytes"] == titan.sources["optimizer_step_bytes"]


def test_a_recipe_two_bases_deep_takes_the_root_fields(tmp_path):
    """A file on torchtitan-compiled takes what that recipe states and, beyond it, torchtitan's."""
    mine = load_framework(_profile_file(tmp_path, "my-compiled", "torchtitan-compiled"))
    compiled = load_framework("torchtitan-compiled")
    own = {"name", "base", "source", "description", "version"}
    assert mine.base == "torchtitan-compiled"
    assert mine.model_dump(exclude=own) == compiled.model_dump(exclude=own)


def test_an_unknown_base_is_refused_with_the_closest_names(tmp_path):
    """A misspelt base no longer falls back silently to the defaults."""
    with pytest.raises(UnknownNameError, match="torchtitan"):
        load_framework(_profile_file(tmp_path, "my-titan", "torchtitn"))


def test_every_catalog_base_resolves():
    """Every catalog profile loads through its base chain (no loop, every base a catalog profile)."""
    for name in framework_names():
        assert load_framework(name).name == name
    assert issubclass(UnknownNameError, InputError)


def test_one_walk_gives_the_names_and_the_data_and_refuses_a_loop():
    """catalog._base_chain is the one walk of a base chain: framework_chain names what _over_base merges, and a
    chain that comes back to a profile it passed is refused with the profiles it walked."""
    from paraplan.catalog import _base_chain, _over_base, framework_chain

    mine = {"name": "my-compiled", "base": "torchtitan-compiled"}
    chain = _base_chain(mine, "framework")
    assert [data["name"] for data in chain] == ["my-compiled", "torchtitan-compiled", "torchtitan"]
    assert framework_chain("torchtitan-compiled") == ("torchtitan-compiled", "torchtitan")
    assert framework_chain("no-such-profile") == ("no-such-profile",)
    # the recipe's eager traffic factor, 1, over its base's 2
    assert _over_base(mine, "framework")["eager_traffic_factor"] == 1.0
    looping = {"name": "torchtitan", "base": "torchtitan-compiled"}
    with pytest.raises(InputError) as refused:
        load_framework(looping)
    assert str(refused.value) == (
        "framework.base: the profiles' base chain loops (torchtitan -> torchtitan-compiled)"
    )
    with pytest.raises(
        UnknownNameError,
        match=r"^framework\.base: unknown framework 'torchtitn' \(did you mean torchtitan",
    ):
        load_framework({"name": "my-titan", "base": "torchtitn"})
