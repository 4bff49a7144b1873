"""``random``: uniform random search without repeats (the baseline every method must beat)."""

from __future__ import annotations

from agents.base import Agent, register
from tune_gym.space import Config

__all__ = ["RandomAgent"]


@register("random", "uniform random configs, never repeating one")
class RandomAgent(Agent):
    """Samples configs uniformly from the space, skipping ones already proposed."""

    def propose(self, n: int) -> list[Config]:
        out = self.fresh(n)
        self.proposed.update(out)
        return out
