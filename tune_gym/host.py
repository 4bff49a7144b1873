"""This machine: its CPU as LLVM names it, the cores a build may use, and its identity in records.

* :func:`host_cpu`: the CPU name LLVM detects (``znver3``, ``skylake-avx512``, ...), which
  ``target=llvm`` tasks build for; ``TUNE_GYM_MCPU`` overrides it (checked by
  :func:`check_cpu_name`).
* :func:`host_cores`: the physical cores available to this process; ``TUNE_GYM_CORES``
  overrides it (an integer in ``[1, MAX_CORES]``).
* :func:`host_fingerprint`: what identifies the measuring machine (CPU, cores, OS, software
  versions, GPUs); :func:`host_id` is a short hash of its stable fields, the ``host`` of
  every record, dataset row and reference.

Nothing here imports the rest of tune_gym beyond its option checks, so every module that needs
the host (targets, records, the reference, the quiet-machine check) can import it.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
import platform
import re
from typing import Any

from tune_gym.errors import TaskError
from tune_gym.options import check_int_option, show

__all__ = ["MAX_CORES", "VOLATILE_FIELDS", "check_cpu_name", "fingerprint_id", "host_cores", "host_cpu",
           "host_fingerprint", "host_id", "tvm_version"]

#: Largest accepted core count (a target's ``cores`` option and ``TUNE_GYM_CORES``).
MAX_CORES = 1024
#: Fingerprint fields left out of :func:`host_id` (software that changes under the same machine).
VOLATILE_FIELDS = ("os_release", "python", "tvm", "gpu_driver")

_CPU = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}", re.ASCII)
#: Triples besides the host's whose CPU names ``mcpu`` accepts.
_TRIPLES = ("x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu", "armv7-unknown-linux-gnueabihf",
            "riscv64-unknown-linux-gnu", "powerpc64le-unknown-linux-gnu")


@functools.cache
def _llvm_knows_cpu(name: str) -> bool:
    from tvm.target import codegen

    triples = (str(codegen.llvm_get_system_triple()), *_TRIPLES)
    return any(bool(codegen.llvm_is_valid_cpu(name, triple)) for triple in triples)


def _cpu_suggestions(name: str) -> str:
    """A few host CPU names close to ``name`` (for error messages)."""
    try:
        from tvm.target import Target, codegen

        target = Target("llvm")
        with target:
            names = [str(x) for x in codegen.llvm_get_cpu_archlist(target)]
    except Exception:  # pragma: no cover - only makes the message shorter
        return ""
    close = difflib.get_close_matches(name, names, n=4) or names[:4]
    return f"; e.g. {', '.join(close)}" if close else ""


def check_cpu_name(value: str, where: str) -> str:
    """``value`` if it is a CPU name LLVM knows for this host's triple or a common one
    (x86_64, aarch64, arm, riscv64, ppc64le); else a :class:`TaskError` starting with ``where``
    (``native`` is refused: TVM does not resolve it)."""
    if value == "native":
        raise TaskError(f"{where}='native' is not resolved by TVM (it becomes 'generic'); "
                        "leave mcpu out to get the host CPU")
    if not _CPU.fullmatch(value) or not _llvm_knows_cpu(value):
        raise TaskError(f"{where}={show(value)} is not a CPU name LLVM knows; accepted: a name from "
                        f"`llc -mcpu=help`{_cpu_suggestions(value)}")
    return value


@functools.cache
def host_cpu() -> str:
    """The host CPU name as LLVM knows it (``znver3``, ``skylake-avx512``, ...)."""
    if os.environ.get("TUNE_GYM_MCPU"):
        return check_cpu_name(os.environ["TUNE_GYM_MCPU"], "environment variable TUNE_GYM_MCPU")
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


@functools.cache
def host_cores() -> int:
    """Physical cores available to this process (``TUNE_GYM_CORES`` overrides)."""
    if os.environ.get("TUNE_GYM_CORES"):
        return int(check_int_option(os.environ["TUNE_GYM_CORES"], "environment variable TUNE_GYM_CORES", 1, MAX_CORES))
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or 0
    except ImportError:  # pragma: no cover - psutil is a dependency
        physical = 0
    return max(1, min(physical or os.cpu_count() or 1, len(os.sched_getaffinity(0))))


@functools.cache
def host_fingerprint() -> dict[str, Any]:
    """What identifies the measuring machine: CPU, cores, OS and software versions."""
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    out: dict[str, Any] = {
        "cpu": cpu, "llvm_cpu": host_cpu(), "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False), "os": f"{platform.system()}-{platform.machine()}",
        "os_release": platform.release(), "python": platform.python_version(), "tvm": tvm_version(),
    }
    gpus, driver = _nvidia_gpus()
    if gpus:  # only where there are GPUs: the ids of machines without one stay as they were
        out["gpus"], out["gpu_driver"] = gpus, driver
    return out


def _nvidia_gpus() -> tuple[list[str], str]:
    """The names of this machine's NVIDIA GPUs and the driver version (``nvidia-smi``), or
    ``([], "")`` where there is none or no ``nvidia-smi``."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return [], ""
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return [], ""
    rows = [[part.strip() for part in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]
    rows = [row for row in rows if len(row) == 2] if proc.returncode == 0 else []
    return [name for name, _ in rows], (rows[0][1] if rows else "")


@functools.cache
def host_id() -> str:
    """A short stable hex id of this machine (the fingerprint without :data:`VOLATILE_FIELDS`)."""
    return fingerprint_id(host_fingerprint())


def fingerprint_id(fingerprint: dict[str, Any]) -> str:
    """The :func:`host_id` of the machine a :func:`host_fingerprint` was taken on."""
    stable = {k: v for k, v in fingerprint.items() if k not in VOLATILE_FIELDS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:12]


def tvm_version() -> str:
    """The installed TVM's version string (imports TVM)."""
    from tune_gym.tvm_support import tvm

    return str(tvm().__version__)
