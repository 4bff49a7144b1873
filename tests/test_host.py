"""tune_gym.host: the environment overrides of the host CPU and cores, and the host id."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tune_gym import host
from tune_gym.errors import TaskError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def fresh(monkeypatch):
    """The cached host functions recomputed for the test (and again after it)."""
    for fn in (host.host_cores, host.host_cpu):
        fn.cache_clear()
    yield monkeypatch
    for fn in (host.host_cores, host.host_cpu):
        fn.cache_clear()


def test_tune_gym_cores_overrides_and_is_checked(fresh):
    fresh.setenv("TUNE_GYM_CORES", "03")
    assert host.host_cores() == 3
    host.host_cores.cache_clear()
    fresh.setenv("TUNE_GYM_CORES", str(host.MAX_CORES + 1))
    with pytest.raises(TaskError, match=r"environment variable TUNE_GYM_CORES='1025' out of range; accepted: an "
                                        r"integer in \[1, 1024\]"):
        host.host_cores()


def test_tune_gym_mcpu_overrides_and_native_is_refused(fresh):
    fresh.setenv("TUNE_GYM_MCPU", "skylake-avx512")
    assert host.host_cpu() == "skylake-avx512"
    host.host_cpu.cache_clear()
    fresh.setenv("TUNE_GYM_MCPU", "native")
    with pytest.raises(TaskError, match="environment variable TUNE_GYM_MCPU='native' is not resolved by TVM"):
        host.host_cpu()


def test_the_host_id_hashes_the_stable_fields_only():
    fp = host.host_fingerprint()
    assert not set(host.VOLATILE_FIELDS) - {"gpu_driver"} - set(fp)  # every volatile field but the GPU's is there
    assert len(host.host_id()) == 12 and int(host.host_id(), 16) >= 0


def test_host_imports_no_other_tune_gym_module_but_its_checks():
    """Records, targets, the reference and the quiet-machine check import this module: it imports
    none of them back (no import cycle through the host id)."""
    tree = ast.parse((ROOT / "tune_gym" / "host.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {m for m in imported if m.startswith("tune_gym")} == {"tune_gym.errors", "tune_gym.options",
                                                                "tune_gym.tvm_support"}
