"""CUDA validity labels (tune_gym.datasets.validity): labels, the Parquet round trip, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pyarrow")

N = 40


@pytest.fixture(scope="module")
def space():
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    return KnobSpace.for_task(Task.parse("resnet18:9@cuda"), "compact")  # 324 configs, ~60% valid


@pytest.fixture(scope="module")
def labels(space):
    from tune_gym.datasets.validity import collect_validity

    return collect_validity(space.task, "compact", n=N, seed=0, command="pytest")


def test_labels_agree_with_space(space, labels):
    from tune_gym.datasets.dataset import space_fingerprint
    from tune_gym.datasets.validity import GPU_CAUSES

    assert len(labels) == N and labels.configs.shape == (N, space.n_knobs)
    assert len({tuple(c) for c in labels.configs.tolist()}) == N  # distinct
    assert labels.task == space.task.uri and labels.space_fingerprint == space_fingerprint(space)
    assert labels.space_size == space.size and labels.meta["sampling"] == "uniform" and not labels.exhaustive
    assert labels.meta["target"]["max_threads_per_block"] == 1024 and labels.meta["gpu_used"] is False
    assert 0 < labels.n_valid < N  # this space has both
    for cfg, ok, reason, message, cause in zip(labels.config_list(), labels.valid, labels.reason, labels.message,
                                               labels.causes):
        assert bool(ok) == space.is_valid(cfg)
        assert (reason == "" and message == "" and cause == "") if ok else (reason and message)
        if reason == "VerifyGPUCode":  # diagnosed: the failed check is one of the known ones, never unknown
            assert all(c in GPU_CAUSES for c in cause.split("+")) and cause != "unknown", message


def test_same_seed_same_configs(space, labels):
    expected = space.sample_unique(np.random.default_rng(0), N)
    assert labels.config_list() == expected


def test_diagnosis_finds_nothing_on_valid_configs(space, labels):
    from tune_gym.datasets.validity import diagnose_gpu

    valid = [c for c, ok in zip(labels.config_list(), labels.valid) if ok][:3]
    for cfg in valid:
        assert diagnose_gpu(space, cfg)[0] == "unknown"


def test_label_configs_direct(space, labels):
    from tune_gym.datasets.validity import label_configs

    valid, reason, message = label_configs(space, labels.configs[:5], diagnose=False)
    assert valid.tolist() == labels.valid[:5].tolist() and reason == labels.reason[:5]
    assert all(m == "rejected by postproc VerifyGPUCode" for m, r in zip(message, reason) if r == "VerifyGPUCode")


def test_reason_of():
    from tune_gym.datasets.validity import cause_of, reason_of

    assert reason_of("") == ""
    assert reason_of("rejected by postproc VerifyGPUCode") == "VerifyGPUCode"
    assert reason_of("rejected by postproc VerifyGPUCode: shared_memory: 65536 B ...") == "VerifyGPUCode"
    assert reason_of("postproc RewriteCooperativeFetch failed: boom") == "RewriteCooperativeFetch:error"
    assert reason_of("schedule error: bad split") == "schedule"
    assert cause_of("VerifyGPUCode", "rejected by postproc VerifyGPUCode: shared_memory+vthread: x") == \
        "shared_memory+vthread"
    assert cause_of("schedule", "schedule error: x") == ""


def test_summary_and_wilson(labels):
    from tune_gym.datasets.validity import summary, wilson_interval

    s = summary(labels)
    assert s["n"] == N and s["valid"] == labels.n_valid and s["valid_ratio"] == labels.n_valid / N
    lo, hi = s["valid_ci95"]
    assert 0 <= lo < s["valid_ratio"] < hi <= 1
    assert sum(s["reasons"].values()) == N - labels.n_valid
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)


def test_round_trip(labels, tmp_path):
    from tune_gym.datasets.validity import load_validity, save_validity

    path = save_validity(labels, tmp_path / "v.parquet")
    back = load_validity(path)
    assert back.task == labels.task and back.preset == labels.preset
    assert back.space_fingerprint == labels.space_fingerprint and back.space_size == labels.space_size
    assert np.array_equal(back.configs, labels.configs) and back.configs.dtype == labels.configs.dtype
    assert np.array_equal(back.valid, labels.valid)
    assert back.reason == labels.reason and back.message == labels.message and back.meta == labels.meta
    assert back.source == str(path)


def _rewrite(path, change):
    """Rewrite a label file with ``change(columns, header)`` applied, keeping its old checksum."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tune_gym.datasets.validity import META_KEY

    table = pq.read_table(path)
    cols = table.to_pydict()
    header = json.loads(table.schema.metadata[META_KEY])
    change(cols, header)
    out = pa.table({k: pa.array(v, table.schema.field(k).type) for k, v in cols.items()})
    pq.write_table(out.replace_schema_metadata({META_KEY: json.dumps(header).encode()}), path)


def test_tampered_file_refused(labels, tmp_path):
    from tune_gym.datasets.validity import ValidityError, load_validity, save_validity

    path = save_validity(labels, tmp_path / "tampered.parquet")

    def flip(cols, header):
        cols["valid"][0] = not cols["valid"][0]

    _rewrite(path, flip)
    with pytest.raises(ValidityError, match="checksum mismatch") as err:
        load_validity(path)
    assert str(path) in str(err.value)


def test_changed_space_refused(labels, tmp_path):
    from tune_gym.datasets.validity import ValidityError, load_validity, save_validity

    path = save_validity(labels, tmp_path / "old_space.parquet")

    def other_space(cols, header):
        header["space_fingerprint"] = "0123456789abcdef"

    _rewrite(path, other_space)
    with pytest.raises(ValidityError, match="Recollect") as err:
        load_validity(path)
    assert str(path) in str(err.value) and "0123456789abcdef" in str(err.value)


def test_not_a_label_file_refused(labels, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tune_gym.datasets.validity import ValidityError, load_validity

    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"valid": [True]}), path)
    with pytest.raises(ValidityError, match="tune_gym_validity") as err:
        load_validity(path)
    assert str(path) in str(err.value)
    with pytest.raises(ValidityError, match="does not exist"):
        load_validity(tmp_path / "missing.parquet")
