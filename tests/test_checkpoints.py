"""Sealed checkpoints (:mod:`agents.pretrained`): the sidecar carries the SHA-256 of the weights and
of its own content; a changed byte in either file, an unsealed or garbled sidecar, and weights
holding NaN or inf are refused with one-line errors, and a good checkpoint round-trips."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import shutil
import struct
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.models.oneshot import KNOB_DIM, OneShotModel
from agents.models.tlp import TLPModel
from agents.pretrained import (
    CHECKPOINT_DIR,
    CheckpointError,
    pick_checkpoint,
    read_checkpoint,
    read_sidecar,
    seal_checkpoint,
    sidecar_digest,
)
from tune_gym.features.task import TASK_FEATURE_DIM

REPO = Path(__file__).resolve().parents[1]
SMALL = {"shape": (4, 6), "d_model": 16, "ff": 32, "layers": 1, "dropout": 0.0}
META = {"train_tasks": ["op://a", "op://b"], "rows": {"train": 100}, "command": "test",
        "history": {"train_loss": [0.5, 0.25]}}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _save(path: Path, seed: int = 0, metadata: dict[str, Any] | None = None) -> OneShotModel:
    model = OneShotModel(seed=seed, **SMALL)
    model.save(path, META if metadata is None else metadata)
    return model


def _refused(load: Any, path: Path, match: str) -> str:
    """The one-line message with which ``load(path)`` refuses the checkpoint."""
    with pytest.raises(CheckpointError, match=match) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def _edit_sidecar(path: Path, edit: Any) -> None:
    sidecar = path.with_suffix(".json")
    doc = json.loads(sidecar.read_text())
    edit(doc)
    sidecar.write_text(json.dumps(doc, indent=2, sort_keys=True))


def _tensor_byte(path: Path) -> int:
    """The offset of a byte inside the largest tensor storage of a ``torch.save`` zip file."""
    with zipfile.ZipFile(path) as archive:
        entry = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack("<HH", raw[entry.header_offset + 26: entry.header_offset + 30])
    return entry.header_offset + 30 + name_len + extra_len + entry.file_size // 2


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> Path:
    """A sealed tiny checkpoint (copied, never changed, by the tests that use it)."""
    path = tmp_path_factory.mktemp("sealed") / "m.pt"
    _save(path)
    return path


# ---------------------------------------------------------------------------- round trip
def test_a_good_checkpoint_round_trips_with_its_checksums(tmp_path):
    model = _save(tmp_path / "m.pt")
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["checksums"]["weights"] == hashlib.sha256((tmp_path / "m.pt").read_bytes()).hexdigest()
    assert doc["checksums"]["sidecar"] == sidecar_digest(doc)
    loaded = OneShotModel.load(tmp_path / "m.pt")
    assert loaded.metadata == META and loaded.config == model.config
    x = np.random.default_rng(0).normal(size=(8, 4, 6)).astype(np.float32)
    tx, kx = np.zeros((8, TASK_FEATURE_DIM), np.float32), np.zeros((8, KNOB_DIM), np.float32)
    assert np.array_equal(loaded.predict(tx, kx, x), model.predict(tx, kx, x))
    assert not list(tmp_path.glob(".*.tmp"))  # written in place by rename, nothing left over


def test_every_committed_checkpoint_is_sealed_and_reads():
    pts = sorted(CHECKPOINT_DIR.glob("*.pt"))
    assert len(pts) >= 11
    for pt in pts:
        doc, state = read_checkpoint(pt, json.loads(pt.with_suffix(".json").read_text())["model"])
        assert doc["checksums"]["weights"] == hashlib.sha256(pt.read_bytes()).hexdigest() and state


# ---------------------------------------------------------------------------- the weights
@pytest.mark.parametrize("name, cls", [("tlp_holdout-resnet18_seed0", TLPModel),
                                       ("oneshot_pgs_seed0", OneShotModel)])
def test_a_flipped_byte_in_committed_weights_is_refused(tmp_path, name, cls):
    for suffix in (".pt", ".json"):
        shutil.copy(CHECKPOINT_DIR / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    path = tmp_path / f"{name}.pt"
    _flip(path, _tensor_byte(path))
    good = torch.load(CHECKPOINT_DIR / f"{name}.pt", weights_only=True)
    bad = torch.load(path, weights_only=True)  # torch itself reads the changed weights without a word
    assert any(not torch.equal(good[k], bad[k]) for k in good)
    message = _refused(cls.load, path, "do not match the SHA-256")
    assert str(path) in message and "restore it from git or retrain" in message


@pytest.mark.parametrize("where", ["start", "middle", "end", "append", "truncate"])
def test_any_change_to_the_weights_file_is_refused(tmp_path, where):
    path = tmp_path / "m.pt"
    _save(path)
    raw = bytearray(path.read_bytes())
    if where == "append":
        raw += b"\0"
    elif where == "truncate":
        del raw[-1]
    else:
        raw[{"start": 0, "middle": len(raw) // 2, "end": -1}[where]] ^= 0x80
    path.write_bytes(bytes(raw))
    _refused(OneShotModel.load, path, "do not match the SHA-256 in m.json")


@given(offset=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
@SETTINGS
def test_hypothesis_no_flipped_bit_of_the_weights_loads(sealed, offset, bit):
    raw = bytearray(sealed.read_bytes())
    raw[offset % len(raw)] ^= 1 << bit
    with tempfile.TemporaryDirectory() as tmp:
        flipped = Path(tmp) / "m.pt"
        flipped.write_bytes(bytes(raw))
        shutil.copy(sealed.with_suffix(".json"), flipped.with_suffix(".json"))
        _refused(OneShotModel.load, flipped, "do not match the SHA-256")


def test_a_missing_weights_file_is_refused(tmp_path):
    _save(tmp_path / "m.pt")
    (tmp_path / "m.pt").unlink()
    _refused(OneShotModel.load, tmp_path / "m.pt", "weights .*m.pt cannot be read")


# ---------------------------------------------------------------------------- non-finite weights
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_on_save(tmp_path, value):
    model = OneShotModel(**SMALL)
    with torch.no_grad():
        next(model.net.parameters()).view(-1)[3] = value
    with pytest.raises(CheckpointError, match=r"refusing to save .*m.pt: tensor '.*' holds 1 non-finite value"):
        model.save(tmp_path / "m.pt", META)
    assert not list(tmp_path.iterdir())  # nothing written


def test_non_finite_weights_are_refused_on_save_by_every_model(tmp_path):
    tlp = TLPModel(shape=(4, 6), attention_heads=1, res_blocks=0)
    with torch.no_grad():
        tlp.net.heads[0][0].bias.fill_(float("nan"))
    with pytest.raises(CheckpointError, match="non-finite"):
        tlp.save(tmp_path / "t.pt", META)
    assert not list(tmp_path.iterdir())


def _sealed_with_nan(path: Path) -> None:
    """A checkpoint whose weights hold a NaN but whose checksums match (as an older writer would
    have sealed it): only the finiteness check can refuse it."""
    _save(path)
    state = torch.load(path, weights_only=True)
    key = next(k for k, v in state.items() if v.is_floating_point() and v.numel() > 1)
    state[key].view(-1)[0] = float("nan")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(buffer.getvalue())

    def reseal(doc: dict[str, Any]) -> None:
        doc["checksums"]["weights"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    _edit_sidecar(path, reseal)


def test_non_finite_weights_are_refused_on_load_and_on_seal(tmp_path):
    path = tmp_path / "m.pt"
    _sealed_with_nan(path)
    message = _refused(OneShotModel.load, path, r"weights .*m.pt: tensor '.*' holds 1 non-finite value")
    assert "retrain" in message
    before = path.with_suffix(".json").read_bytes()
    with pytest.raises(CheckpointError, match="non-finite"):
        seal_checkpoint(path)
    assert path.with_suffix(".json").read_bytes() == before


# ---------------------------------------------------------------------------- the sidecar
def test_an_edited_train_tasks_is_refused_by_load_and_by_the_checkpoint_choice(tmp_path):
    _save(tmp_path / "m.pt")
    with pytest.raises(FileNotFoundError, match="trained without op://a"):
        pick_checkpoint("OneShotModel", "op://a", tmp_path)  # it saw op://a
    _edit_sidecar(tmp_path / "m.pt", lambda doc: doc["metadata"]["train_tasks"].remove("op://a"))
    message = _refused(OneShotModel.load, tmp_path / "m.pt", "m.json does not match its checksum")
    assert "restore it from git or retrain" in message
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        pick_checkpoint("OneShotModel", "op://a", tmp_path)  # would otherwise pick a model that saw op://a
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        read_sidecar(tmp_path / "m.json")


def test_a_whitespace_only_rewrite_of_the_sidecar_still_loads(tmp_path):
    _save(tmp_path / "m.pt")
    sidecar = tmp_path / "m.json"
    sidecar.write_text(json.dumps(json.loads(sidecar.read_text())))  # one line, other key order
    assert OneShotModel.load(tmp_path / "m.pt").metadata == META


def test_a_sidecar_without_checksums_is_refused_with_how_to_seal_it(tmp_path):
    _save(tmp_path / "m.pt")
    _edit_sidecar(tmp_path / "m.pt", lambda doc: doc.pop("checksums"))
    message = _refused(OneShotModel.load, tmp_path / "m.pt", "carries no checksums")
    assert f"python scripts/seal_checkpoints.py {tmp_path / 'm.pt'}" in message and "else retrain" in message
    seal_checkpoint(tmp_path / "m.pt")
    assert OneShotModel.load(tmp_path / "m.pt").metadata == META


GARBLED = [
    "not a dict",
    None,  # JSON null: as good as missing
    {"weights": "ab" * 32},
    {"weights": "ab" * 32, "sidecar": "ab" * 31},
    {"weights": "AB" * 32, "sidecar": "ab" * 32},
    {"weights": "ab" * 32, "sidecar": "zz" * 32},
    {"weights": "ab" * 32, "sidecar": 5},
    {"weights": "ab" * 32, "sidecar": "ab" * 32, "extra": "ab" * 32},
]


@pytest.mark.parametrize("checksums", GARBLED, ids=range(len(GARBLED)))
def test_garbled_checksums_are_refused(tmp_path, checksums):
    _save(tmp_path / "m.pt")

    def garble(doc: dict[str, Any]) -> None:
        doc["checksums"] = checksums
    _edit_sidecar(tmp_path / "m.pt", garble)
    _refused(OneShotModel.load, tmp_path / "m.pt", "carries no checksums|field 'checksums' must be")


def test_a_wrong_but_well_formed_checksum_is_refused(tmp_path):
    _save(tmp_path / "m.pt")

    def swap(doc: dict[str, Any]) -> None:
        sums = doc["checksums"]
        sums["weights"], sums["sidecar"] = sums["sidecar"], sums["weights"]
    _edit_sidecar(tmp_path / "m.pt", swap)
    _refused(OneShotModel.load, tmp_path / "m.pt", "does not match its checksum")


@pytest.mark.parametrize("text, match", [("{", "not valid JSON \\(line 1, column 2"),
                                         ("[1, 2]", "must hold a JSON object"),
                                         (b"\xff\xfe", "not UTF-8 text")])
def test_an_unreadable_sidecar_is_refused(tmp_path, text, match):
    _save(tmp_path / "m.pt")
    sidecar = tmp_path / "m.json"
    sidecar.write_bytes(text if isinstance(text, bytes) else text.encode())
    _refused(OneShotModel.load, tmp_path / "m.pt", match)


def test_a_resealed_config_that_does_not_fit_the_weights_is_refused_in_one_line(tmp_path):
    _save(tmp_path / "m.pt")
    _edit_sidecar(tmp_path / "m.pt", lambda doc: doc["config"].update(d_model=32))
    seal_checkpoint(tmp_path / "m.pt")  # sealing vouches for the files, not for their agreement
    _refused(OneShotModel.load, tmp_path / "m.pt", "do not fit the config of m.json: .*size mismatch")
    _edit_sidecar(tmp_path / "m.pt", lambda doc: doc["config"].update(colour="red"))
    seal_checkpoint(tmp_path / "m.pt")
    _refused(OneShotModel.load, tmp_path / "m.pt", "its config does not build a OneShotModel .*colour")


# ---------------------------------------------------------------------------- hypothesis: sidecar edits
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6)
                           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=6)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path (dict keys and list indices) of a JSON document."""
    out: list[tuple[Any, ...]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


def _mutate(doc: dict[str, Any], path: tuple[Any, ...], op: str, value: Any, new_key: str) -> None:
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if op == "set":
        parent[key] = value
    elif op == "delete":
        del parent[key]
    elif isinstance(parent[key], dict):  # add a key
        parent[key][new_key] = value
    elif isinstance(parent[key], list):
        parent[key].append(value)
    else:
        parent[key] = [parent[key], value]


@given(data=st.data())
@SETTINGS
def test_hypothesis_no_sidecar_edit_loads_with_changed_content(sealed, data):
    original = json.loads(sealed.with_suffix(".json").read_text())
    doc = copy.deepcopy(original)
    paths = _paths(doc)
    path = data.draw(st.sampled_from(paths), label="path")
    op = data.draw(st.sampled_from(["set", "delete", "add"]), label="op")
    _mutate(doc, path, op, data.draw(JSON_VALUES, label="value"), data.draw(st.text(max_size=5), label="key"))
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "m.pt"
        shutil.copy(sealed, target)
        target.with_suffix(".json").write_text(json.dumps(doc, indent=data.draw(st.sampled_from([None, 2]))))
        try:
            loaded = OneShotModel.load(target)
        except CheckpointError as err:
            assert "\n" not in str(err)
            return
    # it loaded: then the edit changed nothing the checksum covers
    assert sidecar_digest(doc) == sidecar_digest(original) and doc["checksums"] == original["checksums"]
    assert loaded.metadata == original["metadata"]


@given(offset=st.integers(min_value=0), byte=st.integers(min_value=0, max_value=255))
@SETTINGS
def test_hypothesis_a_changed_byte_of_the_sidecar_never_loads_changed_content(sealed, offset, byte):
    text = bytearray(sealed.with_suffix(".json").read_bytes())
    text[offset % len(text)] = byte
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "m.pt"
        shutil.copy(sealed, target)
        target.with_suffix(".json").write_bytes(bytes(text))
        try:
            loaded = OneShotModel.load(target)
        except CheckpointError as err:
            assert "\n" not in str(err)
            return
        assert sidecar_digest(read_sidecar(target.with_suffix(".json"))) == sidecar_digest(
            json.loads(sealed.with_suffix(".json").read_text()))
    assert loaded.metadata == META


# ---------------------------------------------------------------------------- the seal script and training save
def _script(name: str) -> Any:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import importlib

        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "scripts"))


def test_the_seal_script_seals_a_trusted_checkpoint_and_checks_them(tmp_path, capsys):
    script = _script("seal_checkpoints")
    _save(tmp_path / "m.pt")
    _edit_sidecar(tmp_path / "m.pt", lambda doc: doc.pop("checksums"))
    assert script.main(["--check", str(tmp_path / "m.pt")]) == 1
    assert "FAILED sidecar" in capsys.readouterr().out
    assert script.main([str(tmp_path / "m.json")]) == 0
    assert capsys.readouterr().out.startswith(f"sealed {tmp_path / 'm.pt'}")
    assert script.main(["--check", str(tmp_path / "m")]) == 0
    assert OneShotModel.load(tmp_path / "m.pt").metadata == META


def test_the_seal_script_leaves_a_checkpoint_that_does_not_load_as_it_was(tmp_path):
    script = _script("seal_checkpoints")
    _save(tmp_path / "m.pt")
    _edit_sidecar(tmp_path / "m.pt", lambda doc: doc["config"].update(d_model=32))
    before = (tmp_path / "m.json").read_bytes()
    with pytest.raises(SystemExit, match="not sealed: weights .* do not fit the config"):
        script.main([str(tmp_path / "m.pt")])
    assert (tmp_path / "m.json").read_bytes() == before
    with pytest.raises(SystemExit, match="no checkpoint 'nothing-here'"):
        script.main(["nothing-here"])
    with pytest.raises(SystemExit):
        script.main([])  # sealing needs named files


def test_a_training_script_that_diverged_writes_no_checkpoint(tmp_path):
    common = _script("training_common")
    model = OneShotModel(**SMALL)
    with torch.no_grad():
        next(model.net.parameters()).fill_(float("nan"))
    with pytest.raises(SystemExit, match="no checkpoint written: refusing to save .* non-finite"):
        common.save_checkpoint(model, tmp_path / "m.pt", META)
    assert not list(tmp_path.iterdir())


def test_a_boolean_format_is_not_format_1_even_when_resealed(tmp_path):
    path = tmp_path / "m.pt"
    _save(path)

    def edit(doc: dict[str, Any]) -> None:
        doc["format"] = True  # JSON true == 1 in Python
        doc["checksums"]["sidecar"] = sidecar_digest(doc)
    _edit_sidecar(path, edit)
    _refused(OneShotModel.load, path, "is not a OneShotModel checkpoint of format 1")
