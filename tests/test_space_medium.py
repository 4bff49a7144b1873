"""The ``medium`` preset: its spaces, the collection plan of ``make collect-medium``, and refusals.

Space sizes depend only on TVM's rules and the task's shapes, not on the host, so they are
asserted exactly.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tune_gym.cli import main
from tune_gym.datasets import space_fingerprint
from tune_gym.errors import SpaceError
from tune_gym.space import PRESETS, KnobSpace, RecordedSpace
from tune_gym.tasks import Task
from tune_gym.tvm_support import tvm

ROOT = Path(__file__).resolve().parents[1]
#: One task per op kind, with its medium space size (``KnobSpace(task, "medium").size``).
SIZES = {"resnet18:8": 6272, "bert_base:0": 8064, "bert_base:4": 16464, "mobilenet_v2:17": 6144}


def medium_tasks() -> list[str]:
    """The task ids of the Makefile's ``MEDIUM_TASKS`` (what ``make collect-medium`` measures)."""
    match = re.search(r"^MEDIUM_TASKS := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "Makefile has no MEDIUM_TASKS line"
    return match.group(1).split()


def space(tid: str) -> KnobSpace:
    return KnobSpace.for_task(Task.parse(tid), "medium")


@pytest.mark.parametrize("tid", sorted(SIZES))
def test_medium_space_size_and_tiling(tid):
    medium, compact = space(tid), KnobSpace.for_task(Task.parse(tid), "compact")
    assert medium.size == SIZES[tid]
    splits = [k for k in medium.knobs if k.kind == "split"]
    # compact's spatial tiles plus one two-level tile per reduction loop, innermost factors <= 64
    assert {k.name for k in compact.knobs} < {k.name for k in medium.knobs}
    assert all(len(c) == 2 and c[-1] <= 64 for k in splits for c in k.choices)
    assert max(c[-1] for k in splits for c in k.choices) > 16
    assert [len(k) for k in medium.knobs if k.kind == "categorical"] == [4]  # unroll steps


@pytest.mark.parametrize("tid", sorted(SIZES))
def test_medium_configs_apply_and_build(tid):
    medium = space(tid)
    config = tuple(medium.sample(np.random.default_rng(0), 1)[0])
    mod = medium.kernel_mod(config)
    assert mod is not None, medium.apply(config)[1]
    assert tvm().compile(mod, target=medium.target) is not None


def test_collection_plan_covers_four_ops_in_range_and_matches_the_datasets_page():
    tasks = medium_tasks()
    ops = {Task.parse(t).uri.split("/")[2].rsplit("-", 1)[0] for t in tasks}
    assert ops == {"conv2d_nchw", "dense", "batch_matmul", "depthwise_conv2d_nchw"}
    page = (ROOT / "docs" / "datasets.md").read_text()
    total = 0
    for tid in tasks:
        size = space(tid).size
        assert 5_000 <= size <= 20_000, (tid, size)
        row = re.search(rf"^\| {re.escape(tid)} \|.*\| ([\d,]+) \| [\d.]+ \|$", page, re.MULTILINE)
        assert row and int(row.group(1).replace(",", "")) == size, (tid, size)
        total += size
    assert re.search(rf"^\| total \|.*\| {total:,} \| {total * 0.4 / 3600:.2f} \|$", page, re.MULTILINE)


def test_medium_is_cpu_only_and_unknown_presets_are_refused():
    assert PRESETS == ("full", "compact", "medium")
    with pytest.raises(SpaceError, match=r"medium preset has CPU \(llvm\) rules only, not cuda"):
        KnobSpace.for_task(Task.parse("bert_base:0@cuda"), "medium")
    with pytest.raises(SpaceError, match="full and compact only"):
        KnobSpace.for_task(Task.parse("deepbench:3"), "medium")
    with pytest.raises(SpaceError, match="unknown space preset 'large'; known: full, compact, medium"):
        KnobSpace(Task.parse("bert_base:0"), "large")


def test_recorded_space_and_cli_accept_medium(capsys):
    medium = space("bert_base:0")
    recorded = RecordedSpace(medium.to_json())
    assert recorded.preset == "medium" and recorded.size == medium.size
    assert space_fingerprint(recorded) == space_fingerprint(medium)
    assert main(["space", "bert_base:0", "--preset", "medium"]) == 0
    assert "tile_k" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["space", "bert_base:0", "--preset", "large"])


def test_docs_presets_line_names_every_preset():
    page = (ROOT / "docs" / "tasks.md").read_text()
    sentence = page[page.index("Presets: `full`"):].split("shows the knobs")[0]
    assert all(f"`{name}` (" in sentence for name in PRESETS)
