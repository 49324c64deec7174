"""What the floors of search.bounds keep between calls, named: the core attention last costed in a floor loop and
a problem's memo of its rest floors (search.bounds.expert_floors.KindFloors, search.bounds.affine_floors)."""

from __future__ import annotations

from typing import NamedTuple


class CoreCost(NamedTuple):
    """The core-attention ops of the last layer kind costed and their compute (KindFloors._core): the layer kinds
    of a shape share one ops tuple, so a floor loop costs it once."""

    ops: tuple | None
    compute: object


NO_CORE = CoreCost(None, None)


class RestMemo(NamedTuple):
    """A problem's memo of the rest floors of one expert-options tuple (KindFloors.__init__): the tuple, the
    generation of the rest-floor cache it was found at (expert_floors._REST_GENERATION) and the floors."""

    experts: tuple
    generation: int
    rest: dict

    def holds(self, experts: tuple, generation: int) -> bool:
        """Whether the memo is of these very options and of the cache's current generation."""
        return self.experts is experts and self.generation == generation
