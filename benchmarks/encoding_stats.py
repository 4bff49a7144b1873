"""How big the schedule encodings of the committed datasets are before cropping.

Usage:
    python -m benchmarks.encoding_stats [--max-configs 300] [--seed 0] [--out-dir DIR]

For every dataset of the catalog (:func:`tune_gym.datasets.catalog.catalog`), on at most
``--max-configs`` of its configs (drawn without replacement with ``--seed``):

* TLP sequences (:func:`tune_gym.features.primitives.trace_rows`): the sequence length (rows
  before cropping) and each row's width (one-hot + numeric + token arguments before cropping),
  and the share of sequences / rows that TLP's default crop
  (:func:`~tune_gym.features.primitives.default_shape`: 25 x 22 on CPUs, 20 x 40 on GPUs)
  would cut;
* MetaTune graphs (:mod:`tune_gym.features.graph`): loops per config (a graph has
  ``1 + 2 * loops`` nodes), the family template's node slots and feature width, and the loops
  that the template has no slot for.

Datasets are grouped by op family and preset. The table is printed and written, with the
per-dataset numbers, to ``DIR/encoding_stats.md`` and ``DIR/encoding_stats.json`` (default
``benchmarks/results/encodings``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.datasets import load_dataset
from tune_gym.datasets.catalog import catalog
from tune_gym.features.graph import encode_graphs, template_for
from tune_gym.features.loops import loop_nest
from tune_gym.features.primitives import PRIMITIVE_KINDS, default_shape, trace_rows

DEFAULT_OUT = Path("benchmarks/results/encodings")


def dataset_stats(path: Path, max_configs: int, seed: int) -> dict[str, Any]:
    """Sequence and graph sizes of (a sample of) one dataset's configs."""
    ds = load_dataset(path)
    space = ds.space
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(ds), size=min(max_configs, len(ds)), replace=False)
    configs = [tuple(int(v) for v in ds.configs[i]) for i in sorted(rows)]
    max_len, vec_len = default_shape(space.task.target.kind)
    lengths: list[int] = []
    widths: list[int] = []
    for cfg in configs:
        seq = trace_rows(space.trace(cfg))
        lengths.append(len(seq))
        widths.extend(len(PRIMITIVE_KINDS) + len(nums) + len(toks) for _, nums, toks in seq)
    template = template_for(space.task)
    enc = encode_graphs(template, space, configs)
    nests = [loop_nest(space, cfg) for cfg in configs]
    loops = [len(n.loops) for n in nests if n is not None]
    return {
        "dataset": path.name, "task": space.task.uri, "family": space.task.op, "preset": space.preset,
        "target": space.task.target.kind, "configs": len(configs), "crop": [max_len, vec_len],
        "seq_len": lengths, "row_width": widths, "loops": loops, "invalid": len(configs) - len(loops),
        "dropped_loops": int(enc["dropped"].sum()), "template_slots": template.n_slots,
        "template_loops": len(template.loops), "feat_dim": template.feat_dim,
    }


def _summary(group: list[dict[str, Any]]) -> dict[str, Any]:
    lengths = np.concatenate([g["seq_len"] for g in group])
    widths = np.concatenate([g["row_width"] for g in group])
    loops = np.concatenate([g["loops"] for g in group])  # a dataset holds measured, so scheduling, configs
    max_len, vec_len = group[0]["crop"]
    first = group[0]
    return {
        "family": first["family"], "preset": first["preset"], "target": first["target"], "datasets": len(group),
        "configs": int(sum(g["configs"] for g in group)), "crop": f"{max_len}x{vec_len}",
        "seq_len": [int(lengths.min()), float(np.median(lengths)), int(lengths.max())],
        "seq_cut": float((lengths > max_len).mean()),
        "row_width": [int(widths.min()), float(np.median(widths)), int(widths.max())],
        "rows_cut": float((widths > vec_len).mean()),
        "loops": [int(loops.min()), float(np.median(loops)), int(loops.max())],
        "graph_nodes": [int(1 + 2 * loops.min()), int(1 + 2 * loops.max())],
        "template_slots": first["template_slots"], "feat_dim": first["feat_dim"],
        "dropped_loops": int(sum(g["dropped_loops"] for g in group)),
        "invalid": int(sum(g["invalid"] for g in group)),
    }


def markdown(summaries: list[dict[str, Any]]) -> str:
    """The summary table in Markdown."""
    head = ("| family | preset | datasets | configs | crop | seq len min/med/max | seqs cut | "
            "row width min/med/max | rows cut | loops min/med/max | graph nodes | template slots x feat | "
            "dropped loops |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in summaries:
        lo, med, hi = s["seq_len"]
        wlo, wmed, whi = s["row_width"]
        llo, lmed, lhi = s["loops"]
        lines.append(
            f"| {s['family']} | {s['preset']} | {s['datasets']} | {s['configs']} | {s['crop']} | "
            f"{lo}/{med:g}/{hi} | {100 * s['seq_cut']:.1f}% | {wlo}/{wmed:g}/{whi} | {100 * s['rows_cut']:.1f}% | "
            f"{llo}/{lmed:g}/{lhi} | {s['graph_nodes'][0]}-{s['graph_nodes'][1]} | "
            f"{s['template_slots']} x {s['feat_dim']} | {s['dropped_loops']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-configs", type=int, default=300, help="configs sampled per dataset")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where the table and JSON go")
    args = parser.parse_args(argv)
    if args.max_configs < 1:
        parser.error(f"--max-configs must be >= 1, got {args.max_configs}")
    start = time.perf_counter()
    per_dataset = []
    for entry in catalog():
        t = time.perf_counter()
        per_dataset.append(dataset_stats(entry.path, args.max_configs, args.seed))
        print(f"{entry.path.name}: {per_dataset[-1]['configs']} configs, {time.perf_counter() - t:.1f} s",
              file=sys.stderr)
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for d in per_dataset:
        groups[d["family"], d["preset"], d["target"]].append(d)
    summaries = [_summary(groups[k]) for k in sorted(groups)]
    table = markdown(summaries)
    command = "python -m benchmarks.encoding_stats " + shlex.join(argv if argv is not None else sys.argv[1:])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "encoding_stats.md").write_text(
        f"# Encoding sizes of the committed datasets\n\n`{command.strip()}`\n\n{table}\n")
    (args.out_dir / "encoding_stats.json").write_text(json.dumps({
        "command": command.strip(), "max_configs": args.max_configs, "seed": args.seed,
        "seconds": round(time.perf_counter() - start, 1), "groups": summaries,
        "datasets": [{**d, **{k: _describe(d[k]) for k in ("seq_len", "row_width", "loops")}} for d in per_dataset],
    }, indent=1) + "\n")
    print(table)
    return 0


def _describe(values: list[int]) -> dict[str, float]:
    """min / median / max / mean of a list (per-dataset JSON keeps these, not every value)."""
    if not values:
        return {}
    arr = np.asarray(values)
    return {"min": int(arr.min()), "median": float(np.median(arr)), "max": int(arr.max()), "mean": float(arr.mean())}


if __name__ == "__main__":
    raise SystemExit(main())
