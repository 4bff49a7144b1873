"""Gymnasium environments of tune_gym and their registration."""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register ``tune_gym/Tune-v0`` and ``tune_gym/KnobWalk-v0`` (idempotent)."""
    if "tune_gym/Tune-v0" not in registry:
        register(id="tune_gym/Tune-v0", entry_point="tune_gym.envs.tune_env:TuneEnv")
    if "tune_gym/KnobWalk-v0" not in registry:
        register(id="tune_gym/KnobWalk-v0", entry_point="tune_gym.envs.knob_walk:KnobWalkEnv")


register_envs()
