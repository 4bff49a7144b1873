"""Targets: the host CPU through LLVM, and CUDA (spaces and validity need no GPU).

``llvm`` means "this machine": the CPU model is detected with LLVM's host detection (TVM's
``-mcpu=native`` is *not* resolved by apache-tvm 0.27 and silently becomes ``generic``, which
gives 5-10x slower kernels) and the core count from the OS. Both can be overridden, either in
the task URI (``?target=llvm&mcpu=skylake-avx512&cores=4``) or by the environment variables
``TUNE_GYM_MCPU`` / ``TUNE_GYM_CORES``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

from tune_gym.errors import TaskError

__all__ = ["CUDA_DEFAULTS", "TargetSpec", "host_cores", "host_cpu"]

#: Device limits used for CUDA validity checking when no GPU is present (an sm_75 class GPU).
CUDA_DEFAULTS: dict[str, Any] = {
    "arch": "sm_75",
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
}

_KINDS = ("llvm", "cuda")
_LLVM_OPTIONS = ("mcpu", "cores")
_CUDA_OPTIONS = ("arch", "max_threads_per_block", "max_shared_memory_per_block")


@functools.cache
def host_cpu() -> str:
    """The host CPU name as LLVM knows it (``znver3``, ``skylake-avx512``, ...)."""
    if os.environ.get("TUNE_GYM_MCPU"):
        return os.environ["TUNE_GYM_MCPU"]
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


@functools.cache
def host_cores() -> int:
    """Physical cores available to this process (``TUNE_GYM_CORES`` overrides)."""
    if os.environ.get("TUNE_GYM_CORES"):
        return int(os.environ["TUNE_GYM_CORES"])
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or 0
    except ImportError:  # pragma: no cover - psutil is a dependency
        physical = 0
    return max(1, min(physical or os.cpu_count() or 1, len(os.sched_getaffinity(0))))


@dataclass(frozen=True)
class TargetSpec:
    """A target as it appears in a task URI: a kind plus explicit overrides.

    Options left out are resolved on the machine that builds (see :meth:`resolved`), so a URI
    written as ``target=llvm`` means "the host CPU" wherever it is used.
    """

    kind: str = "llvm"
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise TaskError(f"unknown target kind {self.kind!r}; known: {', '.join(_KINDS)}")
        allowed = _LLVM_OPTIONS if self.kind == "llvm" else _CUDA_OPTIONS
        for key, _ in self.options:
            if key not in allowed:
                raise TaskError(
                    f"target {self.kind}: unknown option {key!r}; allowed: {', '.join(allowed)}"
                )
        object.__setattr__(self, "options", tuple(sorted(self.options)))

    @classmethod
    def parse(cls, kind: str, options: dict[str, str] | None = None) -> TargetSpec:
        return cls(kind, tuple((k, str(v)) for k, v in (options or {}).items()))

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)

    def resolved(self) -> dict[str, Any]:
        """The full option dict TVM's ``Target`` takes, with host detection applied."""
        opts = self.option_dict
        if self.kind == "llvm":
            try:
                cores = int(opts.get("cores", host_cores()))
            except ValueError:
                raise TaskError(f"target option cores={opts['cores']!r} is not an integer") from None
            return {"kind": "llvm", "mcpu": opts.get("mcpu", host_cpu()), "num-cores": cores}
        out: dict[str, Any] = {"kind": "cuda", **CUDA_DEFAULTS}
        for key in _CUDA_OPTIONS:
            if key in opts:
                out[key] = opts[key] if key == "arch" else int(opts[key])
        return out

    def tvm_target(self) -> Any:
        """The ``tvm.target.Target`` for this spec."""
        from tune_gym._tvm import tvm

        return tvm().target.Target(self.resolved())

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:
        return self.kind + "".join(f"&{k}={v}" for k, v in self.options)
