"""MetaTune's loop graph (tune_gym/features/graph.py) and the loop nest it reads (features/loops.py)."""

from __future__ import annotations

import json
import re
import sys
import types

import networkx as nx
import numpy as np
import pytest

from tune_gym.features import loops
from tune_gym.features.graph import (
    LOOP_FEATURES,
    NODE_TYPES,
    GraphTemplate,
    encode_graphs,
    loop_graph,
    loop_slots,
    template_for,
    to_pyg,
)
from tune_gym.features.loops import ANNOTATIONS
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task, get_suite

SUITES = ("resnet18", "mobilenet_v2", "bert_base", "dcgan")
_FOR = re.compile(r"^\s*for (.+?) in ", re.MULTILINE)


def tir_loop_names(space: KnobSpace, config: tuple[int, ...]) -> list[str]:
    """The loop variables of the config's kernel in program order, read from its TVMScript."""
    script = space.kernel_mod(config)["main"].script()
    return [name.strip() for names in _FOR.findall(script) for name in names.split(",")]


def configs_of(space: KnobSpace, n: int, seed: int = 0, valid: bool = True) -> list[tuple[int, ...]]:
    """The first config of every sketch, then ``n`` random ones (valid ones only if ``valid``)."""
    offsets = np.cumsum((0, *space.sketch_sizes[:-1]))
    out = [space.config(int(o)) for o in offsets]
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(100 * n):
        if found == n:
            break
        cfg = space.sample(rng, 1)[0]
        if not valid or space.is_valid(cfg):
            out.append(cfg)
            found += 1
    return out


@pytest.fixture(scope="module")
def conv_full():
    return KnobSpace.for_task(Task.parse("resnet18:1"), "full")


@pytest.fixture(scope="module")
def conv_template(conv_full):
    return template_for(conv_full.task)


@pytest.fixture(scope="module")
def cuda_space():
    return KnobSpace.for_task(Task.parse("resnet18:1@cuda"), "full")


# ---------------------------------------------------------------------- structure
def test_loop_graph_matches_the_kernel_loops(conv_full):
    for cfg in configs_of(conv_full, 3):
        names = tir_loop_names(conv_full, cfg)
        g = loop_graph(conv_full, cfg)
        n = len(names)
        assert g.graph["valid"] and g.number_of_nodes() == 1 + 2 * n
        fors = [v for v, d in g.nodes(data=True) if d["kind"] == "for"]
        intervals = [v for v, d in g.nodes(data=True) if d["kind"] == "interval"]
        assert [g.nodes[v]["name"] for v in fors] == names and len(intervals) == n
        kinds = nx.get_edge_attributes(g, "kind")
        assert sorted(v for (u, v), k in kinds.items() if k == "control" and u == 0) == fors
        assert all(list(g.successors(f)) == [f + n] and kinds[f, f + n] == "metadata" for f in fors)
        assert g.number_of_edges() == 2 * n and g.in_degree(0) == 0
        assert all(set(d) == {"kind", "extent", "annotation", "add", "mul", "div", "unroll", "access"}
                   for v, d in g.nodes(data=True) if d["kind"] == "interval")
        # nesting edges: one per loop that has an enclosing loop, from a loop one level up
        nested = loop_graph(conv_full, cfg, nesting=True)
        edges = [(u, v) for u, v, k in nested.edges(data="kind") if k == "nesting"]
        assert len(edges) == sum(g.nodes[f]["nest_level"] > 1 for f in fors)
        assert all(g.nodes[v]["nest_level"] == g.nodes[u]["nest_level"] + 1 for u, v in edges)


def test_interval_values_of_a_known_loop():
    dense = KnobSpace.for_task(Task.from_uri("op://dense-v1/m32_n32_k32?weights=given&target=llvm"), "compact")
    cfg = dense.config(7)  # sketch 0, tile_i0 (2, 16), tile_i1 (4, 8), unroll 512 (see tests/test_itervar.py)
    g = loop_graph(dense, cfg)
    fors = {d["name"]: v for v, d in g.nodes(data=True) if d["kind"] == "for"}
    n = len(fors)
    k, fused = g.nodes[fors["k"] + n], g.nodes[fors["i0_0_i1_0_fused"] + n]
    assert (k["extent"], k["annotation"], k["access"]["data_0"]) == (32, "serial", (1, 512, 8))
    assert (fused["extent"], fused["annotation"], fused["unroll"]) == (8, "parallel", 512)
    template = template_for(dense.task)
    enc = encode_graphs(template, dense, [cfg])
    row = enc["nodes"][0, 1 + len(template.loops) + template.loops.index(g.nodes[fors["k"]]["slot"])]
    names = template.feature_names
    assert row[names.index("type=interval")] == 1 and row[names.index(f"kind={ANNOTATIONS[9]}")] == 1
    assert row[names.index("extent")] == pytest.approx(np.log2(33))
    assert row[names.index("data_0.count")] == pytest.approx(np.log2(513))
    assert row[names.index("data_0.reuse")] == pytest.approx(np.log2(9))


def test_encoding_matches_the_graph(conv_full, conv_template):
    t = conv_template
    configs = configs_of(conv_full, 3)
    enc = encode_graphs(t, conv_full, configs)
    L = len(t.loops)
    assert enc["nodes"].shape == (len(configs), t.n_slots, t.feat_dim) == (len(configs), 1 + 2 * L, t.feat_dim)
    assert enc["adjacency"].shape == (len(configs), t.n_slots, t.n_slots) and enc["mask"].shape[1] == t.n_slots
    for b, cfg in enumerate(configs):
        g = loop_graph(conv_full, cfg)
        n = (g.number_of_nodes() - 1) // 2
        assert enc["dropped"][b] == 0 and enc["mask"][b].sum() == 1 + 2 * n
        adj, mask, nodes = enc["adjacency"][b], enc["mask"][b], enc["nodes"][b]
        assert adj[0].sum() == n and adj.sum() == 2 * n  # root -> every loop, loop -> its interval
        present = np.flatnonzero(mask[1:1 + L])
        np.testing.assert_array_equal(adj[1 + present, 1 + L + present], 1)
        slots = [g.nodes[v]["slot"] for v in range(1, 1 + n)]
        assert sorted(t.loops.index(s) for s in slots) == present.tolist()
        # root and for nodes carry only their type; every interval its extent and one loop kind
        types = nodes[:, :len(NODE_TYPES)]
        np.testing.assert_array_equal(types[mask > 0].sum(axis=1), 1)
        assert not nodes[:1 + L, len(NODE_TYPES):].any() and not nodes[mask == 0].any()
        kinds = nodes[1 + L + present, len(NODE_TYPES) + 1: len(NODE_TYPES) + 1 + len(ANNOTATIONS)]
        np.testing.assert_array_equal(kinds.sum(axis=1), 1)


def test_slots_name_loop_roles_across_fusion(conv_full):
    """The tiled outer loops belong to the reduction block whatever is fused or computed at them."""
    seen = set()
    for cfg in configs_of(conv_full, 8):
        slots = loop_slots(conv_full, cfg)
        assert len(slots) == len(set(slots)) == len(tir_loop_names(conv_full, cfg))
        assert "conv2d_nchw_update/nn_0" in slots and "conv2d_nchw_update/rc_1" in slots
        assert all(s.startswith("conv2d_nchw_init/") for s, n in zip(slots, tir_loop_names(conv_full, cfg))
                   if n.endswith("_init"))
        seen.update(n for n in tir_loop_names(conv_full, cfg) if n.startswith("nn_0"))
    assert len(seen) > 1  # the outer loop's name varies with the config (fusion), its slot does not


def test_nesting_template_adds_parent_edges(conv_full):
    cfg = configs_of(conv_full, 1)[-1]
    flat = GraphTemplate.probe([conv_full], n_configs=2)
    nested = GraphTemplate.from_dict({**flat.to_dict(), "nesting": True})
    a, b = encode_graphs(flat, conv_full, [cfg]), encode_graphs(nested, conv_full, [cfg])
    g = loop_graph(conv_full, cfg, nesting=True)
    n_nesting = sum(k == "nesting" for _, _, k in g.edges(data="kind"))
    assert b["adjacency"].sum() - a["adjacency"].sum() == n_nesting > 0
    np.testing.assert_array_equal(a["nodes"], b["nodes"])


# ---------------------------------------------------------------------- fixed shapes
def _check_shapes(space: KnobSpace, template: GraphTemplate, configs: list[tuple[int, ...]]) -> None:
    enc = encode_graphs(template, space, configs)
    b = len(configs)
    assert enc["nodes"].shape == (b, template.n_slots, template.feat_dim)
    assert enc["adjacency"].shape == (b, template.n_slots, template.n_slots)
    assert enc["mask"].shape == (b, template.n_slots)
    assert all(a.dtype == np.float32 for k, a in enc.items() if k != "dropped") and np.isfinite(enc["nodes"]).all()
    valid = enc["mask"][:, 0] == 1
    assert valid.any(), f"{space.task.uri} {space.preset}: no config scheduled"
    assert not enc["dropped"].any(), f"{space.task.uri} {space.preset}: loops without a slot"


def _suite_tasks(target: str = "llvm") -> list[Task]:
    return list({t.task.uri: t.task for s in SUITES for t in get_suite(s, target).tasks}.values())


def test_fixed_shapes_every_suite_task_compact():
    for task in _suite_tasks():
        space = KnobSpace.for_task(task, "compact")
        _check_shapes(space, template_for(task, presets=("compact",), n_configs=4), configs_of(space, 2))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_fixed_shapes_every_suite_task_full(target):
    for task in _suite_tasks(target):
        template = template_for(task)
        for preset in ("compact", "full"):
            space = KnobSpace.for_task(task, preset)
            _check_shapes(space, template, configs_of(space, 4))


def test_fixed_shapes_cuda(cuda_space):
    template = template_for(cuda_space.task, n_configs=2)
    assert template.target == "cuda" and any("threadIdx" in n or "blockIdx" in n for n in template.feature_names)
    for preset in ("compact", "full"):
        space = KnobSpace.for_task(cuda_space.task, preset)
        configs = configs_of(space, 2)
        _check_shapes(space, template, configs)
        bound = encode_graphs(template, space, configs[-1:])["nodes"][0]
        names = template.feature_names
        assert bound[:, names.index("kind=threadIdx.x")].sum() >= 1  # a loop bound to threads


# ---------------------------------------------------------------------- content
def test_different_configs_give_different_graphs(dense_space):
    configs = list(dense_space)
    enc = encode_graphs(template_for(dense_space.task), dense_space, configs)
    assert len({row.tobytes() for row in enc["nodes"]}) == len(configs)  # every program differs


def test_invalid_config_gives_a_zero_graph(cuda_space, monkeypatch):
    rng = np.random.default_rng(0)
    bad = next(c for c in cuda_space.sample(rng, 200) if not cuda_space.is_valid(c))  # ~90% are invalid
    template = template_for(cuda_space.task, n_configs=2)
    enc = encode_graphs(template, cuda_space, [bad])
    assert not enc["nodes"].any() and not enc["adjacency"].any() and not enc["mask"].any()
    g = loop_graph(cuda_space, bad)
    assert not g.graph["valid"] and g.number_of_nodes() == 0 and loop_slots(cuda_space, bad) is None
    # a schedule error on llvm: zeros as well, not an exception
    space = KnobSpace.for_task(Task.parse("resnet18:1"), "compact")
    template = template_for(space.task, presets=("compact",), n_configs=4)
    monkeypatch.setattr(loops, "NEST_CACHE", {})
    monkeypatch.setattr(space, "apply", lambda *args: (None, "schedule error: boom"))
    enc = encode_graphs(template, space, [space.config(0)])
    assert not enc["mask"].any() and not enc["nodes"].any()


# ---------------------------------------------------------------------- template
def test_template_round_trip_and_determinism(conv_full, conv_template):
    text = json.dumps(conv_template.to_dict())
    restored = GraphTemplate.from_dict(json.loads(text))
    assert restored == conv_template and GraphTemplate.from_dict(text) == conv_template
    configs = configs_of(conv_full, 2)
    a, b = encode_graphs(conv_template, conv_full, configs), encode_graphs(restored, conv_full, configs)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert template_for(conv_full.task) is conv_template  # cached per process
    # the same probe gives the same template (here from fresh walks)
    spaces = [KnobSpace.for_task(Task.parse("resnet18:5"), "compact")]
    first = GraphTemplate.probe(spaces, n_configs=3, seed=1)
    loops.NEST_CACHE.clear()
    assert GraphTemplate.probe(spaces, n_configs=3, seed=1) == first
    assert template_for(Task.parse("resnet18:5")) == conv_template  # one template per family and target
    assert conv_template.feat_dim == len(NODE_TYPES) + len(LOOP_FEATURES) + 3 * len(conv_template.buffers)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(format=99), "format 99"),
    (lambda d: d.update(loops="a/b"), "'loops' must be a list"),
    (lambda d: d.update(buffers=["x_0", "x_0"]), "'buffers' must hold distinct strings"),
    (lambda d: d.pop("family"), "'family' must be a str"),
])
def test_template_from_dict_names_the_bad_field(conv_template, edit, message):
    data = conv_template.to_dict()
    edit(data)
    with pytest.raises(ValueError, match=message):
        GraphTemplate.from_dict(data)


def test_template_refuses_another_family(conv_template, dense_space):
    with pytest.raises(ValueError, match="template is for conv2d_nchw on llvm, but .* is dense on llvm"):
        encode_graphs(conv_template, dense_space, [dense_space.config(0)])
    with pytest.raises(ValueError, match="conv2d_nchw on llvm"):
        GraphTemplate.probe([KnobSpace.for_task(Task.parse("resnet18:1"), "compact"), dense_space])


# ---------------------------------------------------------------------- torch_geometric
def test_to_pyg(conv_full, conv_template, monkeypatch):
    enc = encode_graphs(conv_template, conv_full, configs_of(conv_full, 1)[-1:])
    if "torch_geometric" not in sys.modules:
        monkeypatch.setitem(sys.modules, "torch_geometric", None)  # make the import fail for sure
        with pytest.raises(ImportError, match="pip install torch_geometric"):
            to_pyg(enc)
    data_mod = types.ModuleType("torch_geometric.data")
    data_mod.Data = types.SimpleNamespace
    monkeypatch.setitem(sys.modules, "torch_geometric", types.ModuleType("torch_geometric"))
    monkeypatch.setitem(sys.modules, "torch_geometric.data", data_mod)
    data = to_pyg(enc)
    n = int(enc["mask"][0].sum())
    assert tuple(data.x.shape) == (n, conv_template.feat_dim) and tuple(data.edge_index.shape) == (2, n - 1)
    assert tuple(to_pyg(enc, undirected=True).edge_index.shape) == (2, 2 * (n - 1))
    assert data.slot.tolist() == np.flatnonzero(enc["mask"][0]).tolist()
    src, dst = data.edge_index.numpy()
    assert (src == 0).sum() == (n - 1) // 2  # root -> every for node
