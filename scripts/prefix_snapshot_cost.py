"""What hardware_aware_prefix_snapshot costs the control plane: the CPU time of entering nodes' cached blocks into
hardware_aware's prefix index (``PrefixIndex.insert_cached``, what ``on_kv_events`` does with a node's snapshot at
its Welcome), per block and per node, on this host.

    python scripts/prefix_snapshot_cost.py [--nodes 256] [--blocks 20000] [--shared 1000] [--rounds 3] [--json]

Each node's snapshot: ``--shared`` blocks every node holds (a system prompt's) then its own, random 64-bit hashes as
the engine's chain values are; the nodes entered one after another into one index, as a restarted control plane
hears them join. ``--blocks`` 20,000 is an 80 GB GPU's KV cache for an 8B model in 16-token blocks, roughly (2 MB
a block). Reported: ns per block (median of the rounds), ms per node, and the seconds a whole fleet of ``--nodes``
such nodes takes, spread over their joins; a snapshot arrives in chunks of agent/engine_thread.py's
KV_SNAPSHOT_CHUNK blocks, each handled at once on the control plane's loop.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from agent.engine_thread import KV_SNAPSHOT_CHUNK
from controlplane.router.prefix_index import PrefixIndex


def measure(num_nodes: int, num_blocks: int, num_shared: int, rounds: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    shared = [rng.getrandbits(64) for _ in range(num_shared)]
    snapshots = [shared + [rng.getrandbits(64) for _ in range(num_blocks - num_shared)] for _ in range(num_nodes)]
    per_block_ns = []
    for _ in range(rounds):
        index = PrefixIndex(max_blocks_per_node=max(num_blocks, 1))
        start = time.perf_counter_ns()
        for node, hashes in enumerate(snapshots):
            for i in range(0, len(hashes), KV_SNAPSHOT_CHUNK):
                index.insert_cached(f"n{node}", hashes[i : i + KV_SNAPSHOT_CHUNK])
        per_block_ns.append((time.perf_counter_ns() - start) / (num_nodes * num_blocks))
    ns = statistics.median(per_block_ns)
    return {
        "num_nodes": num_nodes,
        "blocks_per_node": num_blocks,
        "shared_blocks": num_shared,
        "rounds": rounds,
        "ns_per_block": round(ns, 1),
        "ns_per_block_rounds": [round(x, 1) for x in per_block_ns],
        "ms_per_node": round(ns * num_blocks / 1e6, 2),
        "ms_per_chunk": round(ns * min(num_blocks, KV_SNAPSHOT_CHUNK) / 1e6, 2),
        "fleet_of_1024_s": round(ns * num_blocks * 1024 / 1e9, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=20_000)
    parser.add_argument("--shared", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.nodes, args.blocks, min(args.shared, args.blocks), args.rounds)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:24s} {value}")


if __name__ == "__main__":
    main()
