"""``rl-ppo``: Chameleon's reinforcement-learning search (Ahn et al., ICLR 2020).

Each planning round (the loop of :class:`agents.model_based.ModelGuidedAgent`):

1. fit an XGBoost *regression* cost model (Chameleon's choice) on the knob features of the
   configs measured so far;
2. train a PPO policy (stable-baselines3, ``"MlpPolicy"``) for ``train_steps`` steps on
   ``tune_gym/KnobWalk-v0`` whose reward is the model's prediction of each visited config;
   the policy persists across rounds and keeps training on the refitted model;
3. roll the policy out from ``n_starts`` start configs at once (half the best measured
   configs, the rest random), sampling its actions, each walker until the walk's stop rule
   or ``max_steps``; every config visited is a candidate;
4. propose the best-predicted unmeasured candidates, or, with ``adaptive_sampling``, cluster
   those same proposals with k-means on their knob vectors scaled to [0, 1] and propose only
   the best-predicted member of each cluster (:func:`adaptive_sample`).

Defaults: plan_size 64 with the last 5% random (AutoTVM's loop, which Chameleon builds on);
the first plan random; XGBoost ``reg:squarederror`` with AutoTVM's tree parameters, 150
rounds; 128 parallel starts; walks of at most 500 steps that stop when fewer than half of
the movable knobs moved (METHODS.md section 7); reward = predicted normalized throughput.
The PPO settings are not given in METHODS.md; these are chosen to keep a round to a few
seconds on a CPU: 2048 training steps per round, ``n_steps`` 512, minibatch 64, 4 epochs,
learning rate 3e-4, discount 0.99, two hidden layers of 64 units.

With ``adaptive_sampling`` a round measures only the cluster representatives plus a random
share of ``eps`` of that smaller batch (``ceil(k * eps / (1 - eps))`` random configs for
``k`` representatives), so rounds are shorter and the model is refitted more often.

Randomness: every seed comes from the agent's ``rng``. Stable-baselines3 draws minibatch
shuffles and action samples from the global ``random`` / NumPy / PyTorch generators, so
training and rollouts run inside :func:`_seeded_globals`, which seeds them from the agent's
``rng`` and restores their previous state afterwards. PyTorch and XGBoost run on one thread:
the networks are tiny and the walk scores one config per step, where thread start-up
costs more than it saves.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from agents.base import register
from agents.model_based import ModelGuidedAgent
from agents.models.features import KnobFeaturizer
from agents.models.xgb import XGBModel
from tune_gym.envs.knob_walk import KnobWalkEnv, walk
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["RLPPOAgent", "adaptive_sample"]


def adaptive_sample(points: np.ndarray, scores: np.ndarray, seed: int, k_start: int = 8, k_step: int = 8,
                    min_drop: float = 2.5, n_init: int = 10) -> list[int]:
    """Chameleon's adaptive sampling: one representative per k-means cluster of ``points``.

    Rule: fit k-means (scikit-learn, ``random_state=seed``) with ``k = k_start``; while a
    fit with ``k + k_step`` clusters cuts the loss (inertia) by at least ``min_drop`` times,
    move to that ``k``; keep the last ``k`` before the loss stopped dropping that fast (or the
    one that reached zero loss; ``k`` never exceeds the number of distinct points). With at
    most ``k_start`` distinct points each distinct point is its own cluster.

    Args:
        points: ``n x d`` points (e.g. normalized knob vectors).
        scores: ``n`` scores; a cluster's representative is its highest-scoring member.
        seed: k-means seed.
        k_start, k_step, min_drop: the growth rule (Chameleon: 8, 8, 2.5).
        n_init: k-means restarts per ``k`` (scikit-learn's classic default, 10).

    Returns:
        Indices into ``points`` of the representatives, best score first.
    """
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    points = np.asarray(points, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    if len(points) == 0:
        return []
    distinct, labels = np.unique(points, axis=0, return_inverse=True)
    labels = labels.reshape(-1)
    if len(distinct) > k_start:
        fit = lambda k: KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(points)
        with threadpool_limits(1):  # a few hundred points: threads cost more than they save
            best = fit(k_start)
            while best.inertia_ > 0 and best.n_clusters + k_step <= len(distinct):
                grown = fit(best.n_clusters + k_step)
                if best.inertia_ < min_drop * grown.inertia_:
                    break
                best = grown
        labels = best.labels_
    reps = [int(members[np.argmax(scores[members])]) for members in
            (np.flatnonzero(labels == c) for c in np.unique(labels))]
    return sorted(reps, key=lambda i: -scores[i])


@contextlib.contextmanager
def _seeded_globals(seed: int) -> Iterator[None]:
    """Seed the global ``random``, NumPy and PyTorch generators and run PyTorch on one thread
    (the networks are tiny); restore the generators and the thread count on exit."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    py_state, np_state, threads = random.getstate(), np.random.get_state(), torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        set_random_seed(seed)
        torch.set_num_threads(1)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
            torch.set_num_threads(threads)


@register("rl-ppo", "Chameleon: PPO walks the knob space over an XGBoost regression model (opt. adaptive sampling)")
class RLPPOAgent(ModelGuidedAgent):
    """Chameleon's RL tuner (see the module docstring).

    Args:
        plan_size: configs per planning round (64).
        eps: random share of each plan (0.05).
        n_init: measurements before the first model fit (default ``plan_size``).
        invalid: ``"zero"`` (feed failures as throughput 0) or ``"drop"``.
        num_rounds: XGBoost boosting rounds per fit (150).
        train_steps: PPO environment steps per round (2048).
        n_starts: parallel rollout starts (128, Chameleon).
        max_steps: longest walk, in training episodes and rollouts (500, Chameleon).
        stop_fraction: a walk stops when fewer than this fraction of its movable knobs
            moved in a step (0.5: "most knobs stop moving").
        adaptive_sampling: measure one representative per k-means cluster (False).
        net_arch: hidden layers of the policy and value networks ((64, 64)).
        n_steps, batch_size, n_epochs, learning_rate, gamma: PPO settings (512, 64, 4,
            3e-4, 0.99).
    """

    def __init__(self, plan_size: int = 64, eps: float = 0.05, n_init: int | None = None, invalid: str = "zero",
                 num_rounds: int = 150, train_steps: int = 2048, n_starts: int = 128, max_steps: int = 500,
                 stop_fraction: float = 0.5, adaptive_sampling: bool = False, net_arch: Sequence[int] = (64, 64),
                 n_steps: int = 512, batch_size: int = 64, n_epochs: int = 4, learning_rate: float = 3e-4,
                 gamma: float = 0.99) -> None:
        super().__init__(plan_size, eps, n_init, invalid)
        if n_starts < 1 or train_steps < 1:
            raise ValueError(f"n_starts ({n_starts}) and train_steps ({train_steps}) must be >= 1")
        self.num_rounds = num_rounds
        self.train_steps = train_steps
        self.n_starts = n_starts
        self.max_steps = max_steps
        self.stop_fraction = stop_fraction
        self.adaptive_sampling = adaptive_sampling
        self.ppo_options: dict[str, Any] = {"n_steps": n_steps, "batch_size": batch_size, "n_epochs": n_epochs,
                            "learning_rate": learning_rate, "gamma": gamma,
                            "policy_kwargs": {"net_arch": list(net_arch)}}

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.model = XGBModel("reg", self.num_rounds, seed=int(self.rng.integers(2**31)), nthread=1)
        self._knob = KnobFeaturizer(space)
        self.policy: Any = None  # the PPO model, created at the first search
        self._n_reps: int | None = None  # representatives in the last adaptive plan

    # ------------------------------------------------------------------ ModelGuidedAgent hooks
    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        if y.max() <= 0:
            return False
        self.model.fit(self._knob(configs), y)
        return True

    def score(self, configs: np.ndarray) -> np.ndarray:
        return self.model.predict(self._knob(configs))

    def search(self, n: int) -> list[Config]:
        """Train the policy on the current model, roll it out, rank what it visited."""
        if n <= 0:
            return []
        seed = int(self.rng.integers(2**31))
        starts = self._starts()
        env = KnobWalkEnv(self.task, self.space.preset, reward_fn=self.score, max_steps=self.max_steps,
                          stop_fraction=self.stop_fraction)
        with _seeded_globals(seed):
            self._train(env, seed)
            visited = self._rollout(env, starts)
        candidates = [c for c in visited if c not in self.proposed]
        if not candidates:
            return []
        scores = self.score(np.asarray(candidates, dtype=np.int64))
        top = np.argsort(-scores, kind="stable")[:n]
        if not self.adaptive_sampling:
            return [candidates[i] for i in top]
        picked = adaptive_sample(self.space.normalized([candidates[i] for i in top]), scores[top], seed)
        self._n_reps = len(picked)
        return [candidates[top[i]] for i in picked]

    def _make_plan(self, size: int) -> list[Config]:
        """The shared plan; with adaptive sampling, cut to the representatives + eps random."""
        self._n_reps = None
        plan = super()._make_plan(size)
        if self._n_reps is None:  # a random plan, or no adaptive sampling
            return plan
        n_random = math.ceil(self._n_reps * self.eps / (1.0 - self.eps)) if self.eps < 1 else 0
        return plan[: self._n_reps + n_random]

    # ------------------------------------------------------------------ PPO
    def _starts(self) -> list[Config]:
        """Half the best measured configs, the rest random."""
        starts = self._top_measured(self.n_starts // 2)
        return starts + self.space.sample(self.rng, self.n_starts - len(starts))

    def _train(self, env: KnobWalkEnv, seed: int) -> None:
        from stable_baselines3 import PPO
        from stable_baselines3.common.vec_env import DummyVecEnv

        vec = DummyVecEnv([lambda: env])
        vec.seed(seed)
        if self.policy is None:
            self.policy = PPO("MlpPolicy", vec, seed=seed, device="cpu", verbose=0, **self.ppo_options)
        else:
            self.policy.set_env(vec)  # the refitted model's rewards; episodes restart
        self.policy.learn(self.train_steps, reset_num_timesteps=False)

    def _rollout(self, env: KnobWalkEnv, starts: list[Config]) -> list[Config]:
        """Every distinct config the policy visits from ``starts``, in order of first visit."""
        configs = np.asarray(starts, dtype=np.int64)
        alive = np.arange(len(configs))
        visited: dict[Config, None] = {}
        for _ in range(self.max_steps):
            actions, _ = self.policy.predict(env.observation(configs[alive]), deterministic=False)
            new, _, stop = walk(self.space, configs[alive], actions, self.stop_fraction)
            configs[alive] = new
            visited.update((tuple(int(v) for v in row), None) for row in new)
            alive = alive[~stop]
            if not len(alive):
                break
        return list(visited)
