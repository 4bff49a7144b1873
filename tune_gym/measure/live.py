"""Live measurement: build with TVM in worker processes, time on this machine's CPU (or GPU).

Design:
    * Builds run in a persistent pool of ``build_workers`` processes (TVM's
      ``PopenPoolExecutor``), in parallel, each with a per-config timeout. A crash or hang
      kills only that worker; the config is recorded as ``worker_crash`` / ``timeout`` and
      the pool restarts the worker for the next config. Workers are recycled every
      ``recycle_after`` jobs to bound TVM's per-process memory growth.
    * Timing runs one kernel at a time in a single runner process (also isolated, with its
      own timeout), with TVM's ``time_evaluator`` (``number`` calls per repeat, ``repeat``
      repeats, each repeat at least ``min_repeat_ms``), or with the adaptive evaluator.
    * The first kernel of each task that runs is checked against PyTorch on random inputs;
      a mismatch is recorded as ``wrong_result`` and the next running kernel is checked
      again, until one passes.
    * Tasks with ``weights=packed``: the builder removes the schedule's weight layout rewrite
      blocks as MetaSchedule's builder does, and the runner passes the kernel its weights
      pre-packed with the rewrite's index map (:mod:`tune_gym.measure.workers`), so the
      transform is not timed. The check runs that same kernel on the packed copy of the
      inputs PyTorch gets.

MetaSchedule's ``LocalBuilder`` was not used: it starts a fresh process pool for every
batch, and each fresh worker imports TVM's tensor intrinsics (tens of seconds on this
machine), which would dominate the measurement time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

from tune_gym.measure.result import MeasureResult
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.targets import host_cores
from tune_gym.tasks.task import Task

__all__ = ["BuiltBatch", "LiveBackend", "LiveConfig", "ProcessBackend", "build_batch", "error_message",
           "make_build_pool"]


@dataclass
class LiveConfig:
    """Settings of the live backend.

    Attributes:
        number: kernel calls averaged into one cost.
        repeat: costs recorded per config.
        min_repeat_ms: each repeat lasts at least this long (``number`` grows to fit).
        flush_cache: flush the CPU cache before each repeat (TVM's cache_flush preproc).
        build_workers: parallel build processes (default: the host's core count).
        build_timeout: seconds before a build is killed.
        run_timeout: seconds before a timing run is killed.
        check_correctness: compare the first running kernel of each task with PyTorch.
        adaptive: AdaTune's adaptive evaluator instead of fixed repeats (None = off); a dict
            of :func:`tune_gym.measure.adaptive.adaptive_costs` options.
        recycle_after: jobs per worker process before it is restarted.
        seed: seed of the random inputs.
    """

    number: int = 1
    repeat: int = 3
    min_repeat_ms: int = 50
    flush_cache: bool = False
    build_workers: int | None = None
    build_timeout: float = 60.0
    run_timeout: float = 30.0
    check_correctness: bool = True
    adaptive: dict[str, Any] | None = None
    recycle_after: int = 256
    seed: int = 0

    @property
    def run_limit(self) -> float:
        """Seconds a timing run may take: ``run_timeout``, or at least 180 s with the adaptive
        evaluator (up to 500 runs of a slow kernel)."""
        return self.run_timeout if self.adaptive is None else max(self.run_timeout, 180.0)


class ProcessBackend:
    """The lifecycle of a backend that owns worker processes: :meth:`close` ends them, on
    ``with`` exit and (best effort) on collection; copies of an env share the one handle."""

    def close(self) -> None:
        raise NotImplementedError

    @staticmethod
    def _configured(config: Any, overrides: dict[str, Any], who: str) -> Any:
        """``config`` with keyword ``overrides`` set on it; an unknown option is a TypeError."""
        for key, value in overrides.items():
            if not hasattr(config, key):
                raise TypeError(f"{who}: unknown option {key!r}")
            setattr(config, key, value)
        return config

    def __deepcopy__(self, memo: dict) -> Self:
        return self

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


class LiveBackend(ProcessBackend):
    """Builds and times configs for real. ``name = "live"``.

    Example:
        >>> backend = LiveBackend(LiveConfig(repeat=3))
        >>> results = backend.measure(task, space, space.sample(rng, 4))
        >>> backend.close()
    """

    name = "live"

    def __init__(self, config: LiveConfig | None = None, **overrides: Any) -> None:
        self.config = self._configured(config or LiveConfig(), overrides, "LiveBackend")
        self._build_pool: Any = None
        self._run_pool: Any = None
        self._checked: set[str] = set()

    @property
    def run_timeout(self) -> float:
        """Seconds a timing run may take (:attr:`LiveConfig.run_limit`)."""
        return self.config.run_limit

    # ------------------------------------------------------------------ pools
    def _pools(self) -> tuple[Any, Any]:
        if self._build_pool is None:
            from tvm.support.popen_pool import PopenPoolExecutor

            from tune_gym.measure.workers import init_worker

            c = self.config
            self._build_pool = make_build_pool(c.build_workers, c.build_timeout, c.recycle_after)
            self._run_pool = PopenPoolExecutor(
                max_workers=1, timeout=self.run_timeout, initializer=init_worker,
                maximum_process_uses=c.recycle_after,
            )
        return self._build_pool, self._run_pool

    def close(self) -> None:
        for pool in (self._build_pool, self._run_pool):
            if pool is not None:
                pool.shutdown(wait=False)
        self._build_pool = self._run_pool = None

    # ------------------------------------------------------------------ measurement
    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        from tune_gym.measure.workers import run_artifact

        build_pool, run_pool = self._pools()
        flops = task.flops
        batch = build_batch(build_pool, task, space, configs, self.config.build_timeout)
        results, build_secs = batch.results, batch.build_secs
        if not batch.built:
            return batch.final()

        spec = {
            "device": "cuda" if task.target.is_gpu else "cpu",
            "inputs": task.input_shapes, "dtypes": task.input_dtypes, "output": task.output_shape(),
            "dtype": task.dtype,
            "number": self.config.number, "repeat": self.config.repeat,
            "min_repeat_ms": self.config.min_repeat_ms, "flush_cache": self.config.flush_cache,
            "seed": self.config.seed, "adaptive": self.config.adaptive,
        }
        for i, built_kernel in batch.built:
            check = task.uri if self.config.check_correctness and task.uri not in self._checked else None
            job = {**spec, "path": built_kernel["path"], "args": built_kernel["args"],
                   "packs": built_kernel["packs"], "check_task": check}
            t0 = time.perf_counter()
            try:
                out = run_pool.submit(run_artifact, job).result()
            except TimeoutError:
                results[i] = MeasureResult.failure(
                    "timeout", f"run exceeded {self.run_timeout} s", flops,
                    build_secs=build_secs, run_secs=time.perf_counter() - t0)
                continue
            except ChildProcessError as err:
                results[i] = MeasureResult.failure(
                    "worker_crash", f"runner process died: {err}", flops,
                    build_secs=build_secs, run_secs=time.perf_counter() - t0)
                continue
            except Exception as err:
                results[i] = MeasureResult.failure(
                    "run_error", error_message(err), flops, build_secs=build_secs, run_secs=time.perf_counter() - t0)
                continue
            run_secs = time.perf_counter() - t0
            extra = dict(out.get("extra") or {})
            if check is not None:
                if out["check_error"]:
                    results[i] = MeasureResult.failure(
                        "wrong_result", out["check_error"], flops, build_secs=build_secs, run_secs=run_secs)
                    continue
                self._checked.add(task.uri)
                extra["checked"] = True
            results[i] = MeasureResult(
                costs=tuple(out["costs"]), flops=flops, build_secs=build_secs, run_secs=run_secs, extra=extra)
        return batch.final()


@dataclass
class BuiltBatch:
    """Configs of one ``measure`` call after the build step.

    Attributes:
        results: one slot per config, in order: the failure of a config that was rejected
            (``invalid``) or did not build (``build_error`` / ``timeout`` / ``worker_crash``),
            ``None`` for a built one (its backend fills the slot once it has run).
        built: ``(config index, build_artifact output)`` of each built config, in order.
        build_secs: wall seconds of the parallel build divided by the configs sent to it.
    """

    results: list[MeasureResult | None]
    built: list[tuple[int, dict[str, Any]]]
    build_secs: float = 0.0

    def final(self) -> list[MeasureResult]:
        """The results once every slot is filled (a slot left empty is a backend bug)."""
        if any(r is None for r in self.results):
            raise RuntimeError("a built config was given no result")
        return [r for r in self.results if r is not None]


def make_build_pool(workers: int | None, timeout: float, recycle_after: int) -> Any:
    """TVM's ``PopenPoolExecutor`` of build workers (``workers``: default the host's cores)."""
    from tvm.support.popen_pool import PopenPoolExecutor

    from tune_gym.measure.workers import init_worker

    return PopenPoolExecutor(max_workers=workers or host_cores(), timeout=timeout,
                             initializer=init_worker, maximum_process_uses=recycle_after)


def build_batch(pool: Any, task: Task, space: KnobSpace, configs: Sequence[Config], build_timeout: float) -> BuiltBatch:
    """Apply and build ``configs`` in parallel in ``pool`` (:func:`make_build_pool`).

    A config :meth:`KnobSpace.apply` rejects is ``invalid`` (not built); a build that
    exceeds ``build_timeout`` is ``timeout``, one whose worker died ``worker_crash``, one
    TVM rejects ``build_error``. The built kernels are shared libraries in temporary
    directories (:func:`tune_gym.measure.workers.build_artifact`) that the caller deletes.
    """
    from tvm.support.popen_pool import StatusKind

    from tune_gym.measure.workers import build_artifact

    flops = task.flops
    results: list[MeasureResult | None] = [None] * len(configs)
    jobs: list[tuple[int, Any]] = []
    for i, cfg in enumerate(configs):
        sch, why = space.apply(cfg, check=False)  # canonical: validated where it entered
        if sch is None:
            results[i] = MeasureResult.failure("invalid", why, flops)
        else:
            jobs.append((i, sch.mod))
    if not jobs:
        return BuiltBatch(results, [])

    target = task.target.resolved()
    start = time.perf_counter()
    outcomes = list(pool.map_with_error_catching(build_artifact, [(mod, target) for _, mod in jobs]))
    build_secs = (time.perf_counter() - start) / len(jobs)
    built: list[tuple[int, dict[str, Any]]] = []
    for (i, _), outcome in zip(jobs, outcomes):
        if outcome.status == StatusKind.TIMEOUT:
            results[i] = MeasureResult.failure(
                "timeout", f"build exceeded {build_timeout} s", flops, build_secs=build_secs)
        elif outcome.status != StatusKind.COMPLETE:
            kind = "worker_crash" if isinstance(outcome.value, ChildProcessError) else "build_error"
            results[i] = MeasureResult.failure(kind, error_message(outcome.value), flops, build_secs=build_secs)
        else:
            built.append((i, outcome.value))
    return BuiltBatch(results, built, build_secs)


def error_message(err: Any) -> str:
    """The useful tail of an error's text (TVM errors end with the most specific line)."""
    text = str(err).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-6:])[:2000] or type(err).__name__
