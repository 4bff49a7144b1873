"""Pinned numerics (tune_gym.numerics): the variables, the check, and what a process started with
them uses; ``tune-gym bench`` / ``validate`` restarting with them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tune_gym import cli, numerics


def _features() -> dict[str, bool]:
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1
        from numpy.core import _multiarray_umath as umath
    return dict(umath.__cpu_features__)


def test_the_variables_pin_every_library_to_avx2() -> None:
    env = numerics.pinned_environ()
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert "MKL_CBWR" not in env  # it changes results on AVX2 hosts too (see the module)
    npy = env["NPY_DISABLE_CPU_FEATURES"].split()
    assert all(f == "X86_V4" or f.startswith("AVX512") for f in npy)
    assert not any(f in npy for f in ("AVX2", "FMA3", "X86_V3"))


def test_is_pinned_reads_the_environment() -> None:
    pinned = numerics.pinned_environ()
    assert numerics.is_pinned(pinned)
    assert not numerics.is_pinned({})
    assert not numerics.is_pinned({**pinned, "OPENBLAS_CORETYPE": "SkylakeX"})
    assert numerics.is_pinned({numerics.OPT_OUT: "native"})


_PROBE = """
import json, numpy as np
try:
    from numpy._core import _multiarray_umath as m
except ImportError:
    from numpy.core import _multiarray_umath as m
# the dispatch targets NumPy may pick kernels for (NumPy 2.4 keeps reporting the CPU's single AVX-512
# flags, e.g. AVX512F, as present when their dispatch groups are disabled; no kernel is built for them)
out = {"features": [k for k in m.__cpu_dispatch__ if m.__cpu_features__.get(k)]}
try:
    import torch
    out["torch"] = torch.backends.cpu.get_cpu_capability()
except ImportError:
    pass
x = np.random.default_rng(0).standard_normal(1000)
out["sum"] = float(np.sum(np.exp(x)))
out["dot"] = float(x @ x)
print(json.dumps(out))
"""


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, env=env,
                          timeout=300)
    return json.loads(done.stdout)


def test_a_process_started_pinned_uses_no_kernel_above_avx2() -> None:
    if not (_features().get("AVX2") and _features().get("FMA3")):
        pytest.skip("this host lacks AVX2/FMA: the pin names code paths it cannot run")
    base = {k: v for k, v in os.environ.items() if k not in numerics.pinned_environ() and k != numerics.OPT_OUT}
    pinned = _probe({**base, **numerics.pinned_environ()})
    assert not [f for f in pinned["features"] if f == "X86_V4" or f.startswith("AVX512")]
    if "torch" in pinned:
        assert pinned["torch"] == "AVX2"
    # on an AVX2 host the pin changes nothing; on an AVX-512 host it is what makes these agree
    native = _probe(base)
    if not [f for f in native["features"] if f == "X86_V4" or f.startswith("AVX512")]:
        assert (pinned["sum"], pinned["dot"]) == (native["sum"], native["dot"])
    assert np.isfinite(pinned["sum"])


@pytest.mark.parametrize("command", ["bench", "validate"])
def test_the_command_restarts_itself_pinned(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    calls = []

    def execve(path: str, args: list[str], env: dict[str, str]) -> None:
        calls.append((path, args, env))
        raise SystemExit(0)

    for name in (*numerics.pinned_environ(), numerics.OPT_OUT):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "execve", execve)
    monkeypatch.setattr(sys, "argv", ["tune-gym", command, "--help"] if command == "bench"
                        else ["tune-gym", command, "results.parquet"])
    with pytest.raises(SystemExit):
        cli.main()
    if command == "bench":  # --help exits while parsing, before any restart
        assert calls == []
        monkeypatch.setattr(sys, "argv", ["tune-gym", "bench", "--suite", "no-such-suite"])
        with pytest.raises(SystemExit):
            cli.main()
    (path, args, env), = calls
    assert path == sys.executable and args[:3] == [sys.executable, "-m", "tune_gym.cli"]
    assert args[3:] == sys.argv[1:]
    assert numerics.is_pinned(env)


def test_a_pinned_or_opted_out_command_and_a_call_from_python_do_not_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("restarted"))
    for name, value in numerics.pinned_environ().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["tune-gym", "validate", "no-such-results.parquet"])
    assert cli.main() == 2  # ran here: the missing file is reported
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")
    monkeypatch.setenv(numerics.OPT_OUT, "native")
    assert cli.main() == 2
    monkeypatch.delenv(numerics.OPT_OUT)
    assert cli.main(["validate", "no-such-results.parquet"]) == 2
