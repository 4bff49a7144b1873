"""``random``: uniform random search without repeats (the baseline every method must beat)."""

from __future__ import annotations

from agents.base import Agent, register
from tune_gym.space import Config

__all__ = ["RandomAgent"]


@register("random", "uniform random configs, never repeating one")
class RandomAgent(Agent):
    """Samples configs uniformly from the space, skipping ones already proposed."""

    def reset(self, space, task, seed=None) -> None:
        super().reset(space, task, seed)
        self._proposed: set[Config] = set()

    def propose(self, n: int) -> list[Config]:
        out = self.space.sample_unique(self.rng, n, exclude=self._proposed | set(self.seen))
        self._proposed.update(out)
        return out
