"""Pre-packed weights (``weights=packed``): kernels are built without the weight layout
transform, run on packed weights, and still checked against PyTorch; records migrate."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

from tune_gym.measure import workers
from tune_gym.measure.live import LiveBackend
from tune_gym.records import load_records
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

DENSE = Task.make("dense", m=32, n=32, k=32)
CONV = Task.make("conv2d_nchw", c=16, h=14, w=14, k=16, r=3, p=1)
NCHWC = Task.make("conv2d_nchwc", c=16, h=14, w=14, k=16, r=3, p=1, ib=4, ob=8)


def test_pack_weight_follows_the_index_map():
    w = np.arange(32 * 4, dtype=np.float32).reshape(32, 4)
    pack = (1, (8, 4, 4), (("floordiv", ("var", 0), ("const", 4)), ("var", 1), ("floormod", ("var", 0), ("const", 4))))
    packed = workers.pack_weight(w, pack)  # packed[i // 4, j, i % 4] = w[i, j]
    np.testing.assert_array_equal(packed, w.reshape(8, 4, 4).transpose(0, 2, 1))
    with pytest.raises(ValueError, match="not a bijection"):
        workers.pack_weight(w, (1, (32, 4), (("var", 0), ("const", 0))))
    with pytest.raises(ValueError, match="outside the packed shape"):
        workers.pack_weight(w, (1, (8, 4, 4), (("var", 0), ("var", 1), ("const", 0))))


@pytest.mark.parametrize("task", [DENSE, CONV, NCHWC], ids=["dense", "conv2d", "conv2d_nchwc"])
def test_packed_kernels_take_packed_weights_and_match_pytorch(task):
    """In process: the built kernel's weight argument has the packed shape; on the packed
    weights it computes what PyTorch computes on the given ones."""
    space = KnobSpace.for_task(task, "compact")
    for cfg in space.sample_unique(np.random.default_rng(0), 2):
        sch, why = space.apply(cfg)
        assert sch is not None, why
        built = workers.build_artifact((sch.mod, task.target.resolved()))
        ((index, shape, _),) = built["packs"]
        assert index == 1 and built["args"][1][0] == shape != task.input_shapes[1]
        job = {"path": built["path"], "args": built["args"], "packs": built["packs"], "device": "cpu",
               "inputs": task.input_shapes, "output": task.output_shape(), "dtype": task.dtype, "number": 1,
               "repeat": 1, "min_repeat_ms": 1, "seed": 0, "check_task": task.uri}
        out = workers.run_artifact(job)
        assert out["check_error"] is None and out["costs"][0] > 0


def _flipped_build(job):
    """A corrupted packed kernel: it reads its weight reversed along the first axis."""
    from tune_gym.measure.workers import build_artifact

    mod, _ = job
    built = build_artifact(job)
    packs = []
    for index, shape, exprs in built["packs"]:
        last = int(mod["main"].params[index].shape[0]) - 1
        flip = ("sub", ("const", last), ("var", 0))
        packs.append((index, shape, tuple(_substitute(e, flip) for e in exprs)))
    return {**built, "packs": packs}


def _substitute(expr, axis0):
    if expr == ("var", 0):
        return axis0
    if expr[0] in ("var", "const"):
        return expr
    return (expr[0], _substitute(expr[1], axis0), _substitute(expr[2], axis0))


@pytest.mark.parametrize("task", [DENSE, pytest.param(CONV, marks=pytest.mark.heavy),
                                  pytest.param(NCHWC, marks=pytest.mark.heavy)],
                         ids=["dense", "conv2d", "conv2d_nchwc"])
def test_live_corrupted_packed_kernel_is_wrong_result_and_correct_ones_pass(task, monkeypatch):
    space = KnobSpace.for_task(task, "compact")
    configs = space.sample_unique(np.random.default_rng(4), 3)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with LiveBackend(repeat=1, min_repeat_ms=1) as backend:
        monkeypatch.setattr(workers, "build_artifact", _flipped_build)
        (bad,) = backend.measure(task, space, configs[:1])
        assert bad.error == "wrong_result" and "differ from PyTorch" in bad.error_msg
        monkeypatch.undo()
        results = backend.measure(task, space, configs)  # the same config, built right, and two more
    assert all(r.ok for r in results), [r.error_msg for r in results]
    assert results[0].extra.get("checked") is True  # checking went on after the wrong result


def test_export_database_of_a_packed_conv2d_compiles_with_tvm(tmp_path):
    from tune_gym.measure.result import MeasureResult
    from tune_gym.records import Record, export_database, load_database
    from tune_gym.tvm_support import ms, tvm

    space = KnobSpace.for_task(CONV, "compact")
    cfg = space.config(7)
    export_database([Record.create(space, cfg, MeasureResult(costs=(1e-5,), flops=CONV.flops), "test")], tmp_path)
    sch = ms().tir_integration.compile_tir(load_database(tmp_path), space.mod, space.target)
    tvm().ir.assert_structural_equal(sch.mod, space.apply(cfg)[0].mod)
    lib = tvm().compile(sch.mod, target=space.target)  # keeps the layout transform: takes given-layout weights
    rng = np.random.default_rng(0)
    x, w = (rng.uniform(-1, 1, s).astype("float32") for s in CONV.input_shapes)
    dev = tvm().cpu()
    args = [tvm().runtime.tensor(a, dev) for a in (x, w, np.zeros(CONV.output_shape(), np.float32))]
    lib["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), workers.reference_output(CONV.uri, [x, w]), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- migration script
def _migration():
    path = Path(__file__).resolve().parent.parent / "scripts" / "migrate_weights_given.py"
    spec = importlib.util.spec_from_file_location("migrate_weights_given", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_migration_marks_old_records_given(tmp_path):
    migrate = _migration()
    space = KnobSpace.for_task(DENSE.with_weights("given"), "compact")
    from tune_gym.measure.result import MeasureResult
    from tune_gym.records import Record

    def line(uri, t=1.0):
        rec = Record.create(space, space.config(3), MeasureResult(costs=(1e-5,), flops=DENSE.flops), "test")
        return json.dumps({**rec.to_json(), "task": uri, "time": t})

    old = "op://dense-v1/m32_n32_k32?target=llvm"
    kept = ["op://dense-v1/m32_n32_k32?target=cuda", "op://batch_matmul-v1/b1_m4_n4_k4?target=llvm",
            "op://dense-v1/m32_n32_k32?weights=given&target=llvm"]
    path = tmp_path / "records.jsonl"
    lines = [line(old), *(line(u) for u in kept), line(old, t=5.0), '{"schema": 1, "task": "op://de']
    path.write_text("\n".join(lines))
    before = path.read_text().splitlines()
    assert migrate.migrate_file(path, before=2.0) == 1
    after = path.read_text().splitlines()
    assert json.loads(after[0])["task"] == "op://dense-v1/m32_n32_k32?weights=given&target=llvm"
    assert after[1:] == before[1:]  # other tasks, explicit layouts, later records and torn lines untouched
    assert {**json.loads(after[0]), "task": old} == json.loads(before[0])
    assert migrate.migrate_file(path, before=2.0) == 0  # idempotent
    with pytest.warns(UserWarning, match="truncated"):
        assert load_records(path, task=DENSE.with_weights("given"))[0].config == space.config(3)
    assert migrate.main([str(path)]) == 0  # without --before: the later record too
    assert json.loads(path.read_text().splitlines()[4])["task"] == json.loads(after[0])["task"]


def test_kernel_mod_is_the_timed_kernel_without_the_layout_rewrite():
    """Packed tasks: the kernel module (what features see) has no preprocessing block."""
    from tune_gym.space import LAYOUT_REWRITE_PREPROC, KnobSpace

    space = KnobSpace.for_task(Task.make("dense", m=32, n=32, k=32), "compact")
    cfg = space.sample(np.random.default_rng(0), 1)[0]
    assert LAYOUT_REWRITE_PREPROC in space.apply(cfg)[0].mod.script()
    assert "= weight[" in space.apply(cfg)[0].mod.script()  # the rewrite copies the weight...
    assert "= weight[" not in space.kernel_mod(cfg).script()  # ...ahead of time, not in the kernel
    given = KnobSpace.for_task(Task.make("dense", m=32, n=32, k=32, weights="given"), "compact")
    assert given.kernel_mod(cfg).script() == given.apply(cfg)[0].mod.script()


@pytest.mark.heavy
def test_blocked_conv2d_computes_conv2d_nchw_with_given_weights():
    """conv2d_nchwc takes and returns conv2d_nchw's tensors; its blocked copies are inside the
    kernel, so with given (OIHW) weights every kernel matches PyTorch's conv2d too."""
    task = NCHWC.with_weights("given")
    assert task.input_shapes == CONV.input_shapes and task.output_shape() == CONV.output_shape()
    assert task.flops == CONV.flops
    space = KnobSpace.for_task(task, "compact")
    with LiveBackend(repeat=1, min_repeat_ms=1, check_all=True) as backend:
        results = backend.measure(task, space, space.sample_unique(np.random.default_rng(0), 2))
    assert all(r.ok and r.extra.get("checked") for r in results), [r.error_msg for r in results]


def test_blocked_conv2d_blocks_must_divide_the_channels():
    from tune_gym.errors import TaskError

    with pytest.raises(TaskError, match=r"'ib'=3 out of range; accepted: a divisor of 16 in \[1, 16\]: 1, 2, 4, 8, 16"):
        Task.make("conv2d_nchwc", c=16, h=14, w=14, k=16, r=3, p=1, ib=3, ob=8)
    with pytest.raises(TaskError, match=r"'ob'=32 out of range"):
        Task.make("conv2d_nchwc", c=16, h=14, w=14, k=16, r=3, p=1, ib=4, ob=32)
