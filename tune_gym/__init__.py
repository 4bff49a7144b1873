"""tune_gym: tensor-program auto-tuning as Gymnasium environments.

Importing the package registers ``tune_gym/Tune-v0`` with Gymnasium, so
``gymnasium.make("tune_gym/Tune-v0", task="resnet18:1")`` works after ``import tune_gym``.
"""

from __future__ import annotations

from tune_gym import envs as _envs  # noqa: F401  (registers the environments)
from tune_gym.tasks import SUITES, Task

__version__ = "0.1.0"
__all__ = ["SUITES", "Task", "__version__"]
