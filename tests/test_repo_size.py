"""The repository's size budget (scripts/repo_size.py): tracked files within it, the docs stating it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import repo_size  # noqa: E402

sys.path.remove(str(REPO / "scripts"))

pytestmark = pytest.mark.skipif(not (REPO / ".git").exists() or shutil.which("git") is None,
                                reason="needs a git checkout")


def test_tracked_files_are_within_the_size_budget():
    sizes = repo_size.tracked_sizes(REPO)
    assert "README.md" in sizes and "LEADERBOARD.md" in sizes
    assert repo_size.over_budget(sizes) == []


def test_the_budget_is_what_the_docs_state():
    page = (REPO / "docs" / "benchmarking.md").read_text(encoding="utf-8")
    assert f"{repo_size.BUDGET_MIB} MiB of tracked files" in page
    assert f"{repo_size.FILE_BUDGET_MIB} MiB for any one file" in page


def test_over_budget_names_what_exceeds_it():
    big = (repo_size.FILE_BUDGET_MIB << 20) + 1
    assert repo_size.over_budget({"a.bin": big - 1, "b.txt": 1}) == []
    small = {f"f{i}.txt": 1 << 20 for i in range(repo_size.BUDGET_MIB - repo_size.FILE_BUDGET_MIB)}
    problems = repo_size.over_budget({"a.bin": big, **small})
    assert problems == [f"tracked files take {repo_size.BUDGET_MIB:.1f} MiB, over the budget of "
                        f"{repo_size.BUDGET_MIB} MiB",
                        f"a.bin takes {repo_size.FILE_BUDGET_MIB:.1f} MiB, over the budget of "
                        f"{repo_size.FILE_BUDGET_MIB} MiB for one file"]
