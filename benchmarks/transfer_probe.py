"""Would a network's kernels gain from their peers' best configs? Measured after a run.

    python -m benchmarks.transfer_probe --network resnet18 --target llvm --layout NCHW16c \\
        --run benchmarks/results/networks/emeraldrapids/HOST/resnet18-nchw16c/meta-bo-shared

For each kernel of a finished ``benchmarks.network_e2e`` tuning run (its ``records/``) that has
peers (kernels with the same split knobs, :func:`agents.transfer.compatible`), the best config
of every peer is mapped onto the kernel's knobs (:func:`agents.transfer.map_config`) and
measured live, together with the kernel's own best config again, in one batch per kernel (the
same process, the same backend, so the comparison is like with like). Reported per kernel: its
own best re-timed, the fastest mapped config and which peer it came from; over the network, the
weighted sum of the kernels' times with their own best, and with the better of their own and
the ``k`` mapped configs of the fastest peers (by the peer's GFLOPS, the order
``tune_network(transfer=...)`` carries them in) for several ``k``. Writes ``--out``
(default: ``RUN/transfer_probe.json``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

K_VALUES = (1, 2, 4, 8)


def probe(net: Any, run: Path) -> dict[str, Any]:
    from agents.transfer import compatible, map_config
    from tune_gym.host import host_cpu, host_id
    from tune_gym.measure import resolve_backend
    from tune_gym.records import best_records, load_records
    from tune_gym.space import KnobSpace

    kernels = []
    for nt in net.tasks:
        if not nt.tunable:
            continue
        records = load_records(run / "records" / f"{nt.task.digest}.jsonl")
        best = best_records(records).get(nt.task.uri)
        if best is not None:
            kernels.append((nt, KnobSpace.for_task(nt.task, "full"), best, {r.config for r in records}))
    backend, owns = resolve_backend("live", None)
    rows = []
    try:
        for nt, space, best, seen in kernels:
            peers = sorted((k for k in kernels if k[0] is not nt and compatible(space, k[1])),
                           key=lambda k: -k[2].result.gflops)
            if not peers:
                continue
            mapped = [map_config(p[1].to_dict(p[2].config), space) for p in peers]
            batch = list(dict.fromkeys([best.config, *mapped]))
            results = dict(zip(batch, backend.measure(nt.task, space, batch)))
            secs = {c: r.mean if r.ok else math.inf for c, r in results.items()}
            own = secs[best.config]
            peer_secs = [secs[c] for c in mapped]
            top = int(np.argmin(peer_secs))
            rows.append({"kernel": nt.task.name, "weight": nt.weight, "trials": len(seen), "own_s": own,
                         "peer_s": peer_secs, "peers": [p[0].task.name for p in peers],
                         "mapped_before": [c in seen for c in mapped],
                         "best_peer": peers[top][0].task.name, "best_peer_s": peer_secs[top]})
            print(f"{nt.task.name[:50]:<50} own {own * 1e3:7.3f} ms  best of {len(peers)} mapped "
                  f"{peer_secs[top] * 1e3:7.3f} ms ({own / peer_secs[top]:.2f}x)", flush=True)
    finally:
        if owns:
            backend.close()
    own_sum = sum(r["weight"] * r["own_s"] for r in rows)
    with_k = {k: sum(r["weight"] * min(r["own_s"], *r["peer_s"][:k]) for r in rows) for k in K_VALUES}
    return {"network": net.name, "target": str(net.target), "host": host_id(), "cpu": host_cpu(),
            "run": str(run), "kernels": rows, "own_ms": own_sum * 1e3,
            "best_of_k_fastest_peers_ms": {str(k): v * 1e3 for k, v in with_k.items()},
            "kernels_a_peer_beats": sum(r["best_peer_s"] < r["own_s"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--network", required=True)
    p.add_argument("--target", default="llvm&cores=1")
    p.add_argument("--layout", default="NCHW")
    p.add_argument("--run", type=Path, required=True, help="a network_e2e run directory (with records/)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    from tune_gym.networks import import_network

    net = import_network(args.network, args.target, seed=args.seed, layout=args.layout)
    report = probe(net, args.run)
    out = args.out or args.run / "transfer_probe.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['kernels_a_peer_beats']} of {len(report['kernels'])} kernels: a peer's mapped best beats "
          f"their own; sum {report['own_ms']:.2f} ms, with the k fastest peers' configs: "
          + ", ".join(f"k={k} {v:.2f} ms" for k, v in report["best_of_k_fastest_peers_ms"].items()))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
