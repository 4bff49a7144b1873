"""Live measurement on this CPU: real builds, real timings, failures recorded and survived."""

from __future__ import annotations

import os
import signal
import sys

import cloudpickle
import numpy as np
import pytest

from tune_gym.measure.live import LiveBackend


def test_live_measurement_is_real_and_checked(dense_task, dense_space):
    configs = dense_space.sample_unique(np.random.default_rng(0), 3)
    with LiveBackend(repeat=3, min_repeat_ms=5) as backend:
        results = backend.measure(dense_task, dense_space, configs)
    assert len(results) == 3
    for r in results:
        assert r.ok, r.error_msg
        assert len(r.costs) == 3 and all(c > 0 for c in r.costs)
        assert 0.01 < r.gflops < 2000
        assert r.flops == dense_task.flops and r.build_secs > 0 and r.run_secs > 0
    assert results[0].extra.get("checked") is True  # the first kernel was compared with PyTorch
    assert not any(r.extra.get("checked") for r in results[1:])


@pytest.mark.heavy
def test_check_all_checks_every_kernel(dense_task, dense_space):
    configs = dense_space.sample_unique(np.random.default_rng(1), 3)
    with LiveBackend(repeat=1, min_repeat_ms=1, check_all=True) as backend:
        results = backend.measure(dense_task, dense_space, configs)
    assert all(r.ok and r.extra.get("checked") is True for r in results)


def test_compact_cuda_spaces_of_every_arch_are_the_sm75_space():
    """TVM 0.27 cannot add sm_80+ pipeline stages to the compact tiling (no cache reads): the
    compact space is generated as for sm_75, so its knobs and labels carry over."""
    from tune_gym.datasets.dataset import space_fingerprint
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    base = KnobSpace.for_task(Task.parse("resnet18:9@cuda"), "compact")
    for arch in ("sm_80", "sm_90a"):
        space = KnobSpace.for_task(Task.parse(f"resnet18:9@cuda&arch={arch}"), "compact")
        assert [(k.name, k.choices) for k in space.knobs] == [(k.name, k.choices) for k in base.knobs]
        assert space.size == base.size and space_fingerprint(space) != space_fingerprint(base)  # other task
        assert space.target.attrs["arch"] == arch  # kernels are built for the task's own arch


def _crashing_build(job):
    mod, target = job
    if "T_matmul_NT" in mod.script() and os.environ.get("TUNE_GYM_TEST_CRASH") == "1":
        os.kill(os.getpid(), signal.SIGSEGV)
    from tune_gym.measure.workers import build_artifact

    return build_artifact(job)


def _wrong_run(job):
    from tune_gym.measure import workers

    out = workers.run_artifact(job)
    if job.get("check_task"):
        out["check_error"] = "1 of 1024 outputs differ from PyTorch (injected)"
    return out


@pytest.mark.heavy
def test_worker_crash_is_recorded_and_run_goes_on(dense_task, dense_space, monkeypatch):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    from tune_gym.measure import workers

    monkeypatch.setattr(workers, "build_artifact", _crashing_build)
    configs = dense_space.sample_unique(np.random.default_rng(1), 2)
    with LiveBackend(repeat=1, min_repeat_ms=1) as backend:
        monkeypatch.setenv("TUNE_GYM_TEST_CRASH", "1")
        crashed = backend.measure(dense_task, dense_space, configs)
        assert [r.error for r in crashed] == ["worker_crash", "worker_crash"]
        assert "terminated" in crashed[0].error_msg.lower()
        # The pool restarts its workers: the next batch measures normally.
        monkeypatch.setenv("TUNE_GYM_TEST_CRASH", "0")
        again = backend.measure(dense_task, dense_space, configs)
        assert all(r.ok for r in again), [r.error_msg for r in again]


@pytest.mark.heavy
def test_wrong_result_is_flagged_and_checking_continues(dense_task, dense_space, monkeypatch):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    from tune_gym.measure import workers

    monkeypatch.setattr(workers, "run_artifact", _wrong_run)
    configs = dense_space.sample_unique(np.random.default_rng(2), 2)
    with LiveBackend(repeat=1, min_repeat_ms=1) as backend:
        results = backend.measure(dense_task, dense_space, configs)
    assert all(r.error == "wrong_result" for r in results)  # each is checked until one passes
    assert "differ from PyTorch" in results[0].error_msg


def test_build_timeout_is_recorded(dense_task, dense_space):
    configs = dense_space.sample_unique(np.random.default_rng(3), 1)
    with LiveBackend(build_timeout=0.001) as backend:
        (result,) = backend.measure(dense_task, dense_space, configs)
    assert result.error == "timeout" and "build exceeded" in result.error_msg


def test_invalid_cuda_config_is_not_built():
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    task = Task.parse("resnet18:1@cuda")
    space = KnobSpace.for_task(task, "full")
    cfg = next(c for c in space.sample(np.random.default_rng(0), 50) if not space.is_valid(c))
    with LiveBackend() as backend:
        (result,) = backend.measure(task, space, [cfg])
    assert result.error == "invalid" and result.gflops == 0.0


@pytest.mark.heavy
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="TVM runs at most one thread per available CPU")
def test_cpu_kernels_run_on_the_target_cores(dense_task, dense_space, monkeypatch):
    """TVM alone would size its pool to half the logical CPUs on x86-64 (1 on a 2-vCPU host): the
    runner uses the target's num-cores, or the threads option, or TVM_NUM_THREADS where set, and
    says so in each result."""
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)  # the suite sets it (conftest)
    config = dense_space.sample_unique(np.random.default_rng(2), 1)
    one = dense_task.with_target("llvm&cores=1")
    two = dense_task.with_target("llvm&cores=2")
    with LiveBackend(repeat=1, min_repeat_ms=1) as backend:
        assert backend.threads_for(one) == 1 and backend.threads_for(two) == 2
        assert backend.measure(two, dense_space, config)[0].extra["threads"] == 2
        assert backend.measure(one, dense_space, config)[0].extra["threads"] == 1  # runner restarted
    with LiveBackend(repeat=1, min_repeat_ms=1, threads=1) as backend:
        assert backend.threads_for(two) == 1
        assert backend.measure(two, dense_space, config)[0].extra["threads"] == 1
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    with LiveBackend(repeat=1, min_repeat_ms=1) as backend:
        assert backend.threads_for(two) == 1
        assert backend.measure(two, dense_space, config)[0].extra["threads"] == 1
