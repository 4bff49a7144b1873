"""A gymnasium vector env as a stable-baselines3 ``VecEnv``, for the native vector env of ``Tune-v0``.

SB3 steps its own ``VecEnv`` type and has no adapter for gymnasium's ``VectorEnv``; wrapping
each sub-env in a ``DummyVecEnv`` would give up what a native vector env saves. :class:`SB3VecEnv`
is that adapter::

    venv = gymnasium.make_vec("tune_gym/Tune-v0", num_envs=64, task="resnet18:5", preset="compact",
                              autoreset_mode="same_step")
    model = stable_baselines3.PPO("MultiInputPolicy", SB3VecEnv(venv))

SB3's contract, and how it is met: when a sub-env's episode ends, ``step_wait`` returns the next
episode's first observation in its place, the final one in ``infos[i]["terminal_observation"]``
and ``infos[i]["TimeLimit.truncated"]`` True when it was cut short (truncated, not terminated),
so PPO bootstraps the value of a cut episode. That is gymnasium's ``same_step`` autoreset
(``metadata["autoreset_mode"]``), which the wrapped env must use (a clear error otherwise).
``infos`` is one dict per sub-env of the vector ``info``'s entries (those its ``_key`` mask
marks). Seeds set with ``seed()`` go to the next ``reset()``; reset options are refused (the
env takes none). The sub-envs of a native vector env are no objects of their own: ``get_attr``
answers with the vector env's attribute for each of them, ``env_is_wrapped`` with False,
``env_method("action_masks")`` with the vector env's masks (``MultiTune-v0``'s, for
sb3-contrib's MaskablePPO), and ``set_attr`` and any other ``env_method`` are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from tune_gym.options import OptionError

__all__ = ["SB3VecEnv"]


class SB3VecEnv(VecEnv):
    """``venv`` (a gymnasium ``VectorEnv`` with ``same_step`` autoreset) as an SB3 ``VecEnv``
    (see the module docstring)."""

    def __init__(self, venv: VectorEnv) -> None:
        mode = getattr(venv, "metadata", {}).get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise OptionError(f"SB3VecEnv needs a vector env with same-step autoreset (SB3's convention), not {mode}; "
                              "make it with autoreset_mode='same_step'")
        self.venv = venv
        self._actions: np.ndarray | None = None
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)

    def reset(self) -> VecEnvObs:
        if any(self._options):
            raise OptionError("SB3VecEnv: reset options are not supported (Tune-v0 takes none)")
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        obs, info = self.venv.reset(seed=seeds)  # type: ignore[arg-type]  # vector envs take one seed per sub-env
        self.reset_infos = _split(info, self.num_envs)
        self._reset_seeds()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminated, truncated, info = self.venv.step(self._actions)
        dones = terminated | truncated
        infos = _split(info, self.num_envs)
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = info["final_obs"][i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            self.reset_infos[i] = {k: v for k, v in infos[i].items() if k not in _SB3_KEYS}
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The vector env's attribute, once per requested sub-env."""
        return [getattr(self.venv, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise OptionError(f"SB3VecEnv: cannot set {attr_name!r} of single sub-envs: they are one vector env")

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Only ``action_masks`` (what sb3-contrib's MaskablePPO calls), of a vector env that has
        it: its masks, one per requested sub-env."""
        wants_masks = method_name == "action_masks" and not method_args and not method_kwargs
        if wants_masks and hasattr(self.venv, "action_masks"):
            masks = self.venv.action_masks()
            return [masks[i] for i in self._indices(indices)]
        raise OptionError(f"SB3VecEnv: cannot call {method_name!r} of single sub-envs: they are one vector env")

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def _indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else list(indices)


#: Keys the adapter adds to a sub-env's info (not part of the reset info SB3 keeps).
_SB3_KEYS = ("terminal_observation", "TimeLimit.truncated", "final_obs", "final_info")


def _split(info: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """A vector ``info`` (arrays with ``_key`` masks) as one dict per sub-env."""
    keys = [k for k in info if not k.startswith("_") and k not in ("final_obs", "final_info")]
    columns = [info[k].tolist() if info[k].ndim == 1 else list(info[k]) for k in keys]
    masks = [info.get(f"_{k}") for k in keys]
    if all(m is None or m.all() for m in masks):
        return [dict(zip(keys, row)) for row in zip(*columns)] if keys else [{} for _ in range(n)]
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, column, mask in zip(keys, columns, masks):
        for i, value in enumerate(column):
            if mask is None or mask[i]:
                out[i][key] = value
    return out
