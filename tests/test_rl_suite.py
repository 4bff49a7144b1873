"""The ``rl`` suite (``benchmarks/suites/rl.toml``) runs from a clean clone: its policy checkpoint
is a committed file of the repository that the ``rl-policy`` agent loads, its agents and tasks
resolve, and its tasks are the held-out test part of the split the policy was trained on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from agents.base import make_agent
from agents.rl_policy import load_policy, meta_path
from benchmarks.leaderboard.suite import base_agent, load_suite
from tune_gym.envs.task_sets import load_split
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def suite():
    return load_suite("rl")


@pytest.fixture(scope="module")
def checkpoint(suite) -> Path:
    """The suite's ``rl-policy`` checkpoint, a path relative to the repository root."""
    path = Path(suite.agent_options["rl-policy"]["checkpoint"])
    assert not path.is_absolute(), f"rl.toml's checkpoint {path} must be a path inside the repository"
    return REPO / path


def test_the_suite_resolves_its_agents_and_tasks(suite):
    assert {base_agent(a) for a in suite.agents} == {"rl-policy", "meta-bo", "random"}
    assert suite.agent_options["rl-policy"]["checkpoint"].endswith((".pt", ".zip"))
    uris = [Task.parse(t.id).uri for t in suite.tasks]
    assert uris == ["op://dense-v1/m128_n768_k768?target=llvm", "op://batch_matmul-v1/b12_m128_n64_k128?target=llvm"]
    assert all(t.backend == "replay" and t.budget == 64 for t in suite.tasks)


def test_the_checkpoint_is_a_committed_file_of_the_repository(checkpoint):
    assert checkpoint.is_file() and meta_path(checkpoint).is_file()
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return  # an unpacked release: the files being there is what matters
    for path in (checkpoint, meta_path(checkpoint)):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=REPO, check=False)
        assert ignored.returncode == 1, f"{path} is git-ignored: a clean clone would not have it"


def test_the_policy_loads_and_was_trained_without_the_test_tasks(suite, checkpoint):
    model, meta = load_policy(checkpoint)
    assert meta["algo"] == "cleanrl-ppo" and meta["batch_size"] == suite.batch
    assert meta["copy_best"] == 1.5 and meta["copy_only"] is True
    assert meta["command"].startswith("python scripts/cleanrl_ppo.py ")
    split = load_split(meta["split"])
    test = [Task.parse(ref.task).uri for ref in split.tasks("test")]
    assert [Task.parse(t.id).uri for t in suite.tasks] == test
    seen = {Task.parse(ref.task).uri for part in ("train", "validation") for ref in split.tasks(part)}
    assert not seen & set(test)


def test_the_agent_proposes_valid_distinct_configs_of_a_suite_task(suite, checkpoint):
    task = Task.parse(suite.tasks[0].id)
    space = KnobSpace.for_task(task, suite.tasks[0].preset)
    agent = make_agent("rl-policy", checkpoint=str(checkpoint))
    agent.reset(space, task, seed=0)
    batch = agent.propose(suite.batch)
    assert len(batch) == suite.batch == len(set(batch))
    dims = np.asarray(space.dims)
    assert all(len(c) == len(dims) and all(0 <= v < d for v, d in zip(c, dims)) for c in batch)
