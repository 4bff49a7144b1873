"""tune_gym.locations: the benchmarks/ directory from an argument, TUNE_GYM_BENCHMARKS, the
source checkout, or a clear error; and the catalog and kernel store built on it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tune_gym import locations
from tune_gym.locations import ENV, DataNotFoundError, benchmarks_dir, benchmarks_path, source_benchmarks_dir

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def two_dirs(tmp_path, monkeypatch):
    """Two benchmarks directories; the variable unset."""
    monkeypatch.delenv(ENV, raising=False)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return a, b


def test_explicit_argument_then_variable_then_checkout(two_dirs, monkeypatch):
    a, b = two_dirs
    assert benchmarks_dir() == ROOT / "benchmarks"  # these tests run from the checkout
    monkeypatch.setenv(ENV, str(b))
    assert benchmarks_dir() == b
    assert benchmarks_dir(a) == a and benchmarks_dir(str(a)) == a
    assert benchmarks_path("datasets", "spaces") == b / "datasets" / "spaces"
    assert benchmarks_path("networks", explicit=a) == a / "networks"


def test_a_given_path_that_is_no_directory_is_refused_naming_it(two_dirs, monkeypatch):
    a, _ = two_dirs
    with pytest.raises(DataNotFoundError, match=r"the benchmarks directory '.*/missing' is not a directory"):
        benchmarks_dir(a / "missing")
    monkeypatch.setenv(ENV, str(a / "file"))
    (a / "file").write_text("")
    with pytest.raises(DataNotFoundError, match=rf"{ENV} '.*/file' is not a directory"):
        benchmarks_dir()


def test_a_checkout_is_recognized_by_its_pyproject_and_datasets(tmp_path):
    (tmp_path / "tune_gym").mkdir()
    (tmp_path / "benchmarks" / "datasets").mkdir(parents=True)
    assert source_benchmarks_dir(tmp_path / "tune_gym") is None  # no pyproject.toml: an installed layout
    (tmp_path / "pyproject.toml").write_text("")
    assert source_benchmarks_dir(tmp_path / "tune_gym") == tmp_path / "benchmarks"


def test_an_installed_package_without_the_variable_says_which_to_set(tmp_path):
    """tune_gym laid out as in site-packages (a ``benchmarks`` package beside it, no data, no
    pyproject.toml): the error names the variable; with the variable the data is found."""
    site = tmp_path / "site"
    (site / "tune_gym").mkdir(parents=True)
    (site / "benchmarks").mkdir()
    (site / "tune_gym" / "__init__.py").write_text("")
    for name in ("errors.py", "locations.py"):
        shutil.copy(ROOT / "tune_gym" / name, site / "tune_gym" / name)
    code = "from tune_gym.locations import benchmarks_dir; print(benchmarks_dir())"
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1 and f"set {ENV} to the benchmarks/ directory" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env, ENV: str(ROOT / "benchmarks")},
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == str(ROOT / "benchmarks")


def test_the_catalog_and_the_kernel_store_follow_the_variable(two_dirs, monkeypatch):
    from tune_gym.datasets.catalog import data_dirs
    from tune_gym.datasets.spaces import repo_spaces
    from tune_gym.tasks.prim_func import repo_store, store_dirs

    a, b = two_dirs
    monkeypatch.setenv("TUNE_GYM_DATA", str(a))  # extra data first, as before
    monkeypatch.setenv(ENV, str(b))
    monkeypatch.delenv("TUNE_GYM_TIR", raising=False)
    assert data_dirs() == [a, b / "datasets"]
    assert repo_spaces() == b / "datasets" / "spaces"
    assert repo_store() == b / "networks" / "tir" and store_dirs()[0] == b / "networks" / "tir"
    monkeypatch.delenv(ENV)
    assert data_dirs()[-1] == ROOT / "benchmarks" / "datasets"


def test_the_module_reads_the_environment_when_asked_not_at_import(two_dirs, monkeypatch):
    _, b = two_dirs
    monkeypatch.setattr(locations, "source_benchmarks_dir", lambda package=None: None)
    with pytest.raises(DataNotFoundError, match=ENV):
        benchmarks_dir()
    monkeypatch.setenv(ENV, str(b))
    assert benchmarks_dir() == b
