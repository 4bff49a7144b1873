"""The ``tir://`` kernel store: files are read without running code and checked against their
digest (tune_gym.tasks.prim_func, tune_gym.tasks._tir_json, scripts/convert_tir_store.py)."""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tune_gym.errors import TaskError
from tune_gym.tasks import Task
from tune_gym.tasks import prim_func as pf
from tune_gym.tasks._tir_json import MAX_DEPTH

ROOT = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A private user store and an empty repository store; nothing registered in this process."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TUNE_GYM_TIR", raising=False)
    (tmp_path / "benchmarks").mkdir()
    monkeypatch.setenv("TUNE_GYM_BENCHMARKS", str(tmp_path / "benchmarks"))  # its networks/tir: the repository store
    monkeypatch.setattr(pf, "_registered", {})
    return tmp_path / "cache" / "tune_gym" / "tir"


@pytest.fixture()
def no_parsing(monkeypatch):
    """Makes any TVMScript parse fail the test: reading the store must never parse."""
    from tune_gym.tvm_support import tvm

    tvm()
    import tvm.script
    import tvm.script.parser

    def forbidden(*args, **kwargs):
        raise AssertionError("the store parsed TVMScript")

    monkeypatch.setattr(tvm.script, "from_source", forbidden)
    monkeypatch.setattr(tvm.script.parser, "parse", forbidden)


def _scale_func(rows: int = 8, factor: float = 2.0):
    from tvm import te

    a = te.placeholder((rows, 16), name="A")
    b = te.compute((rows, 16), lambda i, j: a[i, j] * factor, name="B")
    return te.create_prim_func([a, b])


def _graph(doc: dict) -> dict:
    return json.loads(zlib.decompress(base64.b64decode(doc["module"])))


def _pack(graph: object) -> str:
    return base64.b64encode(zlib.compress(json.dumps(graph).encode())).decode()


def _write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) + "\n")
    return path


def _evil_script(marker: Path) -> str:
    """A kernel's TVMScript whose ``T.func_attr`` runs a shell command when parsed."""
    script = pf._canonical(_scale_func()).script()
    payload = f'"evil": __import__("os").system("touch {marker}"), '
    return script.replace("T.func_attr({", "T.func_attr({" + payload, 1)


# ---------------------------------------------------------------------------- code never runs
def test_old_form_file_that_runs_a_command_when_parsed_runs_nothing(store, tmp_path):
    from tvm.script import from_source

    from tune_gym.tvm_support import fast_frame_inspection

    marker = tmp_path / "marker"
    script = _evil_script(marker)
    digest = "0123456789abcdef"
    _write(store / f"{digest}.json", {"name": "evil", "digest": digest, "script": script})
    with pytest.raises(TaskError, match=r"0123456789abcdef\.json: a kernel in the old TVMScript form, which is not "
                                        r"loaded .* convert it: python scripts/convert_tir_store\.py .*tir$"):
        Task.parse(f"tir://evil/{digest}?target=llvm")
    assert not marker.exists()
    # the same text next to a module field, in the new form: refused for its extra field, not parsed
    doc = json.loads((store / f"{digest}.json").read_text())
    _write(store / f"{digest}.json", {**doc, "format": pf.FORMAT, "module": "eJwDAAAAAAE="})
    with pytest.raises(TaskError, match=r"not a PrimFunc task file \(want the fields"):
        Task.parse(f"tir://evil/{digest}?target=llvm")
    assert not marker.exists()
    with fast_frame_inspection():  # (the parser inspects frames: slow under pytest without this)
        from_source(script)  # the payload is live: parsing it is what runs it
    assert marker.exists()


def test_reading_a_valid_file_never_parses_tvmscript(store, no_parsing):
    task = pf.register(_scale_func(), "scale")
    pf._registered.clear()
    assert pf.lookup(task.digest)[1].script() == pf._canonical(_scale_func()).script()


# ---------------------------------------------------------------------------- content against digest
def test_register_writes_the_new_form_and_a_fresh_lookup_gives_the_same_module(store):
    import tvm_ffi

    task = pf.register(_scale_func(), "scale", "llvm&cores=1")
    doc = json.loads((store / f"{task.digest}.json").read_text())
    assert sorted(doc) == ["digest", "format", "module", "name"] and doc["format"] == pf.FORMAT
    assert doc["name"] == "scale" and doc["digest"] == task.digest
    pf._registered.clear()  # another process: read from the store file
    name, mod = pf.lookup(task.digest)
    original = pf._canonical(_scale_func())
    assert name == "scale" and mod.script() == original.script() and tvm_ffi.structural_equal(mod, original)
    again = Task.parse(task.uri)
    assert again == task and again.flops == 128 and again.input_shapes == [(8, 16)]
    saved = pf.save(task, store.parent / "elsewhere")
    assert saved.read_text() == (store / f"{task.digest}.json").read_text()


def test_a_file_whose_content_does_not_hash_to_its_name_is_refused(store):
    task = pf.register(_scale_func(), "scale")
    path = store / f"{task.digest}.json"
    doc = json.loads(path.read_text())
    graph = _graph(doc)
    floats = [n for n in graph["nodes"] if n["type"] == "ir.FloatImm"]
    assert [n["data"]["value"] for n in floats] == [2.0]
    floats[0]["data"]["value"] = 3.0  # an edited kernel: valid, but not the one the name says
    _write(path, {**doc, "module": _pack(graph)})
    pf._registered.clear()
    with pytest.raises(TaskError, match=rf"{task.digest}\.json: content does not match the digest: its module hashes "
                                        rf"to {pf.digest_of(_scale_func(factor=3.0))}, not {task.digest}"):
        pf.lookup(task.digest)


def test_a_file_renamed_to_another_digest_is_refused(store):
    task = pf.register(_scale_func(), "scale")
    other = pf.digest_of(_scale_func(4))
    (store / f"{task.digest}.json").rename(store / f"{other}.json")
    pf._registered.clear()
    with pytest.raises(TaskError, match=rf"{other}\.json: content does not match the digest: its module hashes "
                                        rf"to {task.digest}, not {other}"):
        Task.parse(f"tir://scale/{other}?target=llvm")


def test_digest_field_and_name_field_are_checked(store):
    task = pf.register(_scale_func(), "scale")
    path = store / f"{task.digest}.json"
    doc = json.loads(path.read_text())
    pf._registered.clear()
    _write(path, {**doc, "digest": "0" * 16})
    with pytest.raises(TaskError, match=r"its \"digest\" field '0000000000000000' is not the file's digest"):
        pf.lookup(task.digest)
    _write(path, {**doc, "name": "no/slash"})
    with pytest.raises(TaskError, match=r"\"name\" 'no/slash': want 1-200 characters"):
        pf.lookup(task.digest)


def test_a_file_with_another_kind_of_module_is_refused(store):
    from tune_gym.tvm_support import tvm

    tv = tvm()
    func = pf._canonical(_scale_func())["main"]
    digest = pf.digest_of(func)
    two = tv.IRModule({"main": func, "other": _scale_func(4).with_attr("global_symbol", "other")})
    renamed = tv.IRModule({"other": func})
    for mod, shown in [(two, r"\['main \(PrimFunc\)', 'other \(PrimFunc\)'\]"), (renamed, r"\['other \(PrimFunc\)'\]")]:
        _write(store / f"{digest}.json", {"name": "scale", "digest": digest, "format": pf.FORMAT,
                                          "module": pf._encode(mod)})
        with pytest.raises(TaskError, match=rf"{digest}\.json: its module is not one PrimFunc named main \(it has "
                                            rf"{shown}\)"):
            pf.lookup(digest)
    not_module = json.loads(tv.ir.save_json(func))
    _write(store / f"{digest}.json", {"name": "scale", "digest": digest, "format": pf.FORMAT,
                                      "module": _pack(not_module)})
    with pytest.raises(TaskError, match=r"its module graph: root node \d+ is a tirx.PrimFunc, not an ir.IRModule"):
        pf.lookup(digest)


def test_truncated_and_garbage_files_are_refused(store):
    task = pf.register(_scale_func(), "scale")
    path = store / f"{task.digest}.json"
    text = path.read_text()
    doc = json.loads(text)
    pf._registered.clear()
    cases = [
        (text[: len(text) // 2], r"not a PrimFunc task file \(not JSON"),
        ("\x00\xff garbage", r"not a PrimFunc task file \(not JSON"),
        (json.dumps([1, 2]), r"not a PrimFunc task file \(want the fields .* got list\)"),
        (json.dumps({**doc, "module": doc["module"][:-8] + "!!!!"}), r"\"module\" is not base64 of zlib data"),
        (json.dumps({**doc, "module": doc["module"][:-8]}), r"\"module\" is truncated"),
        (json.dumps({**doc, "module": base64.b64encode(zlib.compress(b"{}")[:-3]).decode()}),
         r"\"module\" is truncated or has data after its end"),
        (json.dumps({**doc, "module": _pack({"nodes": []})}), r"its module graph: not an object graph"),
        (json.dumps({**doc, "format": "tvmscript"}), r"format 'tvmscript', want 'tvm-json-graph\+zlib\+base64'"),
    ]
    for content, message in cases:
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
        with pytest.raises(TaskError, match=rf"^{re.escape(str(path))}: .*{message}"):
            pf.lookup(task.digest)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TaskError, match=r"not a PrimFunc task file \(not JSON"):
        pf.lookup(task.digest)


def test_graphs_that_would_crash_or_reach_out_are_refused(store):
    task = pf.register(_scale_func(), "scale")
    path = store / f"{task.digest}.json"
    doc = json.loads(path.read_text())
    pf._registered.clear()

    def refused(graph, message):
        _write(path, {**doc, "module": _pack(graph)})
        with pytest.raises(TaskError, match=message):
            pf.lookup(task.digest)

    cycle = {"root_index": 1, "nodes": [{"type": "None"}, {"type": "ffi.Array", "data": [1]}]}
    refused(cycle, r"node 1 \(ffi.Array\) item 0: 1 is not the index of an earlier node")  # TVM would crash on it
    chain = [{"type": "None"}, {"type": "ffi.Array", "data": []}]
    chain += [{"type": "ffi.Array", "data": [i]} for i in range(1, MAX_DEPTH + 2)]
    refused({"root_index": len(chain) - 1, "nodes": chain}, rf"references nest deeper than {MAX_DEPTH}")
    for kind in ["ffi.Module", "ffi.Tensor", "ffi.Function", "ir.EnvFunc", "runtime.disco.DRef", "os.system"]:
        refused({"root_index": 0, "nodes": [{"type": kind, "data": "x"}]},
                rf"node 0 has type '{re.escape(kind)}', which a kernel's graph may not hold")
    refused({"root_index": 0, "nodes": [{"type": "ir.Op", "data": "tirx.call_extern"}]},
            r"node 0 is the operator tirx.call_extern, which calls code named in the kernel")
    refused({"root_index": 0, "nodes": [{"type": "ffi.String", "data": "pragma_import_llvm"}]},
            r"node 0 is the attribute 'pragma_import_llvm', which imports code")
    bomb = base64.b64encode(zlib.compress(b" " * (pf._MAX_GRAPH + 10))).decode()
    _write(path, {**doc, "module": bomb})
    with pytest.raises(TaskError, match=r"\"module\" inflates to more than"):
        pf.lookup(task.digest)


def test_a_refused_file_is_replaced_by_register_and_skipped_by_lookup(store):
    digest = pf.digest_of(_scale_func())
    old = {"name": "scale", "digest": digest, "script": pf._canonical(_scale_func()).script()}
    _write(store / f"{digest}.json", old)
    with pytest.raises(TaskError, match="old TVMScript form"):
        pf.lookup(digest)
    pf.register(_scale_func(), "scale")  # the kernel is known in this process: the user store gets it anew
    assert json.loads((store / f"{digest}.json").read_text())["format"] == pf.FORMAT
    pf._registered.clear()
    _write(pf.repo_store() / f"{digest}.json", old)  # searched first, refused: the user store's file is used
    assert pf.lookup(digest)[0] == "scale"


# ---------------------------------------------------------------------------- the committed store
def test_committed_kernels_are_in_the_new_form_and_match_their_digests():
    files = sorted(pf.repo_store().glob("*.json"))
    assert len(files) >= 70
    for path in files:
        name, mod = pf.read_kernel(path)
        assert pf.digest_of(mod) == path.stem and re.fullmatch(r"[A-Za-z0-9_.]+", name)
    referenced = {m["digest"] for p in (ROOT / "benchmarks" / "datasets" / "networks").rglob("tir_*.parquet")
                  if (m := re.match(r"tir_(?P<digest>[0-9a-f]{16})_", p.name))}
    assert referenced and referenced <= {p.stem for p in files}


def _converter():
    path = ROOT / "scripts" / "convert_tir_store.py"
    spec = importlib.util.spec_from_file_location("convert_tir_store", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_convert_script_converts_old_files_keeping_digests(tmp_path, store, capsys):
    convert = _converter()
    directory = tmp_path / "trusted"
    good = pf.digest_of(_scale_func())
    _write(directory / f"{good}.json", {"name": "scale", "digest": good,
                                        "script": pf._canonical(_scale_func()).script()})
    wrong = pf.digest_of(_scale_func(4))
    _write(directory / f"{wrong}.json", {"name": "x", "digest": wrong, "script": pf._canonical(_scale_func()).script()})
    assert convert.main([str(directory), "--dry-run"]) == 1
    assert "would convert 1, already current 0, failed 1" in capsys.readouterr().out
    assert "script" in json.loads((directory / f"{good}.json").read_text())
    assert convert.main([str(directory)]) == 1
    out, err = capsys.readouterr()
    assert "converted 1, already current 0, failed 1" in out and f"its script hashes to {good}" in err
    name, mod = pf.read_kernel(directory / f"{good}.json")
    assert name == "scale" and mod.script() == pf._canonical(_scale_func()).script()
    assert "script" in json.loads((directory / f"{wrong}.json").read_text())  # left unchanged
    (directory / f"{wrong}.json").unlink()
    assert convert.main([str(directory)]) == 0
    assert "converted 0, already current 1, failed 0" in capsys.readouterr().out


# ---------------------------------------------------------------------------- fuzzing the reader
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)
_TYPES = ["None", "int", "bool", "float", "DataType", "ffi.String", "ffi.Array", "ffi.Map", "ffi.Shape", "ffi.Module",
          "ffi.Tensor", "ffi.Function", "ir.Op", "ir.EnvFunc", "ir.IntImm", "ir.Var", "tirx.PrimFunc", "ir.IRModule",
          "tirx.For", "s_tir.SBlock", "relax.expr.Function", "tirx.Axis", "ffi.IntEnum", "no.such.Type"]


@pytest.fixture(scope="module")
def kernel_doc():
    """A valid store document of a small kernel and its graph."""
    from tune_gym.tvm_support import tvm

    tvm()
    mod = pf._canonical(_scale_func())
    doc = {"name": "scale", "digest": pf.digest_of(mod), "format": pf.FORMAT, "module": pf._encode(mod)}
    return doc, _graph(doc), mod.script()


def _check_read(path: Path, expected_script: str, marker: Path) -> None:
    """Reading ``path`` gives a TaskError or exactly the expected kernel; nothing runs."""
    try:
        _, mod = pf.read_kernel(path)
    except TaskError as err:
        assert str(err).startswith(str(path)) and "\n" not in str(err)
    else:
        assert mod.script() == expected_script
    assert not marker.exists()


@FUZZ
@given(data=st.binary(max_size=600))
def test_fuzz_random_bytes_are_refused(tmp_path, no_parsing, data):
    path = tmp_path / "0123456789abcdef.json"
    path.write_bytes(data)
    with pytest.raises(TaskError, match=r"0123456789abcdef\.json: "):
        pf.read_kernel(path)


@FUZZ
@given(key=st.sampled_from(["name", "digest", "format", "module", "script", "extra"]), value=_JSON,
       drop=st.booleans())
def test_fuzz_document_mutations_are_refused(tmp_path, no_parsing, kernel_doc, key, value, drop):
    doc, _, script = kernel_doc
    marker = tmp_path / "marker"
    mutated = dict(doc)
    if drop:
        mutated.pop(key, None)
    else:
        mutated[key] = value if key != "script" else _evil_script(marker)
    path = _write(tmp_path / f"{doc['digest']}.json", mutated)
    _check_read(path, script, marker)


_MUTATION = st.tuples(st.integers(0, 10_000),
                      st.sampled_from(["type", "field", "value", "drop", "root", "swap", "repoint", "repoint"]),
                      st.sampled_from(_TYPES), st.integers(-3, 10_000), _JSON)


@FUZZ
@given(mutations=st.lists(_MUTATION, min_size=1, max_size=3))
def test_fuzz_graph_mutations_never_crash_and_never_give_another_kernel(tmp_path, no_parsing, kernel_doc, mutations):
    doc, graph, script = kernel_doc
    graph = json.loads(json.dumps(graph))
    nodes = graph["nodes"]
    marker = tmp_path / "marker"
    for at, how, kind, number, value in mutations:
        node = nodes[at % len(nodes)]
        data = node.get("data")
        if how == "type":
            node["type"] = kind
        elif how == "root":
            graph["root_index"] = number
        elif how == "swap":
            other = nodes[number % len(nodes)]
            node["data"], other["data"] = other.get("data"), data
        elif isinstance(data, dict) and data:
            name = sorted(data)[number % len(data)]
            target = data[name]
            if how == "drop":
                del data[name]
            elif how == "repoint" and isinstance(target, int) and 0 <= target < len(nodes):
                # another node of the type the field holds: the graph stays well-typed, the kernel changes
                same = [j for j, n in enumerate(nodes) if n["type"] == nodes[target]["type"]]
                data[name] = same[number % len(same)]
            else:
                data[name] = number if how == "field" else value
        elif isinstance(data, list) and data:
            data[number % len(data)] = number if how == "field" else value
        else:
            node["data"] = value
    path = _write(tmp_path / f"{doc['digest']}.json", {**doc, "module": _pack(graph)})
    _check_read(path, script, marker)
