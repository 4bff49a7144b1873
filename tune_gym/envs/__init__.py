"""Gymnasium environments of tune_gym and their registration."""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__all__ = ["MAX_EPISODE_STEPS", "register_envs"]

#: The step limit registered with ``Tune-v0`` (``max_episode_steps``; its module docstring's
#: "Episode rules"). Defined here so that registering imports nothing of the environments.
MAX_EPISODE_STEPS = 1024


def register_envs() -> None:
    """Register ``tune_gym/Tune-v0`` (with its step limit, :data:`MAX_EPISODE_STEPS`, and its
    native vector env for replay, :class:`~tune_gym.envs.tune_vector.TuneVectorEnv`) and
    ``tune_gym/KnobWalk-v0`` and ``tune_gym/MultiTune-v0`` (the same step limit; its native
    vector env, :class:`~tune_gym.envs.multi_vector.MultiTuneVectorEnv`; idempotent)."""
    if "tune_gym/Tune-v0" not in registry:
        register(id="tune_gym/Tune-v0", entry_point="tune_gym.envs.tune_env:make_tune_env",
                 vector_entry_point="tune_gym.envs.tune_vector:TuneVectorEnv", max_episode_steps=MAX_EPISODE_STEPS)
    if "tune_gym/KnobWalk-v0" not in registry:
        register(id="tune_gym/KnobWalk-v0", entry_point="tune_gym.envs.knob_walk:KnobWalkEnv")
    if "tune_gym/MultiTune-v0" not in registry:
        register(id="tune_gym/MultiTune-v0", entry_point="tune_gym.envs.multi_task:make_multi_tune_env",
                 vector_entry_point="tune_gym.envs.multi_vector:MultiTuneVectorEnv",
                 max_episode_steps=MAX_EPISODE_STEPS)


register_envs()
