"""tune_gym: tensor-program auto-tuning as Gymnasium environments."""

from __future__ import annotations

__version__ = "0.1.0"
