"""``rl-policy``: a policy trained across tasks on ``MultiTune-v0``, tuning a task of ``Tune-v0``.

``scripts/train_rl.py`` trains stable-baselines3 PPO or sb3-contrib MaskablePPO on a split's
train part and writes the policy as ``policy.zip`` (SB3's format) with ``policy.json`` beside it
(:func:`write_meta`: the algorithm, split, seed, steps, and the env's batch size, budget and
reward normalization); ``scripts/cleanrl_ppo.py`` trains a plain-PyTorch PPO
(:class:`~agents.models.masked_policy.MaskedPolicy`, algo ``cleanrl-ppo``) and writes
``policy.pt`` with the same ``policy.json``. This agent loads either (option ``checkpoint``, the
``.zip`` or ``.pt``) and proposes batches like any agent, so ``tune-gym bench`` scores a trained
policy on held-out tasks with the same runner, replay data and metrics as the search agents.

What the policy sees is rebuilt from what the agent observed, exactly as ``MultiTune-v0`` builds
it (:func:`tune_gym.envs.multi_task.observation`): the task's features, the best config so far
and the last batch in canonical values, the last batch's GFLOPS over the best measured so far
and which ran, the best GFLOPS on a fixed log scale and the fraction of the budget used; all of
it known while tuning, so the policy needs nothing a search agent does not have (no reference,
no optimum) and runs on any task the canonical encoding holds. Parts of the observation the
policy was trained without (``policy.json``'s ``hide``, e.g. the task features) are zeroed
here as they were in training (:func:`hide_parts`). ``budget`` (default: the
training budget) sets the budget fraction the policy sees.

Each ``propose(n)`` samples the policy (with the agent's seed) and decodes its rows into the
task's configs (:class:`~tune_gym.envs.canonical.CanonicalCodec`); configs proposed before are
dropped and the policy is sampled again, up to ``resample`` more times, to fill the batch; a
batch that stays short is proposed short (the policy's own choices only, no random filling).
A task whose space the canonical encoding cannot hold is declined
(:class:`~agents.base.NotApplicable`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from agents.base import Agent, NotApplicable, register
from tune_gym.envs.canonical import N_SLOTS, CanonicalCodec
from tune_gym.envs.multi_task import observation, observation_slices, task_observation
from tune_gym.errors import SpaceError
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Bool, Check, Int, OptionError, check_int, show
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["ALGOS", "MASKED_ALGOS", "RLPolicyAgent", "hide_parts", "load_policy", "meta_path", "write_meta"]

#: The algorithms a policy can be trained with: id -> (module, class).
ALGOS = {"ppo": ("stable_baselines3", "PPO"), "maskable-ppo": ("sb3_contrib", "MaskablePPO"),
         "cleanrl-ppo": ("agents.models.masked_policy", "MaskedPolicy")}
#: The algorithms whose policy takes the action masks.
MASKED_ALGOS = ("maskable-ppo", "cleanrl-ppo")
#: The file suffix of each algorithm's saved policy.
SUFFIX = {"ppo": ".zip", "maskable-ppo": ".zip", "cleanrl-ppo": ".pt"}
#: The fields of ``policy.json``.
META_FIELDS = ("algo", "split", "seed", "timesteps", "batch_size", "budget", "reward_norm")


def meta_path(checkpoint: str | Path) -> Path:
    """The metadata file of a policy checkpoint: ``policy.zip`` -> ``policy.json``."""
    return Path(checkpoint).with_suffix(".json")


def write_meta(checkpoint: str | Path, meta: dict[str, Any]) -> None:
    """Write a checkpoint's metadata (every field of :data:`META_FIELDS`, and any others)."""
    missing = [k for k in META_FIELDS if k not in meta]
    if missing:
        raise ValueError(f"policy metadata lacks {', '.join(missing)}")
    meta_path(checkpoint).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def algo_class(algo: str) -> Any:
    """The SB3 class of an algorithm id of :data:`ALGOS`."""
    if algo not in ALGOS:
        raise OptionError(f"algorithm must be one of {', '.join(ALGOS)}, not {show(algo)}")
    module, name = ALGOS[algo]
    return getattr(importlib.import_module(module), name)


def hide_parts(obs: np.ndarray, hide: Sequence[str], batch_size: int) -> np.ndarray:
    """Zero the observation parts named in ``hide`` (names of
    :func:`~tune_gym.envs.multi_task.observation_slices`) along the last axis, in place;
    returns ``obs``."""
    if hide:
        slices = observation_slices(batch_size)
        for name in hide:
            obs[..., slices[name]] = 0.0
    return obs


def load_policy(checkpoint: str | Path) -> tuple[Any, dict[str, Any]]:
    """A trained policy and its metadata; a clear error names a missing or bad file."""
    path = Path(checkpoint)
    if path.suffix not in (".zip", ".pt") or not path.is_file():
        raise OptionError(f"rl-policy: checkpoint {str(path)!r} is not a policy .zip or .pt file "
                          "(scripts/train_rl.py writes <run>/policy.zip, scripts/cleanrl_ppo.py <run>/policy.pt)")
    meta_file = meta_path(path)
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError) as err:
        raise OptionError(f"rl-policy: cannot read the policy's metadata {meta_file}: {err}") from None
    missing = [k for k in META_FIELDS if k not in meta] if isinstance(meta, dict) else list(META_FIELDS)
    if missing:
        raise OptionError(f"rl-policy: {meta_file}: missing field {missing[0]!r}")
    if meta["algo"] in SUFFIX and SUFFIX[meta["algo"]] != path.suffix:
        raise OptionError(f"rl-policy: {meta_file}: algo {meta['algo']!r} saves {SUFFIX[meta['algo']]} files, "
                          f"not {path.name}")
    bad = [name for name in meta.get("hide", []) if name not in observation_slices(1)]
    if bad:
        raise OptionError(f"rl-policy: {meta_file}: field 'hide': {bad[0]!r} is not an observation part")
    model = algo_class(meta["algo"]).load(str(path), device="cpu")
    return model, meta


def _check_checkpoint(name: str, checkpoint: Any) -> str:
    if not isinstance(checkpoint, str) or not checkpoint:
        raise OptionError("rl-policy needs option 'checkpoint', the path of a trained policy (.zip or .pt)")
    return checkpoint


@register("rl-policy", "a PPO / MaskablePPO policy trained across tasks on MultiTune-v0 (scripts/train_rl.py, "
                       "scripts/cleanrl_ppo.py)")
class RLPolicyAgent(Agent):
    """A trained ``MultiTune-v0`` policy as a search agent (see the module docstring; options:
    ``tune-gym agents rl-policy``)."""

    def __init__(self, checkpoint: Annotated[str, Check(_check_checkpoint, "path of a policy .zip or .pt",
                                                        help="the trained policy (its .json beside it)")] = "",
                 budget: Annotated[int | None, Int(1, none=True, help="the trial budget the policy is told about "
                                                                      "(None: its training budget)")] = None,
                 deterministic: Annotated[bool, Bool(help="take the policy's most likely action instead of "
                                                          "sampling it")] = False,
                 resample: Annotated[int, Int(0, help="extra samples of the policy per batch to replace repeated "
                                                      "configs")] = 4) -> None:
        self.checkpoint = checkpoint
        self.model, self.meta = load_policy(checkpoint)
        self.budget = budget if budget is not None else check_int("budget", self.meta["budget"], 1)
        self.deterministic = deterministic
        self.resample = resample
        self.batch_size = int(self.meta["batch_size"])
        self.masked = self.meta["algo"] in MASKED_ALGOS
        self.hide = tuple(self.meta.get("hide", ()))

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        try:
            self.codec = CanonicalCodec(space)
        except SpaceError as err:
            raise NotApplicable(f"rl-policy: the canonical encoding cannot hold this space: {err}") from None
        self._task_obs = task_observation(task, self.codec)
        self._default_row = self.codec.encode(np.zeros((1, space.n_knobs), dtype=np.int64))[0]
        self._best: tuple[Config | None, float] = (None, 0.0)
        self._last_rows = np.zeros((self.batch_size, N_SLOTS), dtype=np.int64)
        self._last_gflops = np.zeros(self.batch_size, dtype=np.float64)
        self._last_valid = np.zeros(self.batch_size, dtype=np.float32)

    def observation(self) -> np.ndarray:
        """What the policy sees now (``MultiTune-v0``'s observation of this run)."""
        best_cfg, best_gflops = self._best
        best_row = self.codec.encode(np.asarray([best_cfg]))[0] if best_cfg is not None else self._default_row
        obs = observation(self._task_obs, best_row, self._last_rows, self._last_gflops, self._last_valid,
                          best_gflops, len(self.seen) / self.budget)
        return hide_parts(obs, self.hide, self.batch_size)

    def propose(self, n: int) -> list[Config]:
        import torch

        from agents.rl import seeded_globals

        out: list[Config] = []
        obs = self.observation()
        masks = np.tile(self.codec.mask(), self.batch_size) if self.masked else None
        with seeded_globals(int(self.rng.integers(2**31))), torch.no_grad():
            for _ in range(1 + self.resample):
                kwargs = {"action_masks": masks} if self.masked else {}
                action, _ = self.model.predict(obs, deterministic=self.deterministic, **kwargs)
                for row in self.codec.decode(np.asarray(action, dtype=np.int64).reshape(-1, N_SLOTS)):
                    config = tuple(int(v) for v in row)
                    if config not in self.proposed and config not in out:
                        out.append(config)
                if len(out) >= n:
                    break
        out = out[:n]
        self.proposed.update(out)
        return out

    def observe(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        super().observe(configs, results)
        if not configs:
            return
        for cfg, res in zip(configs, results):
            if res.ok and res.gflops > self._best[1]:
                self._best = (tuple(cfg), float(res.gflops))
        batch = list(zip(configs, results))[: self.batch_size]
        self._last_rows[:] = 0
        self._last_rows[: len(batch)] = self.codec.encode(np.asarray([c for c, _ in batch], dtype=np.int64))
        self._last_gflops[:] = 0
        self._last_gflops[: len(batch)] = [r.gflops if r.ok else 0.0 for _, r in batch]
        self._last_valid[:] = 0
        self._last_valid[: len(batch)] = [r.ok for _, r in batch]

    def describe(self) -> dict[str, Any]:
        digest = hashlib.sha256(Path(self.checkpoint).read_bytes()).hexdigest()[:16]
        return {"checkpoint": self.checkpoint, "sha256": digest, **{k: self.meta[k] for k in META_FIELDS}}
