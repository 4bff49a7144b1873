"""``ga``: a genetic algorithm over knob indices (AutoTVM's GATuner).

Defaults (AutoTVM): population 100, 3 elites carried over, fitness-proportional parent
selection, one-point crossover of the knob-index vectors, per-knob mutation probability 0.1
to a uniformly random choice. Each generation is measured; a child that was already measured
(or proposed) is replaced by a fresh random config, so no trial is wasted on a repeat.
Failed configs have fitness 0.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np

from agents.base import Agent, register
from tune_gym.options import Float, Int, check_int
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["GAAgent"]


@register("ga", "genetic algorithm over knob indices (population 100, 3 elites, mutation 0.1)")
class GAAgent(Agent):
    """AutoTVM's GATuner (see the module docstring; options: ``tune-gym agents ga``)."""

    def __init__(self, pop_size: Annotated[int, Int(2, help="configs per generation")] = 100,
                 elite_num: Annotated[int, Int(0, help="best configs carried over to the next generation "
                                                       "(at most pop_size - 1)")] = 3,
                 mutation_prob: Annotated[float, Float(0.0, 1.0, help="probability of mutating each knob of a "
                                                                      "child")] = 0.1) -> None:
        self.pop_size = pop_size
        self.elite_num = check_int("elite_num", elite_num, 0, self.pop_size - 1)
        self.mutation_prob = mutation_prob

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.generation: list[Config] = self.fresh(min(self.pop_size, space.size))
        self._queue = list(self.generation)

    def propose(self, n: int) -> list[Config]:
        if not self._queue and all(c in self.seen for c in self.generation):
            self.generation = self._breed()
            self._queue = [c for c in self.generation if c not in self.seen]
        out, self._queue = self._queue[:n], self._queue[n:]
        self.proposed.update(out)
        return out

    def _breed(self) -> list[Config]:
        pool = sorted(((c, self.seen[c].gflops) for c in self.generation), key=lambda kv: -kv[1])
        genes = np.array([c for c, _ in pool], dtype=np.int64)
        fitness = np.array([f for _, f in pool], dtype=np.float64)
        probs = fitness / fitness.sum() if fitness.sum() > 0 else np.full(len(fitness), 1 / len(fitness))
        children: list[Config] = []
        taken: set[Config] = set()
        target = min(self.pop_size, self.space.size - len(self.proposed))
        elites = [tuple(int(v) for v in g) for g in genes[: self.elite_num]]
        for _ in range(20 * target):
            if len(children) >= target - len(elites):
                break
            a, b = genes[self.rng.choice(len(genes), size=2, p=probs)]
            point = int(self.rng.integers(1, max(2, self.space.n_knobs)))
            child = np.concatenate([a[:point], b[point:]])
            mutate = self.rng.random(self.space.n_knobs) < self.mutation_prob
            child[mutate] = self.rng.integers(0, self.space.dims[mutate])
            cfg = self.space.canonical(child)
            if cfg not in self.proposed and cfg not in taken:
                children.append(cfg)
            taken.add(cfg)
        children += self.fresh(target - len(elites) - len(children), set(children))
        # Elites were measured already: they stay in the population (for breeding) at no cost.
        return elites + children
