"""A ``kt`` task's measurement file as a tune_gym dataset, which the core replay backend serves.

Why no backend of its own: the kind needs nothing the core ``replay`` backend
(:class:`tune_gym.measure.replay.ReplayBackend`) lacks. Exact lookup, the simulated clock
(each trial charges its result's ``build_secs + run_secs``), references, the ``surrogate``
fallback and the leaderboard's scoring all work on a :class:`~tune_gym.datasets.Dataset`; so
the kind supplies its data as one (:attr:`tune_gym.kinds.TaskKind.dataset` is
:func:`kt_dataset`) and ``backend="replay"`` answers ``kt`` tasks like any other. A config
that breaks a restriction is answered by the replay backend through
:meth:`tune_gym.external.space.KTSpace.excluded` (``invalid``, no time charged).

The dataset (:func:`kt_dataset`), built in memory from the file once per process and
(task, preset), never written to the repository:

* one row per configuration the file holds, its config the value indices of its parameters;
* a configuration that ran: ``costs`` its repeated times (the file's ``times``; its ``time``
  when there are none); one that failed: ``error`` its kind (``CompilationFailedConfig`` ->
  ``build_error``, ``RuntimeFailedConfig`` -> ``run_error``, ``InvalidConfig`` -> ``invalid``,
  see :data:`~tune_gym.external.kernel_tuner_io.KT_ERROR_KINDS`) and ``error_msg`` the file's
  own error name;
* ``build_secs`` the compile time and ``run_secs`` verification + benchmark + framework time,
  so a trial charges the clock :attr:`~tune_gym.external.kernel_tuner_io.ConfigRecord.charge_secs`,
  as the autotuning methodology charges a configuration's first evaluation (a failed one
  too: its compile time was spent);
* ``mode`` ``exhaustive`` when the file holds every valid configuration (``records``
  otherwise), ``host`` the task's device label, ``time`` 0 (the cache records no dates);
* the reference (what ``Tune-v0``'s rewards are normalized by): the median configuration
  that ran, i.e. the nominal GFLOPS of its median time, so a return of 1.0 means "as fast as
  the median configuration"; its ``method`` says so;
* metadata ``external``: the device name, the measurement file's name, format and SHA-256,
  the T1 problem file's name and SHA-256, the kernel name, the reader's notes, and the DOI.
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any

import numpy as np

from tune_gym.datasets.dataset import Dataset, space_fingerprint
from tune_gym.external.files import DOI
from tune_gym.external.kernel_tuner_io import MeasuredSpace
from tune_gym.external.space import KTSpace
from tune_gym.external.task import KTTask, measured, problem
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.tasks.task import Task

__all__ = ["kt_dataset", "median_reference"]


def kt_dataset(task: Task, preset: str) -> Dataset:
    """The dataset of a ``kt`` task's ``preset`` space (see the module docstring; built once per
    process; :class:`~tune_gym.external.KernelTunerFileError` for a bad file)."""
    if not isinstance(task, KTTask):
        raise TypeError(f"kt_dataset takes a kt task, not {task.uri}")
    return _cached_dataset(task, preset, measured(task))


@functools.lru_cache(maxsize=16)
def _cached_dataset(task: KTTask, preset: str, ms: MeasuredSpace) -> Dataset:
    space = KTSpace.for_task(task, preset)
    present = [i for i, r in enumerate(ms.records) if r is not None]
    results = [ms.records[i].to_measure_result(task.flops) for i in present]  # type: ignore[union-attr]
    reference = median_reference(results, f"{ms.path} (sha256 {ms.sha256[:16]})")
    label = task.device
    exhaustive = len(present) == len(ms.records)
    n = len(present)
    ds = Dataset(
        task=task, preset=preset, configs=np.asarray(ms.space.index_array[present], dtype=np.int32).reshape(n, -1),
        costs=[r.costs for r in results], error=[r.error for r in results], error_msg=[r.error_msg for r in results],
        build_secs=np.array([r.build_secs for r in results], dtype=np.float64),
        run_secs=np.array([r.run_secs for r in results], dtype=np.float64),
        time=np.zeros(n), mode=["exhaustive" if exhaustive else "records"] * n, host=[label] * n, tvm=[""] * n,
        reference_gflops=np.full(n, reference.gflops if reference is not None else math.nan),
        extra=[{} for _ in range(n)], source=ms.path,
    )
    ds.meta = {
        "fingerprint": space_fingerprint(space), "space_size": space.size, "knobs": space.names, "flops": task.flops,
        "hosts": {label: {"device": ms.device, "measured_with": "Kernel Tuner"}},
        "references": {label: reference.to_json()} if reference is not None else {},
        "collection": [{"command": f"tune_gym.external: read {ms.format} {ms.path}",
                        "mode": ds.mode[0] if n else "records"}],
        "external": _provenance(task, ms),
    }
    ds.check(f"kt dataset of {task.uri} (from {ms.path})")
    return ds


def _provenance(task: KTTask, ms: MeasuredSpace) -> dict[str, Any]:
    """Where the data came from (the dataset's ``external`` metadata)."""
    spec = problem(task)
    return {
        "device": ms.device, "device_label": task.device, "kernel": ms.kernel or spec.kernel_name,
        "format": ms.format, "file": task.data_file.name, "sha256": ms.sha256,
        "problem_file": task.problem_file.name, "problem_sha256": spec.sha256, "objective": ms.objective,
        "counts": ms.counts(), "notes": list(ms.notes), "flops_nominal": True, "doi": DOI,
    }


def median_reference(results: list[MeasureResult], source: str) -> Reference | None:
    """The median configuration that ran (the lower median of the mean times) as a reference,
    ``None`` when none ran; ``source`` names the data in its ``method``."""
    means = [r.mean for r in results if r.ok]
    if not means:
        return None
    median = statistics.median_low(means)
    middle = next(r for r in results if r.ok and r.mean == median)
    method = (f"the median of the {len(means)} configurations that ran in {source}: {median * 1e3:.6g} ms per call; "
              f"nominal GFLOPS ({middle.flops} nominal FLOPs: the kernel has no FLOP count), not measured here")
    return Reference(middle.gflops, method, (), "")
