"""The tune-gym command, including crash recovery of a real tuning run killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tune_gym.cli import main

DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"


def test_tasks_and_space(capsys):
    assert main(["tasks", "--suite", "resnet18"]) == 0
    out = capsys.readouterr().out
    assert "resnet18:1" in out and "op://conv2d_nchw-v1/n1_c64_h56_w56_k64_r3_s1_p1_d1" in out
    assert main(["space", DENSE, "--preset", "compact"]) == 0
    out = capsys.readouterr().out
    assert "tile_i0" in out and "unroll_explicit" in out and "size=" in out


def test_unknown_task_is_a_helpful_error(capsys):
    assert main(["space", "resnet81:1"]) == 2
    err = capsys.readouterr().err
    assert "unknown task" in err and "resnet18" in err and "tune-gym tasks" in err


def _cmd(log: Path, trials: int) -> list[str]:
    return [sys.executable, "-m", "tune_gym.cli", "tune", DENSE, "--preset", "compact", "--trials", str(trials),
            "--batch", "2", "--log", str(log), "--resume", "--seed", "3", "--quiet",
            "--reward-norm", "none"]  # no PyTorch reference: a shared test host is too busy to time one


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.heavy
def test_sigkill_then_resume_loses_nothing_and_measures_nothing_twice(tmp_path):
    log = tmp_path / "run.jsonl"
    env = {**os.environ, "TUNE_GYM_CORES": "2"}
    proc = subprocess.Popen(_cmd(log, 12), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 300
    while len(_lines(log)) < 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.killpg(proc.pid, signal.SIGKILL)  # the tuner and its build/run workers
    proc.wait()
    before = _lines(log)
    assert 4 <= len(before) < 12
    done = subprocess.run(_cmd(log, 12), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    after = _lines(log)
    assert after[: len(before)] == before  # nothing written before the kill was lost
    configs = [tuple(json.loads(line)["config"]) for line in after]
    assert len(configs) == len(set(configs)) == 12  # the budget, nothing measured twice
    assert "12 unique" in done.stdout and "from the log" in done.stdout


def test_best_and_export(tmp_path, capsys):
    log = tmp_path / "run.jsonl"
    assert main(["tune", DENSE, "--preset", "compact", "--trials", "4", "--batch", "2", "--log", str(log),
                 "--quiet", "--plot", str(tmp_path / "p.png"), "--reward-norm", "none"]) == 0
    assert (tmp_path / "p.png").stat().st_size > 1000
    capsys.readouterr()
    assert main(["best", str(log), "--export", str(tmp_path / "db")]) == 0
    out = capsys.readouterr().out
    assert DENSE in out and "GFLOPS" in out
    assert (tmp_path / "db" / "database_tuning_record.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["best", "/nonexistent.jsonl"], "no records"),
    (["tune", DENSE, "--agent", "nope", "--quiet"], "unknown agent 'nope'"),
])
def test_cli_errors(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
