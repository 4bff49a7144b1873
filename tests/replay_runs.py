"""Tuning runs on a ResNet-18 task's compact space replayed from its committed exhaustive dataset,
for the tests that compare an agent with random search (``from replay_runs import ...``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agents.base import Agent, run


def replay_env(task: str = "resnet18:7", budget: int = 256) -> Any:
    """Tune-v0 on ``task``'s compact space, replayed, in batches of 8, raw GFLOPS as the reward."""
    import gymnasium as gym

    return gym.make("tune_gym/Tune-v0", task=task, preset="compact", backend="replay", batch_size=8, budget=budget,
                    reward_norm=1.0)


def best_over_seeds(make: Callable[[], Agent], task: str, budget: int, seeds: Iterable[int] = range(5),
                    check: Callable[[Agent, Any], None] | None = None) -> list[float]:
    """The best GFLOPS of one run per seed of a fresh ``make()`` agent on ``task`` with ``budget``
    trials; ``check(agent, result)`` (assertions on a run) is called after each run."""
    best = []
    for seed in seeds:
        env = replay_env(task, budget)
        agent = make()
        result = run(agent, env, seed=seed)
        env.close()
        if check is not None:
            check(agent, result)
        assert result.best is not None, f"no config of {task} ran in {budget} trials"
        best.append(result.best.result.gflops)
    return best
