from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tune_gym.errors import TaskError
from tune_gym.tasks import OPS, SUITES, TargetSpec, Task, get_suite, task_by_id


def _params(op: str):
    lows = {"p": 0, "op": 0}
    return st.fixed_dictionaries({p: st.integers(lows.get(p, 1), 512) for p in OPS[op].params})


@given(op=st.sampled_from(sorted(OPS)), data=st.data(), target=st.sampled_from(["llvm", "cuda"]),
       dtype=st.sampled_from(["float32", "float16"]))
@settings(max_examples=200, deadline=None)
def test_uri_round_trip(op, data, target, dtype):
    params = data.draw(_params(op))
    task = Task(op, tuple(params.items()), dtype, TargetSpec(target))
    again = Task.from_uri(task.uri)
    assert again == task
    assert again.uri == task.uri


def test_uri_is_stable():
    task = Task.make("conv2d_nchw", c=64, h=56, w=56, k=64, r=3, p=1)
    assert task.uri == "op://conv2d_nchw-v1/n1_c64_h56_w56_k64_r3_s1_p1_d1?target=llvm"
    assert Task.from_uri("op://conv2d_nchw-v1/c64_h56_w56_k64_r3_p1") == task  # defaults filled
    opts = Task.from_uri("op://dense-v1/m1_n2_k3?target=llvm&mcpu=skylake-avx512&cores=4")
    assert opts.target.resolved() == {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}
    assert Task.from_uri(opts.uri) == opts


@pytest.mark.parametrize("uri, message", [
    ("dense/m1", "malformed task URI"),
    ("op://nope-v1/m1?target=llvm", "unknown op 'nope'"),
    ("op://dense-v9/m1_n1_k1", "version v1, not v9"),
    ("op://dense-v1/m1_n1", "missing parameter 'k'"),
    ("op://dense-v1/m1_n1_k1_q3", "unknown parameter"),
    ("op://dense-v1/m0_n1_k1", "'m'=0 must be >= 1"),
    ("op://dense-v1/m1_n1_k1?target=rocm", "unknown target kind 'rocm'"),
    ("op://dense-v1/m1_n1_k1?target=llvm&arch=sm_80", "unknown option 'arch'"),
    ("op://dense-v1/m1_n1_k1?dtype=int3", "unknown dtype"),
])
def test_bad_uris_name_the_problem(uri, message):
    with pytest.raises(TaskError, match=message):
        Task.from_uri(uri)


def test_unknown_task_id_lists_suites():
    with pytest.raises(TaskError, match="resnet18"):
        Task.parse("resnet19:1")
    with pytest.raises(TaskError, match="tasks 0..11"):
        task_by_id("resnet18:99")


def test_suites_match_published_flop_counts():
    # Multiply-adds of one 224x224 forward pass (conv + fc layers), as usually reported.
    gmacs = {name: sum(t.weight * t.task.flops for t in SUITES[name].tasks) / 2e9 for name in SUITES}
    assert gmacs["resnet18"] == pytest.approx(1.81, rel=0.02)
    assert gmacs["vgg16"] == pytest.approx(15.47, rel=0.02)
    assert gmacs["alexnet"] == pytest.approx(0.71, rel=0.02)
    assert gmacs["mobilenet_v2"] == pytest.approx(0.30, rel=0.03)
    assert gmacs["squeezenet1.0"] == pytest.approx(0.82, rel=0.03)
    assert sum(t.weight for t in SUITES["resnet18"].tasks) == 21  # 20 convs + fc
    assert sum(t.weight for t in SUITES["bert_base"].tasks) == 12 * 8 + 1


def test_cuda_suite_variant():
    suite = get_suite("resnet18", "cuda")
    assert all(t.task.target.kind == "cuda" for t in suite.tasks)
    assert Task.parse("resnet18:1@cuda") == suite[1].task


def test_ir_module_and_flops(dense_task):
    mod = dense_task.ir_module()
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]
    assert dense_task.flops == 2 * 32 * 32 * 32
    assert dense_task.output_shape() == (32, 32)


def test_host_target_is_detected():
    spec = TargetSpec("llvm").resolved()
    assert spec["mcpu"] not in ("", "native", "generic")
    assert spec["num-cores"] >= 1
