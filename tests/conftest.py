"""Shared fixtures: small real tasks that build and measure in well under a second."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TUNE_GYM_CORES", "2")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Torch models in tests are small: one thread avoids thread-pool contention on a busy host."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def dense_task():
    from tune_gym.tasks import Task

    return Task.make("dense", m=32, n=32, k=32, weights="given")  # the layout tests/data was measured in


@pytest.fixture(scope="session")
def dense_space(dense_task):
    from tune_gym.space import KnobSpace

    return KnobSpace.for_task(dense_task, "compact")


@pytest.fixture(scope="session")
def live_backend():
    """One fast-settings live backend shared by tests (its worker pools start once)."""
    from tune_gym.measure.live import LiveBackend

    backend = LiveBackend(repeat=1, min_repeat_ms=1)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def conv_task():
    from tune_gym.tasks import Task

    return Task.make("conv2d_nchw", c=16, h=14, w=14, k=16, r=3, p=1)
