"""A real sweep through rl-launch's queue: the example sweep file of rl-suite (two learning
rates of the cartpole PPO preset x two seeds), cut to a short training, on this machine with
one core per run; then its plot, and Ctrl-C in the middle of another."""

import csv
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rl_suite._cli import main
from rl_suite._plot import sweep_runs

EXAMPLE = Path(__file__).resolve().parents[1] / "packages/rl-suite/examples/sweep-cartpole-lr.json"
SHORT = ["runner.log_interval_steps=1024", "sampler.eval_n_envs=2"]
SHORT += ["sampler.eval_max_trajectories=2"]


def test_the_readmes_show_the_example_file():
    for readme in (EXAMPLE.parents[1] / "README.md", EXAMPLE.parents[3] / "README.md"):
        (shown,) = re.findall(r"```json\n(.*?)```", readme.read_text(), re.DOTALL)
        assert json.loads(shown) == json.loads(EXAMPLE.read_text()), readme


def _sweep_file(tmp_path, steps):
    """The example file, with a short training: the test cannot drift from the docs' file."""
    spec = json.loads(EXAMPLE.read_text())
    spec.update(steps=steps, overrides=[*spec.get("overrides", []), *SHORT])
    path = tmp_path / "sweep-cartpole-lr.json"
    path.write_text(json.dumps(spec))
    return path, spec


def _ctrl_c_raises_in_child() -> None:
    """Run in the child before it starts: SIGINT as in a terminal (Python then raises
    KeyboardInterrupt), even when this test run was started with SIGINT ignored (a shell's
    background job), which children would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(path, sweep_dir):
    command = [sys.executable, "-m", "rl_suite", "sweep", str(path), "--log-dir", str(sweep_dir)]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_raises_in_child,
    )


@pytest.mark.slow
def test_a_sweep_runs_every_variant_and_seed_on_its_own_cpus(tmp_path):
    path, spec = _sweep_file(tmp_path, steps=4096)
    sweep_dir = tmp_path / "sweep"
    process = _start(path, sweep_dir)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, out + err
    variants = {v["name"]: v["overrides"] for v in spec["grid"][0]}
    assert len(variants) == 2 and spec["seeds"] == 2 and spec.get("cpu_per_run", 1) == 1
    assert "4 runs in" in out and "4 succeeded, 0 failed" in out
    runs = {}
    for name, overrides in variants.items():
        (lr,) = [float(o.split("=")[1]) for o in overrides if "learning_rate" in o]
        variant = json.loads((sweep_dir / name / "variant.json").read_text())
        assert variant == {"algo_kwargs": {"learning_rate": lr}}
        for seed in (0, 1):
            run_dir = sweep_dir / name / f"run_{seed}"
            with open(run_dir / "progress.csv", newline="") as f:
                rows = list(csv.DictReader(f))
            assert [int(r["CumSteps"]) for r in rows] == [0, 1024, 2048, 3072, 4096]
            assert {"Iteration", "ReturnAverage", "ReturnStd", "StepsPerSecond"} <= rows[0].keys()
            config = json.loads((run_dir / "params.json").read_text())["config"]
            assert config["algo_kwargs"]["learning_rate"] == lr and config["seed"] == seed
            assert re.search(rf"^{name}\s+{seed}\s+4096\s+\d+\.\d\s+ok$", out, re.MULTILINE)
            runs[name, seed] = json.loads((run_dir / "sweep_run.json").read_text())
    # Each run had one core of its own (its slot's); runs that overlapped in time never shared.
    for info in runs.values():
        assert info["cpus"] == info["affinity"]["master_cpus"] and len(info["cpus"]) == 1
        assert set(info["cpus"]) <= os.sched_getaffinity(0)
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(runs.values(), 2)
        if a["started"] < b["finished"] and b["started"] < a["finished"]
    ]
    assert overlapping, "two runs at once on a 2-core machine"
    for a, b in overlapping:
        assert not set(a["cpus"]) & set(b["cpus"])
    # One curve per variant, the mean over its two seeds.
    assert {name: len(r) for name, r in sweep_runs(sweep_dir).items()} == dict.fromkeys(variants, 2)
    pytest.importorskip("matplotlib")
    out_png = tmp_path / "sweep.png"
    assert main(["plot", str(sweep_dir), "--out", str(out_png)]) == 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_ctrl_c_stops_the_sweep_and_every_run(tmp_path):
    path, _ = _sweep_file(tmp_path, steps=200_000)
    sweep_dir = tmp_path / "sweep"
    process = _start(path, sweep_dir)
    try:
        deadline = time.monotonic() + 120
        while len(list(sweep_dir.glob("*/run_*/progress.csv"))) < 2:  # both training
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the first two runs did not start"
            time.sleep(0.1)
        children = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=60) == 130
    finally:
        process.kill()
    assert "rl-suite sweep: interrupted: every run was stopped" in process.stderr.read()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive
    tree = (sweep_dir / "experiments_tree.txt").read_text()
    assert tree.count("stopped (the launcher was interrupted") == 2 and tree.count("queued") == 2
