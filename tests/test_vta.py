"""The simulated VTA target: hardware, task ids, knob spaces, exact validity, latency model, backend.

Hand-computed cases use DeepBench layer 42 (56x56 input, 3x3 kernel, padding 1, 64 -> 64
channels, batch 1): 4 input and 4 output channel blocks of 16 on the default 1x16x16 core.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from agents.base import make_agent, run
from tune_gym.cli import main
from tune_gym.errors import SpaceError, TaskError
from tune_gym.measure import make_backend
from tune_gym.space import KnobSpace
from tune_gym.tasks import SUITES, TargetSpec, Task, get_suite
from tune_gym.vta import LOOP_ORDERS, VTAHardware, VTAPlan, VTASpace, VTATiming
from tune_gym.vta.model import VTAConv, estimate, violations
from tune_gym.vta.workloads import DEEPBENCH


@pytest.fixture(scope="module")
def l42() -> VTASpace:
    return KnobSpace.for_task(Task.parse("deepbench:42"))


def _cfg(space: VTASpace, b=1, h=1, w=1, ci=1, co=1, ht=1, ot=1, order=0):
    """The config of the given inner tiles (split choices are (outer, inner) pairs)."""
    c = space.conv
    return space.from_dict({
        "tile_b": (c.nb // b, b), "tile_h": (c.oh // h, h), "tile_w": (c.ow // w, w), "tile_ci": (c.nci // ci, ci),
        "tile_co": (c.nco // co, co), "h_threading": ht, "oc_threading": ot,
        **({"loop_order": order} if space.preset == "full" else {}),
    })


# ---------------------------------------------------------------------------- hardware and tasks
def test_hardware_defaults_are_vtas_published_configuration():
    hw = VTAHardware()
    assert hw == VTAHardware.from_target(TargetSpec("vta")) == VTAHardware.from_target("vta")
    assert hw.gemm_shape == (1, 16, 16) and hw.macs_per_cycle == 256
    assert (hw.inp_buff_bytes, hw.wgt_buff_bytes, hw.acc_buff_bytes, hw.uop_buff_bytes) == (
        32 * 1024, 256 * 1024, 128 * 1024, 32 * 1024)
    assert (hw.inp_elem_bytes, hw.wgt_elem_bytes, hw.acc_elem_bytes, hw.out_elem_bytes) == (16, 256, 64, 16)
    assert (hw.inp_depth, hw.wgt_depth, hw.acc_depth, hw.uop_depth) == (2048, 1024, 2048, 8192)
    big = VTAHardware.from_target("vta&log_block=5&log_acc_buff_size=18")
    assert big.gemm_shape == (1, 32, 32) and big.acc_buff_bytes == 256 * 1024
    assert big.to_target() == TargetSpec("vta", (("log_block", "5"), ("log_acc_buff_size", "18")))
    assert hw.to_target() == TargetSpec("vta") and "1x16x16 int8 GEMM" in hw.describe()
    with pytest.raises(TaskError, match=r"'log_block'='9' out of range; accepted: an integer in \[1, 6\]"):
        TargetSpec("vta", (("log_block", "9"),))
    with pytest.raises(TaskError, match="weight buffer of 256 B .* holds no 4096 B tensor element"):
        Task.parse("op://vta_conv2d-v1/c64_h8_w8_k64_kh3_kw3?dtype=int8&target=vta&log_block=6&log_wgt_buff_size=8")


def test_vta_tasks_are_addressable_and_checked(capsys):
    task = Task.parse("deepbench:3")
    assert task.op == "vta_conv2d" and task.dtype == "int8" and task.target.kind == "vta"
    assert task.uri == "op://vta_conv2d-v1/n1_c32_h79_w341_k32_kh10_kw5_sh2_sw2_ph0_pw0?dtype=int8&target=vta"
    assert Task.from_uri(task.uri) == task and task.output_shape() == (1, 32, 35, 169)
    assert Task.parse("deepbench:3@vta&log_block=5").target.option_dict == {"log_block": "5"}
    resnet = Task.parse("resnet18_vta:1")  # resnet18:1's layer on VTA
    q, r = resnet.param_dict, Task.parse("resnet18:1").param_dict
    assert (q["c"], q["h"], q["k"], q["kh"], q["sh"], q["ph"]) == (r["c"], r["h"], r["k"], r["r"], r["s"], r["p"])
    assert get_suite("deepbench").task_ids == tuple(layer.id for layer in DEEPBENCH)
    assert get_suite("resnet18_vta").task_ids == tuple(range(1, 11))  # all convs but the first (3 channels)
    assert sum(st.weight for st in get_suite("resnet18_vta").tasks) == 19
    assert "deepbench" not in SUITES  # SUITES stays the CPU / GPU network suites
    assert isinstance(KnobSpace.for_task(task), VTASpace)
    for text, message in [
        ("deepbench:4", "suite deepbench has tasks 3, 5, 8, 17"),
        ("deepbench:3@llvm", "suite deepbench runs on target vta only"),
        ("op://dense-v1/m1_n1_k1?target=vta", "op dense does not run on target vta"),
        ("op://vta_conv2d-v1/c32_h8_w8_k32_kh3_kw3?target=vta", "takes dtype int8, not 'float32'"),
        ("op://vta_conv2d-v1/c32_h8_w8_k32_kh3_kw3?dtype=int8&target=llvm", "does not run on target llvm"),
        ("op://vta_conv2d-v1/c3_h8_w8_k32_kh3_kw3?dtype=int8&target=vta", "'c'=3 is not a multiple of .* = 16"),
        ("op://vta_conv2d-v1/c32_h8_w8_k32_kh3_kw3_ph16?dtype=int8&target=vta", r"'ph'=16 out of range; .*\[0, 15\]"),
        ("op://dense-v1/m1_n1_k1?dtype=int8", "unknown dtype 'int8'; known: float32"),  # unchanged for other ops
    ]:
        with pytest.raises(TaskError, match=message):
            Task.parse(text)
    with pytest.raises(TaskError, match="vta is simulated"):
        TargetSpec("vta").tvm_target()
    assert main(["tasks", "--suite", "deepbench"]) == 0
    out = capsys.readouterr().out
    assert "deepbench:107" in out and "deepbench:3 " in out and "op://vta_conv2d-v1/" in out


# ---------------------------------------------------------------------------- spaces
def test_space_sizes_match_the_papers_table():
    sizes = {layer.id: KnobSpace.for_task(Task.parse(f"deepbench:{layer.id}")).size for layer in DEEPBENCH}
    off = {i: DEEPBENCH[k].paper_size - sizes[i] for k, i in enumerate(sizes) if DEEPBENCH[k].paper_size != sizes[i]}
    # The paper's 18433, 6145, 15361 and 7169 are each one more than the knob product (which is
    # a multiple of 16 here: 2 x 2 thread choices x 4 loop orders); every other size is exact.
    assert off == {53: 1, 59: 1, 78: 1, 106: 1}
    assert sizes[3] == 768 and sizes[92] == 28800


def test_knobs_enumeration_and_presets(l42):
    assert l42.names == ["tile_b", "tile_h", "tile_w", "tile_ci", "tile_co", "h_threading", "oc_threading",
                         "loop_order"]
    assert [len(k) for k in l42.knobs] == [1, 8, 8, 3, 3, 2, 2, 4] and l42.size == 9216
    assert l42.knobs[1].choices[:3] == ((1, 56), (2, 28), (4, 14))  # (outer, inner), inner = the tile
    small = KnobSpace.for_task(Task.parse("deepbench:3"))
    every = list(small)
    assert len(every) == len(set(every)) == small.size == 768
    assert [small.index(c) for c in every[:50]] == list(range(50))
    compact = KnobSpace.for_task(l42.task, "compact")
    assert compact.size * 4 == l42.size and "loop_order" not in compact.names
    cfg = _cfg(l42, h=8, w=56, co=2)
    assert l42.plan(cfg) == VTAPlan(b=1, h=8, w=56, ci=1, co=2)
    assert l42.neighbours(cfg) and all(sum(a != b for a, b in zip(n, cfg)) == 1 for n in l42.neighbours(cfg))
    with pytest.raises(SpaceError, match=r"knob 'loop_order': index 4 out of range \[0, 3\]"):
        l42.check((*cfg[:-1], 4))
    with pytest.raises(SpaceError, match="vta target is simulated"):
        l42.trace(cfg)


# ---------------------------------------------------------------------------- validity
def test_validity_matches_hand_computed_buffer_checks(l42):
    # 28 x 56 output tile, 1 channel block each way: window 30 x 58 rows x columns of 16 B.
    ok = _cfg(l42, h=28, w=56)
    assert l42.violation(ok) is None and l42.is_valid(ok)
    assert 1 * 30 * 58 * 16 == 27840 <= 32768 and 1 * 28 * 56 * 64 == 100352 <= 131072  # input, accumulator
    # The same tile under 2 virtual threads: each thread has its own input buffer copy.
    doubled = _cfg(l42, h=28, w=56, ot=2)
    bad = l42.violation(doubled)
    assert (bad.rule, bad.needed, bad.available) == ("inp_buffer", 2 * 27840, 32768)
    assert "input buffer overflow" in bad.message and "needs 55680 B" in bad.message and "holds 32768 B" in bad.message
    assert "2 virtual threads" in bad.message and "simulated" in bad.message
    # With both threadings (4 copies) the accumulator overflows too: every violation is listed.
    both = [(v.rule, v.needed) for v in l42.violations(_cfg(l42, h=28, w=56, ht=2, ot=2))]
    assert both == [("inp_buffer", 4 * 27840), ("acc_buffer", 4 * 100352)]
    # An 8 x 56 tile with 2 output-channel blocks fits twice: 2 x 2 x 8 x 56 x 64 B = 114688 B.
    assert l42.is_valid(_cfg(l42, h=8, w=56, co=2, ot=2))
    assert l42.violation(_cfg(l42, h=8, w=56, co=4, ot=1)) is None  # 4 x 8 x 56 x 64 = 114688 B, one copy
    # Other rules: an odd number of row tiles cannot be split over 2 threads; a padded load
    # must be rows x columns; the kernel window innermost accumulates into one entry every op.
    assert l42.violation(_cfg(l42, h=8, w=56, ht=2)).rule == "threads"  # 56 / 8 = 7 row tiles
    assert l42.violation(_cfg(l42, h=8, w=56, ci=2)).rule == "inp_dma"
    hazard = l42.violation(_cfg(l42, h=8, w=56, order=3))
    assert hazard.rule == "acc_hazard" and "every 1 ops" in hazard.message
    for cfg in l42.sample(np.random.default_rng(0), 300):  # is_valid agrees with the rules
        assert l42.is_valid(cfg) == (not violations(l42.conv, l42.plan(cfg)))


def test_dma_and_padding_rules_on_other_layers():
    unpadded = KnobSpace.for_task(Task.parse("deepbench:76"))  # 112 x 112, 1x1 kernel, 4 channel blocks
    assert unpadded.violation(_cfg(unpadded, h=4, w=8, ci=2)).rule == "inp_dma"  # 3 strided dims
    assert unpadded.violation(_cfg(unpadded, h=4, w=112, ci=2)) is None  # full rows fold: 2 dims
    assert unpadded.violation(_cfg(unpadded, h=4, w=8, co=2)).rule == "out_dma"
    pad3 = KnobSpace.for_task(Task.parse("deepbench:59"))  # 7x7 input, 1x1 kernel, stride 2, padding 3
    bad = pad3.violation(_cfg(pad3, h=1, w=7))
    assert bad.rule in ("inp_dma", "padding")  # a one-row window: not rows x columns, and all padding
    assert pad3.violation(_cfg(pad3, h=7, w=7)) is None


# ---------------------------------------------------------------------------- latency model
def test_latency_is_positive_monotone_in_dram_cost_and_extrapolates_exactly(l42):
    rng = np.random.default_rng(1)
    valid = [c for c in l42.sample(rng, 400) if l42.is_valid(c)][:12]
    assert len(valid) >= 8
    slow = VTATiming(dram_bytes_per_cycle=4.0)
    for cfg in valid:
        est = l42.estimate(cfg)
        assert est.cycles > 0 and est.seconds == pytest.approx(est.cycles / 100e6)
        assert est.cycles >= max(est.busy.values()) and est.gemm_ops <= est.cycles
        assert l42.estimate(cfg, slow).cycles >= est.cycles  # same bytes, less bandwidth: not faster
        assert l42.estimate(cfg, VTATiming(dma_setup=300)).cycles >= est.cycles
        assert l42.estimate(cfg, VTATiming(sim_steps=10**9)).cycles == pytest.approx(est.cycles, rel=1e-12)
    # More DRAM bytes for the same work: a stride-2 conv on a 111 x 111 input has the same
    # 56 x 56 output and GEMM ops as a stride-1 conv on 56 x 56, but loads larger windows.
    small = VTAConv(n=1, c=64, h=56, w=56, k=64, kh=1, kw=1, sh=1, sw=1, ph=0, pw=0)
    large = VTAConv(n=1, c=64, h=111, w=111, k=64, kh=1, kw=1, sh=2, sw=2, ph=0, pw=0)
    for plan in (VTAPlan(b=1, h=4, w=56, ci=1, co=4), VTAPlan(b=1, h=4, w=56, ci=1, co=2, oc_threads=2)):
        assert not violations(small, plan) and not violations(large, plan)
        a, b = estimate(small, plan), estimate(large, plan)
        assert a.gemm_ops == b.gemm_ops == small.ops // 2 // 256  # every GEMM op counted once
        assert b.dram_bytes["inp"] > a.dram_bytes["inp"] and b.dram_bytes["wgt"] == a.dram_bytes["wgt"]
        assert b.cycles >= a.cycles


def test_virtual_threads_overlap_loads_and_gemms(l42):
    conv = l42.conv
    one, two = VTAPlan(b=1, h=8, w=56, ci=1, co=1), VTAPlan(b=1, h=8, w=56, ci=1, co=1, oc_threads=2)
    assert not violations(conv, one) and not violations(conv, two)
    e1, e2 = estimate(conv, one), estimate(conv, two)
    assert e1.busy == e2.busy and e1.gemm_ops == e2.gemm_ops  # the same instructions
    # One thread: every load waits for the GEMM before it, so loads and GEMMs add up.
    assert e1.cycles >= e1.busy["load"] + e1.busy["gemm"]
    # Two threads: one thread's loads run during the other's GEMMs.
    assert max(e2.busy.values()) <= e2.cycles < 0.85 * e1.cycles


# ---------------------------------------------------------------------------- backend and agents
def test_backend_answers_valid_and_invalid_configs(l42):
    backend = make_backend("vta-sim")
    configs = [_cfg(l42, h=28, w=56), _cfg(l42, h=28, w=56, ot=2), _cfg(l42, h=8, w=56, co=2, ot=2)]
    ok, bad, ok2 = backend.measure(l42.task, l42, configs)
    assert ok.ok and ok.mean > 0 and ok.gflops > 0 and ok.extra["simulated"] and ok.flops == l42.task.flops
    assert ok.run_secs == ok.mean and ok2.ok
    assert bad.error == "invalid" and bad.extra["rule"] == "inp_buffer"
    assert "input buffer overflow" in bad.error_msg and "needs 55680 B" in bad.error_msg and "32768 B" in bad.error_msg
    ref = backend.reference(l42.task)
    assert ref.gflops == pytest.approx(51.2) and "simulated" in ref.method
    assert ok.gflops <= ref.gflops
    assert make_backend("vta-sim", dram_bytes_per_cycle=4).measure(l42.task, l42, configs[:1])[0].mean >= ok.mean
    with pytest.raises(ValueError, match="vta-sim backend options are"):
        make_backend("vta-sim", bandwidth=3)
    with pytest.raises(ValueError, match="measures tasks on target vta"):
        backend.measure(Task.make("dense", m=8, n=8, k=8), l42, configs)


def _tune(agent_id: str, **options):
    env = gym.make("tune_gym/Tune-v0", task="deepbench:3", backend="vta-sim", observation="knobs", batch_size=8,
                   budget=32)
    agent = make_agent(agent_id, **options)
    result = run(agent, env, seed=3)
    env.close()
    return agent, result


def test_random_and_presample_agents_tune_a_vta_task():
    with pytest.raises(ValueError, match="use observation='knobs'"):  # no TVM trace to encode
        gym.make("tune_gym/Tune-v0", task="deepbench:3", backend="vta-sim", observation="sequence")
    env = gym.make("tune_gym/Tune-v0", task="deepbench:3", backend="vta-sim")  # the kind's default: knobs
    assert env.unwrapped.observation == "knobs"
    env.close()
    _, rnd = _tune("random")
    assert len(rnd.trials) == 32 and rnd.best is not None and rnd.best.result.extra["simulated"]
    agent, pre = _tune("presample", presample_limit=120, n_parallel=16, n_valid=8, n_init=16, plan_size=8,
                       sa_points=16, sa_steps=10, num_rounds=10)
    assert agent.n_presampled == 120 and agent.n_valid_found >= 8
    assert len(pre.trials) == 32 and pre.best is not None
    first = {t.config: t.result for t in pre.trials[:16]}
    valid_first = [c for c in agent.initial_batch if c in agent.known_valid]
    assert len(valid_first) == 8 and all(first[c].ok for c in valid_first)  # exact validity: they all ran
    assert sum(t.ok for t in pre.trials) > sum(t.ok for t in rnd.trials)  # ~5% of deepbench:3 is valid
    _, again = _tune("presample", presample_limit=120, n_parallel=16, n_valid=8, n_init=16, plan_size=8,
                     sa_points=16, sa_steps=10, num_rounds=10)
    assert [t.config for t in again.trials] == [t.config for t in pre.trials]  # deterministic


def test_loop_orders_are_the_templates_and_three_permutations():
    assert LOOP_ORDERS[0] == ("ci", "w", "kw", "kh", "co", "h")  # reorder(.., x_j, d_j, d_i, x_co, x_i)
    assert len(set(LOOP_ORDERS)) == 4 and all(sorted(o) == sorted(LOOP_ORDERS[0]) for o in LOOP_ORDERS)
    conv = VTAConv.from_task(Task.parse("deepbench:42"))
    assert conv.oh == conv.ow == 56 and conv.nci == conv.nco == 4
