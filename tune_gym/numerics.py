"""The same floating-point code paths on every x86-64 host, so a run re-run from its seed elsewhere
proposes the same configs.

NumPy, OpenBLAS, PyTorch (ATen, MKL, oneDNN) pick their kernels for the CPU they find: on a host
with AVX-512 a sum, a dot product or an ``exp`` runs other code than on an AVX2 host and can
round differently in the last bit. An agent whose choices go through such floats (a Gaussian
process, a policy network, scipy's COBYLA inside Kernel Tuner's ``dual_annealing``) then drifts
apart after some trials: a run recorded on a Zen 4 or Intel host and re-run by ``tune-gym
validate`` on a Zen 3 host proposes other configs, which ``validate`` must report as a run its
seed does not reproduce.

:func:`pinned_environ` names the environment variables that make these libraries take their
AVX2/FMA code paths on any x86-64 host that has AVX2 and FMA (every host this project has seen):
NumPy's dispatch above AVX2 off (``NPY_DISABLE_CPU_FEATURES``, from the build's own dispatch list),
OpenBLAS's Haswell kernels (``OPENBLAS_CORETYPE``), ATen's AVX2 kernels (``ATEN_CPU_CAPABILITY``),
MKL's dispatch capped at AVX2 (``MKL_ENABLE_INSTRUCTIONS``) and oneDNN's (``ONEDNN_MAX_CPU_ISA``).
On an AVX2 host they change nothing: the runs recorded there re-run the same with them (checked
on a Zen 3 host with runs of ``batch-bo``, ``rl-ppo``, ``kt:bayes_opt`` and five Kernel Tuner
strategies). MKL's reproducibility modes are not used: ``MKL_CBWR=AVX2`` or ``COMPATIBLE`` take
other algorithms on every host, so they would change the configs of runs already recorded on AVX2
hosts too (measured: ``batch-bo``, whose Gaussian process computes through MKL, on a Zen 3 host
from trial 199 of 293). That the pinned paths give an AVX-512 host the bits an AVX2 host gets is
expected (the same code runs) but not yet checked on one: runs the standard suite recorded on an
Intel host without the pin re-run differently on a Zen 3 host for ``meta-bo`` and ``tlp-sa``
(PyTorch models) from trial 17-71, while ``batch-bo``, ``rl-ppo``, ``one-shot`` and the others
re-ran the same.

They act only when read, at each library's load, so they must be in the environment before the
process imports NumPy: ``tune-gym bench`` and ``tune-gym validate`` start again with them
(:func:`restart_pinned`), and their worker processes inherit them. Set ``TUNE_GYM_NUMERICS=native``
to keep each library's own choice (faster on AVX-512 hosts; runs are then reproducible on hosts
of the same kind only).

Replay timing is simulated, so the pin costs nothing in what the leaderboard measures; live runs
time TVM's kernels, which these variables do not touch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

__all__ = ["OPT_OUT", "is_pinned", "pinned_environ", "restart_pinned"]

#: Environment variable that turns the pin off when set to ``native``.
OPT_OUT = "TUNE_GYM_NUMERICS"

#: The libraries' variables and their values, besides NumPy's (which depends on its build).
_FIXED = {
    "OPENBLAS_CORETYPE": "Haswell",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}


def _numpy_above_avx2() -> list[str]:
    """NumPy's dispatched CPU features above AVX2/FMA in this build (``X86_V4`` and the ``AVX512*``
    groups). Reading them loads NumPy here, which is harmless: the pin acts in the process that
    :func:`restart_pinned` starts, not in this one."""
    try:  # NumPy 2
        from numpy._core import _multiarray_umath as umath  # type: ignore[attr-defined]
    except ImportError:  # NumPy 1
        from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
    return [str(f) for f in umath.__cpu_dispatch__ if f == "X86_V4" or str(f).startswith("AVX512")]


def pinned_environ() -> dict[str, str]:
    """The variables (name: value) that pin this host's numerics to the AVX2/FMA code paths."""
    return {"NPY_DISABLE_CPU_FEATURES": " ".join(_numpy_above_avx2()), **_FIXED}


def is_pinned(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: this process's) already pins the numerics, or opts out."""
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT) == "native":
        return True
    return all(env.get(name) == value for name, value in _FIXED.items()) and "NPY_DISABLE_CPU_FEATURES" in env


def restart_pinned(argv: Sequence[str]) -> None:
    """Start this command again (``python -m tune_gym.cli ARGV``) with the numerics pinned, unless
    the environment already pins them (or opts out); returns only in that case."""
    if is_pinned():
        return
    env = {**os.environ, **pinned_environ()}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "tune_gym.cli", *argv], env)
