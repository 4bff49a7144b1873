"""Search spaces defined and measured outside tune_gym.

* :mod:`~tune_gym.external.kernel_tuner_io` reads Kernel Tuner's files: the T1 problem
  specification (parameters and restrictions), Kernel Tuner's cache of measured
  configurations and the T4 results format, into a checked :class:`ParamSpace` and a
  :class:`MeasuredSpace`;
* the ``kt`` target kind (:mod:`~tune_gym.external.kind`) makes them tasks:
  :class:`KTTask` (:mod:`~tune_gym.external.task`, made with :func:`kt_task` from paths or
  from a ``kt://`` URI), :class:`KTSpace` (:mod:`~tune_gym.external.space`), the replay
  dataset (:mod:`~tune_gym.external.replay`) and the ``external`` suite
  (:mod:`~tune_gym.external.suite`) of the files found on the search path
  (:mod:`~tune_gym.external.files`: ``TUNE_GYM_DATA`` and :func:`add_data_dir`).

The package's names are imported on first use, so importing :mod:`tune_gym.external.kind`
(which the registry does) imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tune_gym.external.files import add_data_dir, data_dirs
    from tune_gym.external.kernel_tuner_io import (
        ConfigRecord,
        KernelTunerFileError,
        MeasuredSpace,
        ParamSpace,
        Problem,
        Restriction,
        RestrictionError,
        compile_restriction,
        read_cache,
        read_problem,
        read_t4,
    )
    from tune_gym.external.replay import kt_dataset
    from tune_gym.external.space import KTSpace
    from tune_gym.external.suite import external_suite
    from tune_gym.external.task import NOMINAL_FLOPS, KTTask, kt_task

__all__ = [
    "NOMINAL_FLOPS", "ConfigRecord", "KTSpace", "KTTask", "KernelTunerFileError", "MeasuredSpace", "ParamSpace",
    "Problem", "Restriction", "RestrictionError", "add_data_dir", "compile_restriction", "data_dirs",
    "external_suite", "kt_dataset", "kt_task", "read_cache", "read_problem", "read_t4",
]

_HOMES = {
    **{name: "kernel_tuner_io" for name in (
        "ConfigRecord", "KernelTunerFileError", "MeasuredSpace", "ParamSpace", "Problem", "Restriction",
        "RestrictionError", "compile_restriction", "read_cache", "read_problem", "read_t4")},
    "add_data_dir": "files", "data_dirs": "files", "kt_dataset": "replay", "KTSpace": "space",
    "external_suite": "suite", "NOMINAL_FLOPS": "task", "KTTask": "task", "kt_task": "task",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'tune_gym.external' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tune_gym.external.{_HOMES[name]}"), name)
