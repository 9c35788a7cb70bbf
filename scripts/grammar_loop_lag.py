"""How long a burst of structured-output requests stalls the gateway's event loop while their constraints compile
(controlplane/gateway/structured_fields.py ``check_structured``): the longest gap between ticks of a 1 ms task on
the loop while 16 distinct JSON schemas of ~34 kB each compile at once, two ways in one run: each in a thread of
anyio's default pool (up to 40 at once: the gateway before its limiter) and two at a time (``GRAMMAR_THREADS``, the
gateway's limiter now). llguidance compiles off the GIL, so 16 threads at once take the cores from the loop. Medians
of 5 tries; the sides interleave; each try's schemas are new ones (backends/grammar.py remembers those that compiled).

    .venv/bin/python scripts/grammar_loop_lag.py > bench/results/<date>-grammar-loop-lag.json
"""

from __future__ import annotations

import itertools
import json
import statistics

import anyio
from tokenize_loop_lag import longest_gap_ms  # scripts/: its 1 ms ticker

from backends.grammar import check
from controlplane.gateway.structured_fields import GRAMMAR_THREADS
from engine.structured_output import StructuredOutput

AT_ONCE, TRIES = 16, 5
_serial = itertools.count()


def schema() -> StructuredOutput:
    """A distinct ~34 kB JSON schema: 40 objects of 12 typed, patterned fields."""
    n = next(_serial)
    props = {
        f"field_{n}_{k}": {
            "type": "object",
            "properties": {f"x{j}": {"type": ["string", "integer"], "pattern": "^[a-z]{1,8}$"} for j in range(12)},
        }
        for k in range(40)
    }
    return StructuredOutput(json=json.dumps({"type": "object", "properties": props, "required": list(props)}))


async def main() -> None:
    ways = {
        "default_thread_pool": lambda: None,
        f"{GRAMMAR_THREADS}_at_a_time": lambda: anyio.CapacityLimiter(GRAMMAR_THREADS),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(TRIES):
        for name, make_limiter in ways.items():
            specs, limiter = [schema() for _ in range(AT_ONCE)], make_limiter()

            async def work(specs=specs, limiter=limiter) -> None:
                async with anyio.create_task_group() as tg:
                    for spec in specs:
                        tg.start_soon(lambda s=spec: anyio.to_thread.run_sync(check, s, limiter=limiter))

            results[name].append(await longest_gap_ms(work))
    report = {
        "what": "16 distinct JSON schemas compiled at once by llguidance (backends/grammar.py check)",
        "schema_bytes": len(schema().json),
        "tick_ms": 1,
        "tries": TRIES,
        "ways": {
            name: {
                "loop_longest_gap_ms": round(statistics.median(g for g, _ in runs), 1),
                "all_compiled_wall_ms": round(statistics.median(w for _, w in runs), 1),
            }
            for name, runs in results.items()
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    anyio.run(main)
