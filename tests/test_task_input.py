"""Task input is refused at the door: URIs, ``Task.make``, ``Task(...)`` and target options.

Property tests over the URI grammar: valid tasks round-trip through their URI; mutated or
random input either parses to a task that builds its TE tensors, or raises ``TaskError``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tune_gym.errors import TaskError
from tune_gym.tasks import OPS, TargetSpec, Task
from tune_gym.tasks.ops import MAX_DIM, MAX_ELEMENTS, MAX_FLOPS
from tune_gym.tasks.task import DTYPES, WEIGHT_LAYOUTS, default_weights

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------- strategies
@st.composite
def valid_params(draw: st.DrawFn, op: str) -> dict[str, int]:
    """Parameters of ``op`` that satisfy its shape rules (built constructively, no filtering)."""
    small = st.integers(1, 48)
    if op in ("dense", "batch_matmul"):
        q = {"m": draw(st.integers(1, 512)), "n": draw(st.integers(1, 512)), "k": draw(st.integers(1, 512))}
        if op == "batch_matmul":
            q["b"] = draw(st.integers(1, 16))
        return q
    n, c, k = draw(st.integers(1, 2)), draw(small), draw(small)
    r, s = draw(st.integers(1, 7)), draw(st.integers(1, 4))
    if op == "conv2d_transpose_nchw":
        h, w = draw(small), draw(small)
        op_ = draw(st.integers(0, s - 1))
        p = draw(st.integers(0, min(r - 1, ((min(h, w) - 1) * s + r + op_ - 1) // 2)))
        return {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s, "p": p, "op": op_}
    d = draw(st.integers(1, 3)) if op in ("conv2d_nchw", "conv2d_nchwc") else 1
    e = d * (r - 1) + 1
    p = draw(st.integers(0, e - 1))
    size = st.integers(max(1, e - 2 * p), max(1, e - 2 * p) + 40)
    if op == "conv1d_ncw":
        return {"n": n, "c": c, "w": draw(size), "k": k, "r": r, "s": s, "p": p}
    q = {"n": n, "c": c, "h": draw(size), "w": draw(size), "r": r, "s": s, "p": p}
    if op == "conv2d_nchw":
        return {**q, "k": k, "d": d}
    if op == "conv2d_nchwc":  # channel blocks divide the channels
        ib = draw(st.sampled_from([x for x in range(1, c + 1) if c % x == 0]))
        ob = draw(st.sampled_from([x for x in range(1, k + 1) if k % x == 0]))
        return {**q, "k": k, "d": d, "ib": ib, "ob": ob}
    return {**q, "m": draw(st.integers(1, 4))}


targets = st.one_of(
    st.builds(TargetSpec, st.just("llvm"), st.lists(st.one_of(
        st.tuples(st.just("cores"), st.integers(1, 1024).map(str)),
        st.tuples(st.just("mcpu"), st.sampled_from(["skylake-avx512", "znver3", "generic", "cortex-a72"])),
    ), max_size=2, unique_by=lambda kv: kv[0]).map(tuple)),
    st.builds(TargetSpec, st.just("cuda"), st.lists(st.one_of(
        st.tuples(st.just("arch"), st.sampled_from(["sm_35", "sm_75", "sm_80", "sm_90a", "sm_120"])),
        st.tuples(st.just("max_threads_per_block"), st.integers(1, 4096).map(str)),
        st.tuples(st.just("max_shared_memory_per_block"), st.integers(1, 2**20).map(str)),
    ), max_size=3, unique_by=lambda kv: kv[0]).map(tuple)),
)


def packable(op: str, target: TargetSpec) -> bool:
    return target.kind == "llvm" and bool(OPS[op].weights) and not OPS[op].no_packing


@st.composite
def valid_tasks(draw: st.DrawFn) -> Task:
    op = draw(st.sampled_from(sorted(OPS)))
    params = draw(valid_params(op))
    target = draw(targets)
    weights = draw(st.sampled_from(["", *WEIGHT_LAYOUTS] if packable(op, target) else ["", "given"]))
    return Task(op, tuple(params.items()), draw(st.sampled_from(DTYPES)), target, weights)


def assert_sound(task: Task) -> None:
    """A task that exists round-trips and builds TE tensors of the shapes it states."""
    assert Task.from_uri(task.uri) == task
    assert str(Task.parse(task.uri)) == task.uri
    assert task.weights in WEIGHT_LAYOUTS
    assert ("weights=" in task.uri) == (task.weights != default_weights(task.op, task.target))
    assert task.weights == "given" or packable(task.op, task.target)
    assert all(1 <= v <= MAX_DIM or (v == 0 and k in ("p", "op")) for k, v in task.params)
    shapes = [*task.input_shapes, task.output_shape()]
    assert sum(math.prod(s) for s in shapes) <= MAX_ELEMENTS and 0 < task.flops <= MAX_FLOPS
    tensors = task.opdef.build(task.param_dict, task.dtype)  # what Task.tensors() returns, minus MetaSchedule
    assert [tuple(int(x) for x in t.shape) for t in tensors] == shapes
    assert all(str(t.dtype) == task.dtype for t in tensors)


def parse_or_refuse(text: Any) -> Task | None:
    """``Task.parse(text)``: a sound task, or None for a TaskError; anything else fails."""
    try:
        task = Task.parse(text)
    except TaskError as err:
        assert str(err)
        return None
    assert_sound(task)
    return task


# ---------------------------------------------------------------------------- valid tasks
@given(task=valid_tasks())
@FAST
def test_valid_tasks_round_trip_and_build(task):
    again = Task.from_uri(task.uri)
    assert again == task and str(again) == str(task) == task.uri
    assert TargetSpec.from_str(str(task.target)) == task.target
    assert Task.make(task.op, target=str(task.target), dtype=task.dtype, weights=task.weights,
                     **task.param_dict) == task
    assert task.with_weights(task.weights) == task and task.with_target(task.target) == task
    assert_sound(task)


@given(task=valid_tasks(), data=st.data())
@FAST
def test_weights_field_round_trips_in_any_query_order(task, data):
    head, _, query = task.uri.partition("?")
    fields = query.split("&")
    explicit = [f"weights={task.weights}"] if "weights=" not in query else []
    first = [f for f in fields if not f.startswith("target=") and f.split("=")[0] in ("dtype", "weights")]
    target = [f for f in fields if f not in first]  # target= and its options, in order
    shuffled = data.draw(st.permutations([*first, *explicit]))
    again = Task.from_uri(f"{head}?{'&'.join([*shuffled, *target])}")
    assert again == task and again.uri == task.uri


def test_weights_default_is_packed_on_llvm_and_omitted():
    dense = Task.make("dense", m=32, n=32, k=32)
    assert dense.weights == "packed" and dense.packed and dense.uri == "op://dense-v1/m32_n32_k32?target=llvm"
    given = dense.with_weights("given")
    assert given.uri == "op://dense-v1/m32_n32_k32?weights=given&target=llvm" and given != dense
    assert Task.from_uri("op://dense-v1/m32_n32_k32?target=llvm&weights=given") == given
    assert Task.from_uri("op://dense-v1/m32_n32_k32?weights=packed") == dense
    assert Task.make("dense", m=32, n=32, k=32, weights="given") == given
    assert dense.with_weights("") == dense and given.with_weights("") == dense
    # cuda, ops without weights and conv2d_transpose: given is the default and the only value.
    assert dense.with_target("cuda").weights == "given" and dense.with_target("cuda").uri.endswith("?target=cuda")
    assert dense.with_target("cuda").with_target("llvm") == dense  # the default follows the target
    assert given.with_target("cuda&arch=sm_80") == dense.with_target("cuda&arch=sm_80")
    # A task is what its URI says: given is cuda's default, so it is not kept back on llvm.
    assert given.with_target("cuda").with_target("llvm") == dense
    assert given.with_target("llvm&cores=2").weights == "given"  # an explicit layout is kept
    assert Task.parse("resnet18:1@cuda").weights == "given" and Task.parse("resnet18:1").weights == "packed"
    assert Task.make("batch_matmul", b=2, m=4, n=4, k=4).weights == "given"
    assert Task.make("conv2d_transpose_nchw", c=8, h=4, w=4, k=8, r=4, s=2, p=1).weights == "given"
    # The task's module marks exactly the op's weights layout-free when packed, nothing when given.
    assert [int(i) for i in dense.ir_module()["main"].attrs["layout_free_buffers"]] == [1]
    assert "layout_free_buffers" not in given.ir_module()["main"].attrs
    conv = Task.make("conv2d_nchw", c=16, h=14, w=14, k=16, r=3, p=1)  # topi does not mark conv2d's weight
    assert [int(i) for i in conv.ir_module()["main"].attrs["layout_free_buffers"]] == [1]
    bmm = Task.make("batch_matmul", b=2, m=4, n=4, k=4)  # topi marks B, an activation in attention
    assert "layout_free_buffers" not in bmm.ir_module()["main"].attrs


def test_parameters_in_any_order_and_defaults_give_the_canonical_form():
    task = Task.from_uri("op://conv2d_nchw-v1/p1_r3_k64_w56_h56_c64?target=llvm")
    assert task.uri == "op://conv2d_nchw-v1/n1_c64_h56_w56_k64_r3_s1_p1_d1?target=llvm"
    assert Task.from_uri("op://dense-v1/m1_n1_k1?target=llvm&cores=04").uri.endswith("&cores=4")
    assert Task("dense", {"m": 1, "n": 2, "k": 3}) == Task.make("dense", m=1, n=2, k=3)


def test_limits_are_reachable():
    assert Task.make("dense", m=1, n=1, k=MAX_DIM).param_dict["k"] == MAX_DIM
    Task.make("conv2d_transpose_nchw", c=8, h=4, w=4, k=8, r=4, s=2, p=1, op=1)  # `op` as a keyword
    Task.make("conv2d_nchw", c=1, h=1, w=1, k=1, r=3, p=1)  # the kernel fits the padded input


# ---------------------------------------------------------------------------- refusals name the problem
@pytest.mark.parametrize("uri, message", [
    ("op://dense-v1/m1_n1_k1_m2", "'m' given twice"),
    ("op://dense-v1/m1_n1_k1_zz4", r"unknown parameter\(s\) 'zz'"),
    ("op://dense-v1/m65537_n1_k1", r"'m'=65537 out of range; accepted: \[1, 65536\]"),
    ("op://dense-v1/m1_n1_k123456789012345", r"'k'=123456789012\.\.\. out of range; accepted: at most 65536"),
    ("op://dense-v1/m16384_n16384_k16384", r"hold \d+ elements; accepted: at most MAX_ELEMENTS = 2\*\*28"),
    ("op://dense-v1/m9000_n9000_k9000", r"costs .* FLOPs; accepted: at most MAX_FLOPS = 2\*\*40"),
    ("op://conv2d_nchw-v1/c3_h2_w8_k4_r5", r"'h'=2 out of range; accepted: \[5, 65536\] \(the kernel extent"),
    ("op://conv2d_nchw-v1/c3_h8_w8_k4_r3_d4", r"'h'=8 out of range; accepted: \[9, 65536\]"),
    ("op://conv2d_nchw-v1/c3_h8_w8_k4_r3_p3", r"'p'=3 out of range; accepted: \[0, 2\]"),
    ("op://conv2d_nchw-v1/c3_h8_w8_k4_r3_s0", r"'s'=0 out of range; accepted: \[1, 65536\]"),
    ("op://conv2d_nchw-v1/c3_h8_w8_k4_r3_d0", r"'d'=0 out of range; accepted: \[1, 65536\]"),
    ("op://conv2d_nchw-v1/c1_h65536_w8_k1_r3_p2", r"'h'=65536 out of range; accepted: \[1, 65534\]"),
    ("op://conv1d_ncw-v1/c3_w2_k4_r4", r"'w'=2 out of range; accepted: \[4, 65536\]"),
    ("op://depthwise_conv2d_nchw-v1/c4096_h8_w8_m32_r3", r"'m'=32 out of range; accepted: \[1, 16\]"),
    ("op://depthwise_conv2d_nchw-v1/c4_h8_w8_r3_p4", r"'p'=4 out of range; accepted: \[0, 2\]"),
    ("op://conv2d_transpose_nchw-v1/c4_h8_w8_k4_r3_s2_op2", r"'op'=2 out of range; accepted: \[0, 1\]"),
    ("op://conv2d_transpose_nchw-v1/c4_h8_w8_k4_r3_p3", r"'p'=3 out of range; accepted: \[0, 2\]"),
    ("op://conv2d_transpose_nchw-v1/c4_h1_w8_k4_r3_p2", r"'p'=2 out of range; accepted: \[0, 1\] \(the output size"),
    ("op://conv2d_transpose_nchw-v1/c1_h40000_w1_k1_r3_s2", r"'h'=40000 out of range; accepted: \[1, 32767\]"),
    ("op://dense-v1/m1_n1_k1?dtype=int8", "unknown dtype 'int8'; known: float32"),
    ("op://dense-v1/m1_n1_k1?target=llvm&target=cuda", "'target' given twice"),
    ("op://dense-v1/m1_n1_k1?target=llvm&cores=0", r"'cores'='0' out of range; accepted: an integer in \[1, 1024\]"),
    ("op://dense-v1/m1_n1_k1?target=llvm&cores=1025", r"accepted: an integer in \[1, 1024\]"),
    ("op://dense-v1/m1_n1_k1?target=llvm&cores=-1", r"'cores'='-1' out of range"),
    ("op://dense-v1/m1_n1_k1?target=llvm&mcpu=pentium9000", "'mcpu'='pentium9000' is not a CPU name LLVM knows"),
    ("op://dense-v1/m1_n1_k1?target=llvm&mcpu=native", "leave mcpu out"),
    ("op://dense-v1/m1_n1_k1?target=cuda&arch=sm_99999", r"'arch'='sm_99999' is not a CUDA arch; accepted: sm_"),
    ("op://dense-v1/m1_n1_k1?target=cuda&arch=compute_80", "is not a CUDA arch"),
    ("op://dense-v1/m1_n1_k1?target=cuda&max_threads_per_block=0", r"accepted: an integer in \[1, 4096\]"),
    ("op://dense-v1/m1_n1_k1?target=cuda&max_shared_memory_per_block=99999999",
     r"accepted: an integer in \[1, 1048576\]"),
    ("op://dense-v1/m1_n1_k1?target=cuda&cores=4", "unknown option 'cores'; allowed: arch"),
    ("op://dense-v1/m1_n1_k1?target=llvm&", "malformed field ''"),
    ("op://dense-v1/m1_n1_k1?target=ll%76m", "malformed field 'target=ll%76m'"),
    ("op://dense-v1/m1_n1_k1?target=LLVM", "unknown target kind 'LLVM'"),
    ("op://dense-v1/m\u0661_n1_k1", "malformed task URI"),  # an Arabic-Indic digit
    ("op://dense-v123456789012/m1_n1_k1", r"version v1, not v123456789012"),
    ("op://dense-v1/m1_n1_k1?" + "x" * 5000, "at most 4096"),
    ("resnet18:\u00b2", "unknown task"),
    ("resnet18:1@rocm", "unknown target kind 'rocm'"),
    ("op://dense-v1/m1_n1_k1?weights=pack", r"unknown weights='pack'; accepted: packed, given"),
    ("op://dense-v1/m1_n1_k1?weights=PACKED&target=llvm", r"unknown weights='PACKED'; accepted: packed, given"),
    ("op://dense-v1/m1_n1_k1?weights=given&weights=packed", "'weights' given twice"),
    ("op://dense-v1/m1_n1_k1?weights=&target=llvm", "malformed field 'weights='"),
    ("op://dense-v1/m1_n1_k1?weights=packed&target=cuda",
     r"target cuda does not support weights='packed' .*; accepted there: given"),
    ("op://batch_matmul-v1/b1_m1_n1_k1?weights=packed", r"op batch_matmul has no weight inputs.*; accepted: given"),
    ("op://conv2d_transpose_nchw-v1/c4_h4_w4_k4_r3?weights=packed",
     r"op conv2d_transpose_nchw does not offer weights='packed' \(apache-tvm 0.27.*; accepted: given"),
    ("resnet18:1@llvm&weights=given", "unknown option 'weights'"),  # a task option, not a target option
])
def test_bad_input_names_the_parameter_and_range(uri, message):
    with pytest.raises(TaskError, match=message):
        Task.parse(uri)


@pytest.mark.parametrize("value", [None, 3, 2.5, b"op://dense-v1/m1_n1_k1", ["op://dense-v1/m1_n1_k1"], object()])
def test_non_strings_are_refused_naming_the_type(value):
    with pytest.raises(TaskError, match=f"got {type(value).__name__}"):
        Task.parse(value)
    with pytest.raises(TaskError, match=f"must be a str, got {type(value).__name__}"):
        Task.from_uri(value)


@pytest.mark.parametrize("call, message", [
    (lambda: Task.make("dense", m=True, n=1, k=1), "'m' must be an int, got bool"),
    (lambda: Task.make("dense", m=2.0, n=1, k=1), "'m' must be an int, got float"),
    (lambda: Task.make("dense", m=10**5000, n=1, k=1), r"'m'=<16610-bit integer> out of range"),
    (lambda: Task.make("dense", m=-1, n=1, k=1), r"'m'=-1 out of range; accepted: \[1, 65536\]"),
    (lambda: Task.make("dense", m=1, n=1, k=1, target="llvm&cores=0"), "'cores'='0' out of range"),
    (lambda: Task.make("dense", m=1, n=1, k=1, target=7), "a target must be a str"),
    (lambda: Task.make("nope", m=1), "unknown op 'nope'"),
    (lambda: Task(3, ()), "unknown op 3"),
    (lambda: Task("dense", (("m", 1), ("m", 2), ("n", 1), ("k", 1))), "'m' given twice"),
    (lambda: Task("dense", (("m", 1, 2),)), "must be \\(name, value\\) pairs"),
    (lambda: Task("dense", 5), "must be \\(name, value\\) pairs, got int"),
    (lambda: Task("dense", ((1, 1),)), "parameter names are str"),
    (lambda: Task("dense", (("m", 1), ("n", 1), ("k", 1)), "float32", "llvm"), "must be a TargetSpec, got str"),
    (lambda: Task("dense", (("m", 1), ("n", 1), ("k", 1)), None), "unknown dtype None"),
    (lambda: TargetSpec("llvm", (("cores", "1"), ("cores", "2"))), "'cores' given twice"),
    (lambda: TargetSpec("llvm", (("cores", 4.0),)), "'cores' must be a str, got float"),
    (lambda: TargetSpec(None), "unknown target kind None"),
    (lambda: Task.make("dense", m=1, n=1, k=1, weights=None), "unknown weights=None; accepted: packed, given"),
    (lambda: Task.make("dense", m=1, n=1, k=1, weights="Packed"), "unknown weights='Packed'"),
    (lambda: Task("dense", (("m", 1), ("n", 1), ("k", 1)), "float32", TargetSpec(), 1), "unknown weights=1"),
    (lambda: Task.make("dense", m=1, n=1, k=1, target="cuda", weights="packed"), "target cuda does not support"),
    (lambda: Task.make("dense", m=1, n=1, k=1, weights="given").with_target("cuda").with_weights("packed"),
     "target cuda does not support"),
])
def test_constructors_refuse_bad_values(call, message):
    with pytest.raises(TaskError, match=message):
        call()


def test_task_error_is_a_value_error():
    assert issubclass(TaskError, ValueError)


# ---------------------------------------------------------------------------- mutations
SEGMENT = st.one_of(
    st.from_regex(r"[a-z]{1,2}[0-9]{1,3}", fullmatch=True),
    st.builds(lambda p, v: f"{p}{v}", st.sampled_from(["m", "n", "k", "b", "c", "h", "w", "r", "s", "p", "d", "op"]),
              st.one_of(st.integers(0, 70000), st.integers(0, 10**30), st.sampled_from([0, 1, 65536, 65537]))),
)
FIELD = st.one_of(
    st.builds(lambda k, v: f"{k}={v}",
              st.sampled_from(["cores", "mcpu", "arch", "max_threads_per_block", "max_shared_memory_per_block",
                               "dtype", "target", "weights", "foo", ""]),
              st.one_of(st.integers(-5, 10**12).map(str), st.text("abcdefgmnpsuvxz_0123456789-.", max_size=12),
                        st.sampled_from(["llvm", "cuda", "float16", "int8", "znver3", "native", "sm_80", "sm_1",
                                         "sm_900", "1e3", "+4", "4_0", " 4", "packed", "given"]))),
    st.text(max_size=8),
)


@st.composite
def mutated_uris(draw: st.DrawFn) -> str:
    uri = draw(valid_tasks()).uri
    head, _, query = uri.partition("?")
    kind = draw(st.sampled_from(["param", "field", "insert", "delete", "replace_digits"]))
    if kind == "param":
        return f"{head}_{draw(SEGMENT)}?{query}"
    if kind == "field":
        return f"{head}?{query}&{draw(FIELD)}"
    i = draw(st.integers(0, len(uri)))
    if kind == "insert":
        return uri[:i] + draw(st.text(max_size=6)) + uri[i:]
    if kind == "delete":
        return uri[:i] + uri[i + draw(st.integers(1, 6)):]
    digits = draw(st.sampled_from(["0", "00", "65537", "99999999999", "1" * 40]))
    return head.rstrip("0123456789") + digits + "?" + query  # the last parameter's value


@given(uri=mutated_uris())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_uris_parse_soundly_or_raise_task_error(uri):
    parse_or_refuse(uri)


@given(text=st.one_of(st.text(max_size=40), st.text(max_size=40).map(lambda t: "op://" + t),
                      st.text(max_size=20).map(lambda t: "resnet18:" + t)))
@FAST
def test_random_text_raises_only_task_error(text):
    parse_or_refuse(text)


@given(value=st.one_of(st.none(), st.integers(), st.floats(), st.binary(max_size=8), st.booleans(),
                       st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers())))
@FAST
def test_non_string_input_raises_task_error(value):
    with pytest.raises(TaskError):
        Task.parse(value)
    with pytest.raises(TaskError):
        Task.from_uri(value)


ANY_VALUE = st.one_of(st.integers(-3, 80000), st.integers(), st.booleans(), st.floats(), st.none(),
                      st.text(max_size=3), st.sampled_from([0, 1, 2, 3, 65536, 65537]))


@given(op=st.sampled_from([*sorted(OPS), "nope"]), data=st.data(), dtype=st.sampled_from([*DTYPES, "int8", None]),
       weights=st.sampled_from(["", *WEIGHT_LAYOUTS, "pack", None, 1]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_make_with_arbitrary_values_is_sound_or_refused(op, data, dtype, weights):
    names = list(OPS[op].params) if op in OPS else ["m"]
    chosen = data.draw(st.lists(st.sampled_from([*names, "zz"]), unique=True, max_size=len(names) + 1))
    params = {name: data.draw(st.one_of(ANY_VALUE, st.integers(1, 16)), label=name) for name in chosen}
    options = data.draw(st.lists(st.tuples(st.sampled_from(["cores", "mcpu", "arch", "zz"]),
                                           st.one_of(st.text(max_size=6), st.integers(-2, 2000))), max_size=2))
    target = data.draw(st.sampled_from(["llvm", "cuda"]))
    try:
        task = Task.make(op, target=TargetSpec(target, tuple(options)), dtype=dtype, weights=weights, **params)
    except TaskError:
        return
    assert_sound(task)
