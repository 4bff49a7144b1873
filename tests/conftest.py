"""Shared fixtures: small real tasks that build and measure in well under a second."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TUNE_GYM_CORES", "2")
# One pytest-xdist worker per core: a live kernel runs on its worker's core (the live backend
# honours TVM_NUM_THREADS), so a parallel kernel never waits on a core another test holds.
os.environ.setdefault("TVM_NUM_THREADS", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seeds", default="0", metavar="SEEDS",
        help="seeds given to tests that take `train_seed` (their assertion rests on a training or search "
             "outcome): N, A-B (inclusive) or a comma list; default 0. A bound such a test asserts must "
             "hold over every seed of `--seeds 0-19`, since another CPU's float path is, to the test, "
             "another seed (scripts/test_margins.py).")


def _parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise pytest.UsageError(f"--seeds: {part.strip()!r} is not N or A-B") from None
    return seeds


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "train_seed" in metafunc.fixturenames:
        seeds = _parse_seeds(metafunc.config.getoption("seeds"))
        metafunc.parametrize("train_seed", seeds, ids=[f"seed{s}" for s in seeds])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # `-m seeded` selects them (scripts/test_margins.py)
        if "train_seed" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.seeded)


@pytest.fixture
def record_property(record_property):
    """pytest's ``record_property``, taking NumPy scalars as plain numbers: a property travels
    from a pytest-xdist worker to its controller, which serializes only Python builtins."""

    def record(name: str, value: object) -> None:
        record_property(name, value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value)

    return record


@pytest.fixture(autouse=True, scope="session")
def _one_thread_deterministic():
    """What makes training reproducible on one host, whatever its core count: torch on one thread
    with deterministic algorithms, and BLAS / OpenMP pools (NumPy, scikit-learn) of one thread.
    (Models in tests are small: one thread also avoids thread-pool contention on a busy host.)
    Nothing here makes two CPUs agree to the bit; seeded tests hold over seeds instead."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    with threadpool_limits(limits=1):
        yield


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


@pytest.fixture
def write_results():
    """``write(path, suite, runs)``: a results journal holding ``runs`` of the
    :class:`benchmarks.leaderboard.suite.Suite` ``suite`` under a header as ``tune-gym bench`` writes
    it, less the host fingerprint (which loads TVM), for tests of the readers of results."""
    import dataclasses
    import json

    from benchmarks.leaderboard.results import RESULTS_FORMAT, RESULTS_VERSION

    def write(path, suite, runs):
        stored = {k: v for k, v in dataclasses.asdict(suite).items() if k != "path"}
        header = {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "suite_digest": suite.digest, "suite": stored}
        path.write_text("".join(json.dumps(line) + "\n" for line in [header, *runs]))
        return path

    return write
