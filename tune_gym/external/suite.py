"""The ``external`` suite: every Kernel Tuner measured space found on the search path.

One task per (kernel problem, device measurement file): each Kernel Tuner cache on the search
path (:func:`tune_gym.external.files.data_dirs`) paired with each T1 problem of the same kernel
(:func:`tune_gym.external.files.pairs`), sorted by kernel, device and digests; ids 0, 1, ...
in that order, weight 1 each. With the FAIR Benchmark Hub's files (DOI 10.5281/zenodo.15364124)
that is 12 tasks: the convolution and dedispersion kernels on six GPUs each. T4 files are not
listed (the Hub's T4 files repeat its A100 caches); make their tasks with
:func:`tune_gym.external.task.kt_task`.

A pair whose T1 problem cannot be read is left out with a :class:`KTDataWarning` naming the
file and why; its task, made directly, is the reader's error. The suite is built once per
process (``add_data_dir`` rebuilds it); its ids follow the files found, so a task's lasting
name is its URI.
"""

from __future__ import annotations

import warnings

from tune_gym.errors import TuneGymError
from tune_gym.external import files
from tune_gym.external.task import KTTask
from tune_gym.tasks.suites import Suite, SuiteTask
from tune_gym.tasks.targets import TargetSpec

__all__ = ["KTDataWarning", "external_suite"]


class KTDataWarning(UserWarning):
    """A Kernel Tuner file on the search path that the ``external`` suite leaves out (names it and why)."""


def external_suite(target: str | TargetSpec = "kt") -> Suite:
    """The ``external`` suite of what the search path holds now (see the module docstring)."""
    spec = TargetSpec.coerce(target)
    tasks: dict[str, KTTask] = {}
    for data, problem in files.pairs():
        try:
            task = KTTask(kernel=files.label(problem.name, "kernel"), device=files.label(data.stem, "device"),
                          digest=data.digest, spec=problem.digest, target=spec)
        except TuneGymError as err:
            warnings.warn(f"external suite: left out {data.path} with {problem.path}: {err}", KTDataWarning,
                          stacklevel=2)
            continue
        tasks.setdefault(task.uri, task)
    ordered = sorted(tasks.values(), key=lambda t: (t.kernel, t.device, t.digest, t.spec))
    dirs = ", ".join(map(str, files.data_dirs())) or "no directory (set TUNE_GYM_DATA)"
    found = f"{len(ordered)} found in {dirs}" if ordered else f"none found in {dirs}"
    return Suite("external", f"Kernel Tuner measured spaces (kernel x device; time objective, replayed): {found}; "
                             f"the FAIR Benchmark Hub's are at https://doi.org/{files.DOI}",
                 tuple(SuiteTask(t, 1) for t in ordered))
