"""Measurements that the agents of one network run share (``tune_network(shared_model=True)``).

A network's kernels are tuned by one agent each (:func:`agents.network.tune_network`), and each
agent's cost model would learn only from its own kernel's few dozen trials. MetaSchedule instead
trains one cost model on every kernel's measurements. :class:`SharedRows` gives tune_gym's
agents the same: each agent publishes its kernel's rows (model inputs and throughput
normalized by that kernel's best so far) and trains on its own rows plus its peers'. Rows are
shared only between agents whose model inputs mean the same thing, which the ``key`` names
(for ``meta-bo``: the checkpoint whose graph network computed the embeddings).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SharedRows"]


class SharedRows:
    """Per model key and task, the latest rows an agent published (``put`` replaces them)."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}

    def put(self, key: str, task: str, x: np.ndarray, y: np.ndarray) -> None:
        """Publish ``task``'s rows: inputs ``x`` (``n x d``) and labels ``y`` (``n``, each in
        [0, 1]: throughput over the task's best so far, failures 0).

        Raises:
            ValueError: shapes that disagree, or labels outside [0, 1] or not finite.
        """
        x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)
        if x.ndim != 2 or y.shape != (len(x),):
            raise ValueError(f"SharedRows.put({task}): x must be n x d and y of length n, got {x.shape} and {y.shape}")
        if not np.isfinite(y).all() or (y < 0).any() or (y > 1).any():
            raise ValueError(f"SharedRows.put({task}): labels must be finite and in [0, 1]")
        rows = self._rows.setdefault(key, {})
        other = next(iter(v[0] for t, v in rows.items() if t != task), None)
        if other is not None and other.shape[1] != x.shape[1]:
            raise ValueError(f"SharedRows.put({task}): {x.shape[1]} input columns, the key's other tasks have "
                             f"{other.shape[1]}")
        rows[task] = (x.copy(), y.copy())

    def rows(self, key: str, exclude: str) -> tuple[np.ndarray, np.ndarray]:
        """Every task's rows under ``key`` but ``exclude``'s, in the order the tasks first
        published (``(0 x 0, 0)`` arrays when there are none)."""
        parts = [v for t, v in self._rows.get(key, {}).items() if t != exclude]
        if not parts:
            return np.zeros((0, 0), dtype=np.float32), np.zeros(0, dtype=np.float32)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def tasks(self, key: str) -> list[str]:
        """The tasks that published under ``key``."""
        return list(self._rows.get(key, {}))
