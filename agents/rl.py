"""``rl-ppo``: Chameleon's reinforcement-learning search (Ahn et al., ICLR 2020).

Sources: the paper, METHODS.md section 7, and the authors' public code (the Chameleon fork
of TVM: ``python/tvm/autotvm/tuner/rl_model_optimizer.py``, ``reinforcement_learning/
ppo_core.py``, ``adaptive_sampler.py``, ``rl_tuner.py``), referred to below as "the code".

Each planning round (the loop of :class:`agents.model_based.ModelGuidedAgent`):

1. fit an XGBoost *regression* cost model (``rl_tuner.py``: ``loss_type='reg'``) on the
   knob features of the configs measured so far;
2. draw ``n_starts`` = 128 distinct uniform random start configs (the code's
   ``parallel_size``; not persistent across rounds, as there);
3. for each start in turn: walk the PPO policy from it on KnobWalk-v0's transition rule
   (:func:`tune_gym.envs.knob_walk.walk`: one {-1, 0, +1} move per knob, actions sampled
   from the policy) until at least ``stuck_fraction`` = 75% of the movable knobs are stuck
   in a step or ``max_steps`` = 500 steps were taken; predict the whole trajectory with the
   cost model in one batch call (reward of a step = the prediction for the config it
   reached); then make **one PPO update** on that trajectory before walking the next start
   (the code's ``observe_all_and_learn``). The policy persists across rounds and keeps
   learning on each refitted model;
4. rank the starts and every config visited by their prediction; the best unmeasured,
   unproposed ones (``plan_size`` minus the random slots) are the proposals;
5. adaptive sampling (on by default, the paper's "Adaptive Sampling"): k-means on the
   proposals' knob vectors scaled to [0, 1], ``k`` = 8, 16, ... (:func:`adaptive_sample`);
   only one representative per cluster, its best-predicted member, is measured, followed by
   the plan's ``round(eps * plan_size)`` random configs (the code's e-greedy slots). The
   model is refitted once that shorter plan is measured.

How PPO runs on stable-baselines3. A ``PPO`` model built on a :class:`KnobWalkEnv` (seen
through its knob part, :class:`_KnobObservation`) provides
the ``ActorCriticPolicy``, its Adam optimizer and the clipped-surrogate update
(``PPO.train``); its ``learn()`` loop is not used, because Chameleon's learning is not
SB3's fixed-horizon rollout: the walk, the batch prediction and the one-update-per-
trajectory schedule are the agent's. Per trajectory of length ``T``:

* during the walk only the actor network runs (one tiny forward pass per step); the action
  of each knob is drawn from the policy's categorical distribution with the Gumbel-max trick
  on the agent's ``rng`` (exactly a sample of the policy's distribution, and deterministic
  without touching global generators);
* after the walk, ``policy.evaluate_actions`` gives the values and log-probabilities of all
  ``T`` steps in one batch (the policy did not change during the walk, so these equal what
  a step-by-step rollout would have stored); a ``RolloutBuffer`` of size ``T`` holds the
  trajectory and ``compute_returns_and_advantage`` (last value 0, done) computes the GAE
  advantages, identical to the code's ``_get_gaes`` (the walk's end is terminal there too);
* the update: the code's "epochs" are not passes over the data: each of its 3 "epochs" is
  one gradient step on 32 transitions drawn *with replacement* from the trajectory, with
  advantages normalized over the whole trajectory and value targets ``r + gamma * V(s')``.
  So the PPO model's own rollout buffer is sized ``n_epochs * batch_size`` (96), filled with
  that many transitions drawn with replacement (agent ``rng``), and ``PPO.train`` runs with
  SB3 ``n_epochs=1``, ``batch_size`` 32 and ``normalize_advantage=False``: exactly 3
  gradient steps of 32 samples per trajectory, as in the code (SB3's meaning of 3 epochs
  would be 3 full passes, ~48 steps for a 500-step walk).

Defaults and their sources:

* PPO (the code, ``ppo_core.PPOAgent`` as built in ``rl_model_optimizer.py``): learning
  rate 1e-3, 3 "epochs" of minibatch 32 (see above), gamma 0.9, GAE lambda 0.99, clip 0.2,
  value coefficient 1.0, entropy coefficient 0.3, Adam epsilon 1e-5 (SB3's default for
  PPO too), no gradient clipping (``max_grad_norm`` = inf); networks with tanh activations,
  policy 2 x 20 units, value 3 x 20 units (separate networks, as in the code).
* Search (the code / METHODS.md section 7): 128 random starts, walks of at most 500 steps,
  stop at 75% stuck knobs, stochastic actions, reward = the model's prediction.
* Loop (AutoTVM's, which the code's tuner inherits): plan_size 64, last 5% of a plan random,
  the first plan random, failed configs fed as throughput 0.
* Adaptive sampling (the code's ``AdaptiveSampler``, METHODS.md section 7): ``k`` from 8 in
  steps of 8, at most the plan size; it grows while a step cuts the k-means loss by at
  least 2.5x, and the clustering of the first step that does not (where the code breaks
  out of its loop) is used.
* Cost model: XGBoost ``reg:squarederror`` with AutoTVM's tree parameters and AutoTVM's
  early stopping (Chameleon reuses AutoTVM's XGBoost cost model; :class:`XGBModel`).

Deviations (documented, deliberate):

* Cost-model features are the knob features (:class:`KnobFeaturizer`); the code's tuner
  uses AutoTVM's "itervar" features. Loop-level features cost about a millisecond per
  config here and a round predicts up to 64,000 walked configs.
* The policy/value networks are SB3's ``MlpPolicy`` (one linear head per knob); the code
  adds two 3-unit tanh layers and a softmax temperature of 0.1 in each knob's head. The
  clipped surrogate uses SB3's joint-action probability ratio (the product over knobs);
  the code clips each knob's ratio separately and sums the per-knob objectives. The
  observation is the knob part of KnobWalk-v0's (indices scaled by ``choices - 1``; the
  code divides by ``choices``); KnobWalk-v0's constant task features are left out, as in
  the code (one policy per task; values up to ~20 saturated the first tanh layer and
  slowed learning in the mechanism test).
* Adaptive sampling clusters all knobs scaled to [0, 1] and measures the best-predicted
  member of each cluster; the code clusters only the two knobs with the most choices (raw
  indices) and *synthesizes* a config per cluster (the centroid's values on those two knobs,
  random values seen among the proposals on the others; the paper's "sample synthesis").
  A member is always a valid, unmeasured proposal, so no synthesis is needed. The random
  slots are added after the ``k`` representatives (the code overwrites the last 3 of them).
  Note that the code's ``RLTuner`` builds its sampler but never passes it on, so its public
  RL tuner runs without adaptive sampling; the paper's Chameleon uses it, hence on here.

Cost (2 shared CPU cores, ``conv2d_nchw`` c=16 h=14 w=14 k=16 r=3 p=1, preset "compact"):
about 2.5 s of CPU per round with the defaults (mean walk 20-35 steps over 20 rounds: the
policy learns to walk longer, since every step earns a positive predicted reward). A walk
step costs ~0.26 ms and an update ~25 ms, so a round in which all 128 walks ran the full 500
steps would take ~20 s; ``n_starts`` and ``max_steps`` trade it down.

Randomness: every random choice comes from the agent's ``rng`` (starts, actions, minibatch
draws, k-means seeds). The few stable-baselines3 / PyTorch uses of global generators (the
networks' initialization, ``RolloutBuffer.get``'s shuffle) run inside
:func:`seeded_globals`, which seeds them from the agent's ``rng`` and restores their
previous state afterwards. PyTorch and XGBoost run on one thread: the networks are tiny
and the walk scores one config per step, where thread start-up costs more than it saves.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import gymnasium as gym
import numpy as np

from agents.base import register
from agents.model_based import EPS, INVALID_OPTION, N_INIT, PLAN_SIZE, ModelGuidedAgent
from agents.models.features import KnobFeaturizer
from agents.models.xgb import NUM_ROUNDS, XGBModel
from tune_gym.envs.knob_walk import KnobWalkEnv, walk
from tune_gym.options import Bool, Check, Float, Int, OptionError, check_int, show
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["RLPPOAgent", "adaptive_clusters", "adaptive_sample"]


def adaptive_clusters(points: np.ndarray, seed: int, k_start: int = 8, k_step: int = 8, k_max: int | None = None,
                      min_drop: float = 2.5, n_init: int = 10) -> np.ndarray:
    """Chameleon's adaptive k-means: the cluster label of each of ``points``.

    Rule (the code's ``AdaptiveSampler.sample``): fit k-means (scikit-learn,
    ``random_state=seed``) with ``k = k_start``; then with ``k + k_step`` clusters, and so
    on, while each step cuts the loss (inertia) by at least ``min_drop`` times; the
    clustering of the first step that does *not* is the result (the code breaks out of its
    loop after that fit and uses it). ``k`` never exceeds ``k_max`` (the code: the plan
    size) nor the number of distinct points; when the next step would, the last fit is
    kept. With at most ``k_start`` distinct points each distinct point is its own cluster.

    Args:
        points: ``n x d`` points (e.g. normalized knob vectors).
        seed: k-means seed.
        k_start, k_step, k_max, min_drop: the growth rule (Chameleon: 8, 8, plan size, 2.5).
        n_init: k-means restarts per ``k`` (scikit-learn's classic default, 10).

    Returns:
        ``n`` integer labels.
    """
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    points = np.asarray(points, dtype=np.float64)
    if len(points) == 0:
        return np.zeros(0, dtype=np.int64)
    distinct, labels = np.unique(points, axis=0, return_inverse=True)
    labels = labels.reshape(-1)
    limit = len(distinct) if k_max is None else min(k_max, len(distinct))
    if len(distinct) <= k_start or limit < k_start:
        return labels.astype(np.int64)

    def fit(k: int) -> Any:
        return KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(points)

    with threadpool_limits(1):  # a few dozen points: threads cost more than they save
        best = fit(k_start)
        while best.n_clusters + k_step <= limit:
            grown = fit(best.n_clusters + k_step)
            stopped = grown.inertia_ * min_drop > best.inertia_  # dropped by less than min_drop x
            best = grown
            if stopped:
                break
    return np.asarray(best.labels_, dtype=np.int64)


def adaptive_sample(points: np.ndarray, scores: np.ndarray, seed: int, k_start: int = 8, k_step: int = 8,
                    k_max: int | None = None, min_drop: float = 2.5, n_init: int = 10) -> list[int]:
    """Chameleon's adaptive sampling: one representative per cluster of :func:`adaptive_clusters`.

    Args:
        points: ``n x d`` points (e.g. normalized knob vectors).
        scores: ``n`` scores; a cluster's representative is its highest-scoring member.
        seed, k_start, k_step, k_max, min_drop, n_init: see :func:`adaptive_clusters`.

    Returns:
        Indices into ``points`` of the representatives, best score first.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = adaptive_clusters(points, seed, k_start, k_step, k_max, min_drop, n_init)
    reps = [int(members[np.argmax(scores[members])]) for members in
            (np.flatnonzero(labels == c) for c in np.unique(labels))]
    return sorted(reps, key=lambda i: -scores[i])


@contextlib.contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """Seed the global ``random``, NumPy and PyTorch generators, run PyTorch on one thread
    (the networks are tiny) and skip ``torch.distributions``' argument validation (a third of
    a PPO minibatch's time here; the actions are valid by construction); restore the
    generators, the thread count and the validation flag on exit."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    py_state, np_state, threads = random.getstate(), np.random.get_state(), torch.get_num_threads()
    with torch.random.fork_rng(devices=[]), unchecked_distributions():
        set_random_seed(seed)
        torch.set_num_threads(1)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
            torch.set_num_threads(threads)


@contextlib.contextmanager
def unchecked_distributions() -> Iterator[None]:
    """Skip ``torch.distributions``' argument validation inside (the flag is restored on exit):
    it costs a third of a PPO minibatch's time here, and a MultiDiscrete policy builds one
    distribution per action dimension (216 for ``MultiTune-v0`` at batch 8), which a policy's
    own actions always satisfy; nothing else changes (no random draw, no number)."""
    from torch.distributions import Distribution

    validate = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(validate)


def _layers(name: str, value: Any) -> list[int]:
    """A network's hidden layer widths (``pi_arch``, ``vf_arch``): a list of integers >= 1."""
    if not isinstance(value, (list, tuple)):
        raise OptionError(f"{name} must be a list of layer widths (integers >= 1), got {show(value)}")
    return [check_int(f"{name} layer width", width, 1) for width in value]


def _arch(help: str) -> Check:
    """The declaration of a list of hidden layer widths (:func:`_layers`)."""
    return Check(_layers, "list of integers >= 1", help=help)


class _KnobObservation(gym.ObservationWrapper):
    """KnobWalk-v0 observed through the knob part of its observation only.

    The code's policy sees only the knob indices scaled to [0, 1]; KnobWalk-v0 appends task
    features, constant within a task (one policy per task here) and as large as ~20, which
    would only saturate the first tanh layer.
    """

    def __init__(self, env: KnobWalkEnv) -> None:
        super().__init__(env)
        self.n_knobs = env.space.n_knobs
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n_knobs,), dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation[: self.n_knobs], dtype=np.float32)

    def observe(self, configs: np.ndarray) -> np.ndarray:
        """Observations of a batch of configs, ``n x n_knobs``."""
        walk_env: KnobWalkEnv = self.env.unwrapped  # type: ignore[assignment]
        return walk_env.observation(configs)[:, : self.n_knobs]


@register("rl-ppo", "Chameleon: PPO walks the knob space over an XGBoost regression model + adaptive sampling")
class RLPPOAgent(ModelGuidedAgent):
    """Chameleon's RL tuner (see the module docstring for every default's source). Options:
    ``tune-gym agents rl-ppo``; ``plan_size`` counts configs before adaptive sampling."""

    def __init__(self, plan_size: Annotated[int, PLAN_SIZE] = 64, eps: Annotated[float, EPS] = 0.05,
                 n_init: Annotated[int | None, N_INIT] = None, invalid: Annotated[str, INVALID_OPTION] = "zero",
                 num_rounds: Annotated[int | None, NUM_ROUNDS] = None,
                 n_starts: Annotated[int, Int(1, help="random start configs walked per round")] = 128,
                 max_steps: Annotated[int, Int(1, help="longest walk")] = 500,
                 stuck_fraction: Annotated[float, Float(0.0, 1.0, low_open=True, help="a walk stops once this "
                                                        "share of its movable knobs is stuck")] = 0.75,
                 adaptive_sampling: Annotated[bool, Bool(help="measure one representative per k-means cluster of "
                                                              "the plan")] = True,
                 learning_rate: Annotated[float, Float(0, low_open=True, help="PPO's Adam step size")] = 1e-3,
                 n_epochs: Annotated[int, Int(1, help="PPO gradient steps per trajectory (the code's "
                                                      "epochs)")] = 3,
                 batch_size: Annotated[int, Int(2, help="transitions drawn with replacement per gradient "
                                                        "step")] = 32,
                 gamma: Annotated[float, Float(0.0, 1.0, help="PPO's discount")] = 0.9,
                 gae_lambda: Annotated[float, Float(0.0, 1.0, help="PPO's GAE lambda")] = 0.99,
                 clip_range: Annotated[float, Float(0, low_open=True, help="PPO's clip range")] = 0.2,
                 vf_coef: Annotated[float, Float(0, help="PPO's value-loss weight")] = 1.0,
                 ent_coef: Annotated[float, Float(0, help="PPO's entropy-bonus weight")] = 0.3,
                 max_grad_norm: Annotated[float, Float(0, low_open=True, finite=False,
                                                       help="gradient-norm clip (inf: none, as in the "
                                                            "code)")] = math.inf,
                 pi_arch: Annotated[Sequence[int], _arch("hidden layer widths of the policy network")] = (20, 20),
                 vf_arch: Annotated[Sequence[int], _arch("hidden layer widths of the value network")] = (20, 20, 20),
                 ) -> None:
        super().__init__(plan_size, eps, n_init, invalid)
        self.num_rounds = num_rounds
        self.n_starts = n_starts
        self.max_steps = max_steps
        self.stuck_fraction = stuck_fraction
        self.adaptive_sampling = adaptive_sampling
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.ppo_options: dict[str, Any] = {
            "learning_rate": learning_rate, "gamma": gamma, "gae_lambda": gae_lambda, "clip_range": clip_range,
            "vf_coef": vf_coef, "ent_coef": ent_coef, "max_grad_norm": max_grad_norm,
            "n_steps": self.n_epochs * self.batch_size, "batch_size": self.batch_size, "n_epochs": 1,
            "normalize_advantage": False, "policy_kwargs": {"net_arch": {"pi": list(pi_arch), "vf": list(vf_arch)}},
        }

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.model = XGBModel("reg", self.num_rounds, seed=int(self.rng.integers(2**31)), nthread=1,
                              plan_size=self.plan_size)
        self._knob = KnobFeaturizer(space)
        self.ppo: Any = None  # the stable-baselines3 PPO model, created at the first search
        self._env: _KnobObservation | None = None
        self.n_updates = 0  # PPO updates so far (one per walked trajectory)
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
        """Walk and learn from ``n_starts`` random starts; the best-predicted unproposed
        configs seen, cut to one per cluster with adaptive sampling."""
        if n <= 0:
            return []
        seed = int(self.rng.integers(2**31))
        starts = self.space.sample_unique(self.rng, self.n_starts)
        with seeded_globals(seed):
            predicted = self.explore(starts)
        candidates = [c for c in predicted if c not in self.proposed]
        if not candidates:
            return []
        scores = np.asarray([predicted[c] for c in candidates])
        top = np.argsort(-scores, kind="stable")[:n]
        if not self.adaptive_sampling:
            return [candidates[i] for i in top]
        picked = adaptive_sample(self.space.normalized([candidates[i] for i in top]), scores[top],
                                 int(self.rng.integers(2**31)), k_max=self.plan_size)
        self._n_reps = len(picked)
        return [candidates[top[i]] for i in picked]

    def _make_plan(self, size: int) -> list[Config]:
        """The shared plan; with adaptive sampling, the representatives + the random slots."""
        self._n_reps = None
        plan = super()._make_plan(size)
        if self._n_reps is None:  # a random plan, or no adaptive sampling
            return plan
        n_random = round(float(np.clip(self.eps, 0.0, 1.0)) * size)
        return plan[: self._n_reps + n_random]

    # ------------------------------------------------------------------ PPO
    def explore(self, starts: Sequence[Config]) -> dict[Config, float]:
        """Walk the policy from each start in turn, one PPO update per walk; returns the
        prediction of every start and every config visited (call inside
        :func:`seeded_globals`)."""
        env = self.walk_env()
        if self.ppo is None:
            self.ppo = self._make_ppo(env)
        start_array = np.asarray(starts, dtype=np.int64).reshape(-1, self.space.n_knobs)
        predicted = dict(zip(starts, self.score(start_array).tolist()))
        for start in start_array:
            obs, actions, configs = self.walk_policy(env, start)
            rewards = np.asarray(self.score(configs), dtype=np.float64)  # the whole trajectory at once
            self.update(obs, actions, rewards)
            predicted.update(zip((tuple(int(v) for v in c) for c in configs), rewards.tolist()))
        return predicted

    def walk_policy(self, env: _KnobObservation, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One walk from ``start`` with actions sampled from the policy (agent ``rng``).

        Returns ``(observations, actions, configs reached)``, one row per step; the walk
        ends once :func:`walk` says stop (the stopping step included) or after
        ``max_steps``.
        """
        import torch

        policy = self.ppo.policy
        n_knobs = self.space.n_knobs
        config = np.asarray(start, dtype=np.int64).reshape(1, n_knobs)
        obs_rows, action_rows, config_rows = [], [], []
        with torch.no_grad():
            for _ in range(self.max_steps):
                obs = env.observe(config)
                latent = policy.mlp_extractor.forward_actor(policy.extract_features(torch.as_tensor(obs)))
                logits = policy.action_net(latent).numpy().reshape(n_knobs, 3)
                action = np.argmax(logits + self.rng.gumbel(size=logits.shape), axis=1)  # Gumbel-max sample
                config, _, stop = walk(self.space, config, action[None, :], self.stuck_fraction)
                obs_rows.append(obs[0])
                action_rows.append(action)
                config_rows.append(config[0])
                if stop[0]:
                    break
        return np.stack(obs_rows), np.stack(action_rows), np.stack(config_rows)

    def update(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """One PPO update on one trajectory (Chameleon's ``observe_all_and_learn``)."""
        import torch
        from stable_baselines3.common.buffers import RolloutBuffer

        ppo = self.ppo
        n = len(rewards)
        with torch.no_grad():
            values, log_probs, _ = ppo.policy.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
        values_np = values.numpy().reshape(-1)
        trajectory = RolloutBuffer(n, ppo.observation_space, ppo.action_space, device="cpu",
                                   gamma=ppo.gamma, gae_lambda=ppo.gae_lambda, n_envs=1)
        trajectory.observations[:, 0] = obs
        trajectory.actions[:, 0] = actions
        trajectory.rewards[:, 0] = rewards
        trajectory.values[:, 0] = values_np
        trajectory.log_probs[:, 0] = log_probs.numpy()
        trajectory.episode_starts[0, 0] = 1.0
        trajectory.pos, trajectory.full = n, True
        trajectory.compute_returns_and_advantage(last_values=torch.zeros(1), dones=np.ones(1))
        advantages = trajectory.advantages[:, 0]
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)  # over the trajectory
        targets = rewards + ppo.gamma * np.append(values_np[1:], 0.0)  # the code's value target

        idx = self.rng.integers(0, n, size=self.n_epochs * self.batch_size)  # with replacement
        buffer = ppo.rollout_buffer
        buffer.reset()
        buffer.observations[:, 0] = obs[idx]
        buffer.actions[:, 0] = actions[idx]
        buffer.rewards[:, 0] = rewards[idx]
        buffer.values[:, 0] = values_np[idx]
        buffer.log_probs[:, 0] = trajectory.log_probs[idx, 0]
        buffer.advantages[:, 0] = advantages[idx]
        buffer.returns[:, 0] = targets[idx]
        buffer.pos, buffer.full = buffer.buffer_size, True
        ppo.train()  # SB3 n_epochs=1: n_epochs minibatches of batch_size
        self.n_updates += 1

    def walk_env(self) -> _KnobObservation:
        """This task's KnobWalk env, observed through its knob part only (as in the code)."""
        if self._env is None:
            self._env = _KnobObservation(KnobWalkEnv(self.task, self.space.preset, reward_fn=self.score,
                                                     max_steps=self.max_steps, stuck_fraction=self.stuck_fraction))
        return self._env

    def _make_ppo(self, env: _KnobObservation) -> Any:
        from stable_baselines3 import PPO
        from stable_baselines3.common.logger import Logger

        ppo = PPO("MlpPolicy", env, device="cpu", verbose=0, seed=int(self.rng.integers(2**31)),
                  **self.ppo_options)
        ppo.set_logger(Logger(folder=None, output_formats=[]))  # train() logs; learn() is not used
        return ppo
