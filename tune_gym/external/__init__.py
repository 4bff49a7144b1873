"""Search spaces defined and measured outside tune_gym.

:mod:`tune_gym.external.kernel_tuner_io` reads Kernel Tuner's files: the T1 problem
specification (parameters and restrictions), Kernel Tuner's cache of measured configurations
and the T4 results format, into a checked :class:`ParamSpace` and a :class:`MeasuredSpace`.
"""

from __future__ import annotations

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

__all__ = [
    "ConfigRecord", "KernelTunerFileError", "MeasuredSpace", "ParamSpace", "Problem", "Restriction",
    "RestrictionError", "compile_restriction", "read_cache", "read_problem", "read_t4",
]
