"""Every GPU comparison this project claims, side by side with its peer, in one run.

    python benchmarks/gpu.py            # a CUDA GPU: sized for 8 minutes (not yet run on one)
    python benchmarks/gpu.py --quick    # the CPU, in seconds: checks that it still works

Rows (each a function in ``ROWS``; later work adds its own):

- ``vec_env``: PPO on thousands of batched ``TorchCartPole``s, rl-suite against rsl_rl
  (``benchmarks/vec_env.py``'s runs, same settings on both sides, each in a fresh
  process), at 4,096, 16,384 and 65,536 environments: env steps/s, the ratio (target: at
  least 1.2), the mean return of the last 100 training episodes and the learning rate at
  the end (both adapt it to the KL).
- ``cuda tests``: the tests marked ``cuda`` (``pytest -m cuda``) over every package and
  the integration tests: how many passed, failed and were skipped, and the failures' names.

The peers come as in the ``benchmarks`` nox session (``pip install rsl-rl-lib``, with
every rl-suite package installed). On a machine without network (a lent GPU machine),
carry them as wheels: ``pip wheel --no-deps`` of each ``packages/*``, and ``pip download``
of gymnasium, rsl-rl-lib and tensordict with what they need that is not there.

``--quick`` runs two small sizes on the CPU for one timed iteration each, and the
``cuda`` tests of one file (none run without a GPU): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch
import vec_env

ROOT = Path(__file__).resolve().parent.parent
VEC_ENV_SIZES = (4096, 16384, 65536)
QUICK_SIZES = (64, 256)


def vec_env_rows(args: argparse.Namespace) -> list[list[str]]:
    """rl-suite and rsl_rl at each size: one row per size."""
    rows = []
    for envs in QUICK_SIZES if args.quick else VEC_ENV_SIZES:
        settings = vec_env.Settings(
            envs=envs,
            iterations=1 if args.quick else args.iterations,
            warmup=1 if args.quick else 2,
            threads=1,  # (as vec_env.py by default: one torch thread per run)
            device=args.device,
            hidden=vec_env.HIDDEN,
        )
        runs = [
            vec_env.in_fresh_process(run, settings, 0)
            for run in (vec_env.run_ours, vec_env.run_rsl_rl)
        ]
        ours, peer = runs
        ratio = ours.steps_per_s / peer.steps_per_s
        rows.append(
            [
                f"vec_env PPO, {envs:,} envs",
                f"{ours.steps_per_s:,.0f} steps/s",
                f"{peer.steps_per_s:,.0f} steps/s",
                f"{ratio:.2f} ({'met' if ratio >= vec_env.SPEED_TARGET else 'NOT met'})",
                f"return {ours.mean_return:.0f} / {peer.mean_return:.0f}, "
                f"lr {ours.learning_rate:.1e} / {peer.learning_rate:.1e}",
            ]
        )
        print("  " + " | ".join(rows[-1]), flush=True)
    return rows


def cuda_test_rows(args: argparse.Namespace) -> list[list[str]]:
    """The ``cuda``-marked tests (with --quick, one file's: skipped without a GPU)."""
    paths = (
        ["packages/rl-samplers/tests/test_batched.py"]
        if args.quick
        else [str(p.relative_to(ROOT)) for p in sorted((ROOT / "packages").glob("*/tests"))]
        + ["integration_tests"]
    )
    with tempfile.TemporaryDirectory(prefix="gpu-tests-") as tmp:
        report = Path(tmp) / "report.xml"
        command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider"]
        run = subprocess.run(
            [*command, f"--junitxml={report}", *paths],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if not report.is_file():  # (pytest missing, or it could not start)
            raise RuntimeError(f"pytest ran no tests (exit code {run.returncode}): {run.stderr}")
        cases = ET.parse(report).getroot().iter("testcase")
        outcomes = {"passed": [], "failed": [], "skipped": []}
        for case in cases:
            kind = next(
                (
                    {"failure": "failed", "error": "failed", "skipped": "skipped"}[child.tag]
                    for child in case
                    if child.tag in ("failure", "error", "skipped")
                ),
                "passed",
            )
            outcomes[kind].append(f"{case.get('classname')}::{case.get('name')}")
    counts = ", ".join(f"{len(names)} {kind}" for kind, names in outcomes.items())
    failed = "; ".join(outcomes["failed"]) or "-"
    return [["cuda tests (pytest -m cuda)", counts, "", "", f"failed: {failed}"]]


ROWS = {"vec_env": vec_env_rows, "cuda tests": cuda_test_rows}


def print_table(rows: list[list[str]], device: str) -> None:
    header = ["work", "rl-suite", "peer", "ratio (target 1.2)", "also"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print(f"\nGPU claims on {device}, torch {torch.__version__}:")
    for row in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CPU, in seconds")
    parser.add_argument("--iterations", type=int, default=30, help="timed iterations (30)")
    parser.add_argument("--only", choices=sorted(ROWS), nargs="+", help="these rows only")
    args = parser.parse_args()
    if args.iterations < 1:
        parser.error("--iterations must be at least 1")
    if args.quick:
        args.device = "cpu"
    elif torch.cuda.is_available():
        args.device = "cuda"
    else:
        parser.error("no CUDA GPU here: run with --quick (the CPU) to check the script")
    device = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    print(f"benchmarks/gpu.py on {device}; load average {os.getloadavg()[0]:.2f}", flush=True)
    start, rows = time.perf_counter(), []
    for name, make_rows in ROWS.items():
        if args.only is None or name in args.only:
            print(f"{name} ...", flush=True)
            rows += make_rows(args)
    print_table(rows, device)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
