"""Whether a change of code changed what training computes: ``python tools/run_fingerprint.py
OUT.json`` trains five short deterministic runs with the installed packages and writes every
non-timing column of every ``progress.csv`` row; ``python tools/run_fingerprint.py --compare
A.json B.json`` says which values differ (exit 1) or that none does.

The runs (seed 3, one torch thread): PPO on CartPole-v1 for 4,096 steps with the serial, cpu,
gpu and alternating samplers (two workers), and DQN with the gpu sampler for 3,000 steps.
Returns, losses, gradient norms and entropies are in the rows, so a refactor that keeps them
bit for bit kept the arithmetic. Run it on the code before a change and after, on one machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

RUNS = {
    f"ppo-{sampler}": [
        "ppo",
        "--sampler",
        sampler,
        "--steps",
        "4096",
        "--set",
        "runner.log_interval_steps=1024",
    ]
    + ([] if sampler == "serial" else ["--workers", "2"])
    for sampler in ("serial", "cpu", "gpu", "alternating")
}
RUNS["dqn-gpu"] = ["dqn", "--sampler", "gpu", "--workers", "2", "--steps", "3000"]
RUNS["dqn-gpu"] += ["--set", "runner.log_interval_steps=1000"]
TIMING_WORDS = ("time", "sps", "second", "fps", "memory", "cpu", "elapsed", "wall", "rate", "rss")


def fingerprint() -> dict[str, list[dict[str, str]]]:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in RUNS.items():
            log_dir = Path(tmp) / name
            command = [sys.executable, "-m", "rl_suite", "train", args[0], "--env", "CartPole-v1"]
            command += [*args[1:], "--seed", "3", "--log-dir", str(log_dir)]
            command += ["--set", "torch_threads=1"]
            print(f"{name}: {' '.join(command[2:])}", flush=True)
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            (progress,) = log_dir.rglob("progress.csv")
            with progress.open() as f:
                rows[name] = [
                    {k: v for k, v in row.items() if not any(w in k.lower() for w in TIMING_WORDS)}
                    for row in csv.DictReader(f)
                ]
    return rows


def compare(a: dict, b: dict) -> list[str]:
    differences = [f"{name}: runs only in one" for name in a.keys() ^ b.keys()]
    for name in sorted(a.keys() & b.keys()):
        if len(a[name]) != len(b[name]):
            differences.append(f"{name}: {len(a[name])} rows against {len(b[name])}")
        for i, (row_a, row_b) in enumerate(zip(a[name], b[name], strict=False)):
            differences += [
                f"{name} row {i} {key}: {row_a.get(key)} against {row_b.get(key)}"
                for key in sorted(row_a.keys() | row_b.keys())
                if row_a.get(key) != row_b.get(key)
            ]
    return differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="OUT.json, or A.json B.json with --compare")
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    if not args.compare:
        Path(args.files[0]).write_text(json.dumps(fingerprint(), indent=1))
        return 0
    a, b = (json.loads(Path(f).read_text()) for f in args.files)
    differences = compare(a, b)
    for line in differences[:50]:
        print(line)
    columns = sum(len(rows[0]) for rows in a.values() if rows)
    print(f"{len(differences)} differences ({len(a)} runs, {columns} columns a row in all)")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
