"""`zoo bench observe`: message throughput and hop latency with and without the eBPF probes, one run.

The traffic is a ROUTER → DEALER → ROUTER ping-pong of real wire messages (transport.codec), not the
whole control plane: the probes' cost is per message, and a ping-pong isolates it (state it in reports).
"""

from __future__ import annotations

import argparse
import sys


def run_observe_bench(args: argparse.Namespace) -> dict:
    from observe.ebpf import ebpf_status

    available, reason = ebpf_status()
    if not available:
        print(f"zoo bench observe: eBPF unavailable ({reason}); run as root after `make ebpf`", file=sys.stderr)
        return {"available": False, "reason": reason}
    from bench.observe_ebpf import bench_ebpf_overhead, format_report

    quick = getattr(args, "quick", False)
    report = bench_ebpf_overhead(num_messages=4_000 if quick else 20_000, num_rounds=4 if quick else 10)
    report["available"] = True
    if not args.json:
        print(format_report(report))
    return report
