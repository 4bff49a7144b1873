"""Targets: the host CPU through LLVM, CUDA (spaces and validity need no GPU), and the target
kinds registered in :mod:`tune_gym.kinds` (not TVM targets; each names its own options).

``llvm`` means "this machine": the CPU model is detected with LLVM's host detection (TVM's
``-mcpu=native`` is *not* resolved by apache-tvm 0.27 and silently becomes ``generic``, which
gives 5-10x slower kernels) and the core count from the OS. Both can be overridden, either in
the task URI (``?target=llvm&mcpu=skylake-avx512&cores=4``) or by the environment variables
``TUNE_GYM_MCPU`` / ``TUNE_GYM_CORES`` (:mod:`tune_gym.host`).

Target options, each at most once (anything else raises :class:`TaskError` naming the option,
the value and what is accepted):

============================== ====== ==========================================================
option                         kind   accepted values
============================== ====== ==========================================================
``mcpu``                       llvm   a CPU name LLVM knows (``llc -mcpu=help``) for the host's
                                      triple or for x86_64, aarch64, arm, riscv64 or ppc64le (so
                                      a URI written on another machine still parses; a CPU of
                                      another architecture cannot be built for here); not
                                      ``native`` (leave ``mcpu`` out to get the host CPU)
``cores``                      llvm   an integer in ``[1, MAX_CORES]``, ``MAX_CORES = 1024``
``arch``                       cuda   ``sm_<major><minor>`` with an optional ``a``/``f`` suffix,
                                      major in ``[3, 12]`` (``sm_75``, ``sm_90a``, ``sm_120``)
``max_threads_per_block``      cuda   an integer in ``[1, 4096]``
``max_shared_memory_per_block`` cuda  an integer number of bytes in ``[1, 2**20]``
============================== ====== ==========================================================

A registered kind's options are its :attr:`~tune_gym.kinds.TaskKind.options`, each checked by
its own checker (with the messages above for integers, :func:`check_int_option`), then together
by the kind's ``check_target``; options left out resolve to their defaults.

Integers are written in decimal digits (no sign, at most 9 digits) and stored canonically
(``cores=04`` becomes ``cores=4``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tune_gym import kinds
from tune_gym.errors import TaskError
from tune_gym.host import MAX_CORES, check_cpu_name, host_cores, host_cpu
from tune_gym.options import check_int_option
from tune_gym.tasks.checks import fields, pairs, show

__all__ = ["CUDA_DEFAULTS", "INT_OPTIONS", "MAX_CORES", "TargetSpec", "check_int_option"]

#: Device limits used for CUDA validity checking when no GPU is present (an sm_75 class GPU).
CUDA_DEFAULTS: dict[str, Any] = {
    "arch": "sm_75",
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
}

#: Integer-valued options and their accepted ranges.
INT_OPTIONS: dict[str, tuple[int, int]] = {
    "cores": (1, MAX_CORES),
    "max_threads_per_block": (1, 4096),
    "max_shared_memory_per_block": (1, 2**20),
}

_LLVM_OPTIONS = ("mcpu", "cores")
_CUDA_OPTIONS = ("arch", "max_threads_per_block", "max_shared_memory_per_block")
_OPTIONS = {"llvm": _LLVM_OPTIONS, "cuda": _CUDA_OPTIONS}
_ARCH = re.compile(r"sm_([0-9]{2,3})[af]?", re.ASCII)


def _check_arch(value: str, where: str) -> str:
    m = _ARCH.fullmatch(value)
    if not m or not 3 <= int(m[1][:-1]) <= 12:
        raise TaskError(f"{where}={show(value)} is not a CUDA arch; accepted: sm_<major><minor> with an "
                        "optional a/f suffix, major in [3, 12] (e.g. sm_75, sm_80, sm_90a)")
    return value


def _check_option(kind: kinds.TaskKind | None, name: str, key: str, value: str) -> str:
    """Validate one option; return its canonical string."""
    where = f"target {name}: option {key!r}"
    if kind is not None:
        opt = next(o for o in kind.options if o.name == key)
        return str(kinds.load(opt.check)(value, where))
    if key == "mcpu":
        return check_cpu_name(value, where)
    if key == "arch":
        return _check_arch(value, where)
    lo, hi = INT_OPTIONS[key]
    return check_int_option(value, where, lo, hi)


def _kind_options(kind: kinds.TaskKind, opts: Mapping[str, str]) -> dict[str, Any]:
    """A registered kind's options, defaults filled in; ints where the default is an int."""
    out: dict[str, Any] = {}
    for opt in kind.options:
        value = opts.get(opt.name, opt.default)
        if value is not None:
            out[opt.name] = int(value) if isinstance(opt.default, int) else value
    return out


@dataclass(frozen=True)
class TargetSpec:
    """A target as it appears in a task URI: a kind plus explicit overrides.

    Options left out are resolved on the machine that builds (see :meth:`resolved`), so a URI
    written as ``target=llvm`` means "the host CPU" wherever it is used. The constructor
    validates the options (see the module docstring) and stores them sorted and canonical.

    Attributes:
        kind: ``llvm``, ``cuda`` or a registered kind (:func:`tune_gym.kinds.kind_names`).
        options: ``(name, value)`` pairs; values are strings (ints are accepted and converted).
    """

    kind: str = "llvm"
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        kind = kinds.require_kind(self.kind)
        allowed = _OPTIONS[self.kind] if kind is None else tuple(o.name for o in kind.options)
        int_valued = INT_OPTIONS if kind is None else {o.name for o in kind.options if isinstance(o.default, int)}
        seen: dict[str, str] = {}
        for pair in pairs(self.options, f"target {self.kind}: options"):
            key, value = pair
            if not isinstance(key, str) or key not in allowed:
                raise TaskError(
                    f"target {self.kind}: unknown option {show(key)}; allowed: {', '.join(allowed)}"
                )
            if key in seen:
                raise TaskError(f"target {self.kind}: option {key!r} given twice; give each option once")
            if isinstance(value, int) and not isinstance(value, bool) and key in int_valued:
                value = str(value)
            if not isinstance(value, str):
                raise TaskError(f"target {self.kind}: option {key!r} must be a str, got "
                                f"{type(value).__name__} {show(value)}")
            seen[key] = _check_option(kind, self.kind, key, value)
        object.__setattr__(self, "options", tuple(sorted(seen.items())))
        if kind is not None and kind.check_target is not None:
            kinds.load(kind.check_target)(self)

    @classmethod
    def parse(cls, kind: str, options: Mapping[str, str | int] | None = None) -> TargetSpec:
        """A spec from a kind and an option mapping (values as in a URI query)."""
        return cls(kind, tuple((options or {}).items()))  # type: ignore[arg-type]

    @classmethod
    def from_str(cls, text: str) -> TargetSpec:
        """Inverse of ``str(spec)``: ``"llvm"``, ``"llvm&mcpu=znver3&cores=4"``, ``"cuda&arch=sm_80"``."""
        if not isinstance(text, str):
            raise TaskError(f"a target must be a str such as 'llvm' or a TargetSpec, got "
                            f"{type(text).__name__} {show(text)}")
        kind, _, rest = text.partition("&")
        return cls(kind, tuple(fields(rest, f"target {show(text)}").items()))

    @classmethod
    def coerce(cls, target: str | TargetSpec) -> TargetSpec:
        """``target`` itself if it is a spec, else :meth:`from_str` of it."""
        return target if isinstance(target, TargetSpec) else cls.from_str(target)

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)

    def resolved(self) -> dict[str, Any]:
        """The full option dict TVM's ``Target`` takes, with host detection applied."""
        opts = self.option_dict
        kind = kinds.get_kind(self.kind)
        if kind is not None:  # the kind's options, defaults filled in
            return {"kind": kind.name, **_kind_options(kind, opts)}
        if self.kind == "llvm":
            cores = int(opts["cores"]) if "cores" in opts else host_cores()
            return {"kind": "llvm", "mcpu": opts.get("mcpu") or host_cpu(), "num-cores": cores}
        out: dict[str, Any] = {"kind": "cuda", **CUDA_DEFAULTS}
        for key in _CUDA_OPTIONS:
            if key in opts:
                out[key] = opts[key] if key == "arch" else int(opts[key])
        return out

    def tvm_target(self) -> Any:
        """The ``tvm.target.Target`` for this spec (a registered kind has none: it is not TVM's)."""
        kind = kinds.get_kind(self.kind)
        if kind is not None:
            raise TaskError(f"target {kind.name} {kind.no_tvm_target}")
        from tune_gym.tvm_support import tvm

        return tvm().target.Target(self.resolved())

    @property
    def is_gpu(self) -> bool:
        kind = kinds.get_kind(self.kind)
        return self.kind == "cuda" if kind is None else kind.is_gpu

    def __str__(self) -> str:
        return self.kind + "".join(f"&{k}={v}" for k, v in self.options)

