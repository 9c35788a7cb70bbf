"""Check that two checkouts' fleet simulators give the same fixed-seed reports (a simulator speed-up must not
change a result).

    python scripts/sim_identical.py run  --root /work/main --out /tmp/base      # `zoo sim --json` per case
    python scripts/sim_identical.py run  --root .          --out /tmp/new
    python scripts/sim_identical.py compare /tmp/base /tmp/new                   # exit 1 on a difference
    python scripts/sim_identical.py speed --root /work/main --root . --rounds 2 -- --trace conv   # CPU s, A/B

Each case is one `zoo sim --json` run, 60 s windows, seed 0, at 80% load (``CASES``). ``compare`` drops the
timing fields (``wall_s``, ``speedup``) and reports, per case, "identical" (byte for byte), "within 1e-9" (every
number equal within a relative 1e-9: float sums taken in another order) or the first differing paths.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BASE = ["--load", "0.8", "--duration", "60", "--seed", "0", "--json"]
CASES: dict[str, list[str]] = {
    "conv-all": ["--fleet", "zoo", "--trace", "conv", "--policy", "all"],
    "code-all": ["--fleet", "zoo", "--trace", "code", "--policy", "all"],
    "mooncake-all": ["--fleet", "zoo_long", "--trace", "mooncake", "--policy", "all"],
    "conv-pd-split": ["--fleet", "zoo", "--trace", "conv", "--policy", "hardware_aware", "--pd-split", "auto"],
    "code-pd-split": ["--fleet", "zoo", "--trace", "code", "--policy", "hardware_aware", "--pd-split", "auto"],
    "conv-spec-pairs": ["--fleet", "zoo", "--trace", "conv", "--policy", "hardware_aware", "--spec-pairs", "auto"],
    "code-spec-pairs": ["--fleet", "zoo", "--trace", "code", "--policy", "hardware_aware", "--spec-pairs", "auto"],
}
TIMING_KEYS = frozenset({"wall_s", "speedup"})


def _run_in(root: Path, argv: list[str], what: str) -> str:
    """``python argv`` with ``root`` first on the import path (that checkout's simulator): its stdout."""
    env = {**os.environ, "PYTHONPATH": str(root.resolve())}
    proc = subprocess.run([sys.executable, *argv], cwd=root, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{what}: zoo sim failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def run(root: Path, out: Path, names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.perf_counter()
        (out / f"{name}.json").write_text(_run_in(root, ["-m", "zoo", "sim", *CASES[name], *BASE], name))
        usage = os.times()
        wall_s = time.perf_counter() - t0
        print(f"{name}: {wall_s:.0f} s wall, CPU of the runs so far {usage.children_user:.0f} s", flush=True)


# run in a child with the checkout on its path: the CPU seconds of FleetSimulator.run (the simulation, not the imports
# nor the router's kernel compilation: a 2 s run first warms them)
_SPEED_CHILD = """
import contextlib, io, json, sys, time
import sim.des as des
from zoo.cli import main
run, out = des.FleetSimulator.run, []
def timed(self):
    cpu, wall = time.process_time(), time.perf_counter()
    result = run(self)
    out.append((time.process_time() - cpu, time.perf_counter() - wall, result.end_s))
    return result
with contextlib.redirect_stdout(io.StringIO()):  # warm: imports, the router's compiled kernel (not the simulation)
    main(["sim", *sys.argv[1:], "--duration", "2", "--json"])
des.FleetSimulator.run = timed
with contextlib.redirect_stdout(io.StringIO()):
    main(["sim", *sys.argv[1:], "--json"])
cpu_s, wall_s, virtual_s = (sum(o[i] for o in out) for i in range(3))
print(json.dumps({"cpu_s": cpu_s, "wall_s": wall_s, "virtual_s": virtual_s}))
"""


def speed(roots: list[Path], rounds: int, sim_args: list[str]) -> dict:
    """The roots' simulators on the same run, alternating (A, B, A, B, ...): per root the CPU seconds of each run,
    virtual seconds per CPU second ("x real time" on a machine of its own), and the load average around it."""
    runs: dict[str, list[dict]] = {str(r): [] for r in roots}
    for _ in range(rounds):
        for root in roots:
            load_before = os.getloadavg()[0]
            row = json.loads(_run_in(root, ["-c", _SPEED_CHILD, *sim_args], str(root)).strip().splitlines()[-1])
            row["x_real_time_per_cpu_s"] = row["virtual_s"] / row["cpu_s"]
            row["x_real_time_wall"] = row["virtual_s"] / row["wall_s"]
            row["load_avg_1m"] = [load_before, os.getloadavg()[0]]
            runs[str(root)].append(row)
            print(f"{root}: {row['cpu_s']:.1f} CPU s, x{row['x_real_time_per_cpu_s']:.2f} per CPU s", flush=True)
    return {
        "args": sim_args,
        "runs": runs,
        "median_cpu_s": {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()},
        "median_x_real_time_per_cpu_s": {
            k: statistics.median(r["x_real_time_per_cpu_s"] for r in v) for k, v in runs.items()
        },
    }


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _diffs(a, b, path: str = "", out: list[str] | None = None) -> list[str]:
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{path}/{key}: only in {'new' if key not in a else 'base'}")
            else:
                _diffs(a[key], b[key], f"{path}/{key}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diffs(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float):
        if a != b and not (math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))):
            out.append(f"{path}: {a!r} != {b!r}")
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")
    return out


def compare(base: Path, new: Path) -> bool:
    same = True
    for name in CASES:
        a_path, b_path = base / f"{name}.json", new / f"{name}.json"
        if not a_path.exists() or not b_path.exists():
            print(f"{name}: missing")
            same = False
            continue
        a, b = _strip(json.loads(a_path.read_text())), _strip(json.loads(b_path.read_text()))
        if json.dumps(a) == json.dumps(b):
            print(f"{name}: identical")
            continue
        diffs = _diffs(a, b)
        if diffs:
            same = False
            print(f"{name}: DIFFERENT ({len(diffs)} values)")
            for line in diffs[:20]:
                print(f"  {line}")
        else:
            print(f"{name}: within 1e-9")
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    run_p = sub.add_parser("run")
    run_p.add_argument("--root", type=Path, required=True, help="the checkout to run (its PYTHONPATH)")
    run_p.add_argument("--out", type=Path, required=True)
    run_p.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    cmp_p = sub.add_parser("compare")
    cmp_p.add_argument("base", type=Path)
    cmp_p.add_argument("new", type=Path)
    speed_p = sub.add_parser("speed")
    speed_p.add_argument("--root", type=Path, action="append", required=True, help="a checkout (give two or more)")
    speed_p.add_argument("--rounds", type=int, default=2)
    speed_p.add_argument("--out", type=Path, help="write the figures here (JSON)")
    speed_p.add_argument("sim_args", nargs="*", help="zoo sim's arguments (after --)")
    args = parser.parse_args(argv)
    if args.cmd == "speed":
        figures = speed(args.root, args.rounds, args.sim_args)
        text = json.dumps(figures, indent=2)
        if args.out is not None:
            args.out.write_text(text + "\n")
        print(text)
        return 0
    if args.cmd == "run":
        run(args.root, args.out, [c for c in args.cases.split(",") if c])
        return 0
    return 0 if compare(args.base, args.new) else 1


if __name__ == "__main__":
    raise SystemExit(main())
