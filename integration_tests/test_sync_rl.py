"""SyncRl for real: PPO in two gloo processes learns CartPole-v1 through the trainer, and a
rank killed mid-run ends the run quickly, leaving no process or shared memory behind."""

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import rl_suite


def _rows(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "progress.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.mark.slow
def test_ppo_in_two_processes_learns_cartpole(tmp_path):
    config = rl_suite.make_config("cartpole", steps=100_000, seed=0)
    config = rl_suite.apply_overrides(
        config, ["runner.processes=2", "runner.stop_return=475", "runner.snapshot_mode='none'"]
    )
    run_dir = rl_suite.train(config, tmp_path)
    rows = _rows(run_dir)
    # Each iteration covers both processes' batches of 8 x 32 steps.
    assert int(rows[1]["CumSteps"]) % (2 * 8 * 32) == 0
    best = max(float(r["ReturnAverage"]) for r in rows)
    assert best >= 475, f"best mean evaluation return {best}"


_KILL_SCRIPT = """
import json, signal, sys, threading, time
import psutil
import rl_suite

def rows():
    try:
        with open(sys.argv[1] + "/run_0/progress.csv") as f:
            return f.read().count("\\n") - 1
    except FileNotFoundError:
        return 0

def kill_rank_1_after_two_rows(seen):
    while rows() < 2:
        time.sleep(0.05)
    me = psutil.Process()
    seen["pids"] = [p.pid for p in me.children(recursive=True)]
    rank_1 = [p for p in me.children() if "resource_tracker" not in " ".join(p.cmdline())][0]
    seen["killed_at"] = time.monotonic()
    rank_1.send_signal(signal.SIGKILL)

if __name__ == "__main__":
    config = rl_suite.make_config("cartpole", steps=10_000_000, seed=0)
    config = rl_suite.apply_overrides(config, [
        "runner.processes=2", "runner.evaluate=False", "runner.log_interval_steps=512",
        "sampler.kind='cpu'", "sampler.workers=2",
    ])
    seen = {}
    threading.Thread(target=kill_rank_1_after_two_rows, args=(seen,), daemon=True).start()
    try:
        rl_suite.train(config, sys.argv[1])
    except RuntimeError as error:
        seen["seconds"] = time.monotonic() - seen["killed_at"]
        seen["error"] = str(error)
    print("RESULT " + json.dumps(seen))
"""


def test_a_killed_rank_ends_the_run_and_leaves_nothing(tmp_path):
    """SIGKILL to rank 1 (with its own sampler workers): rank 0 raises within 30 s, and once
    the run's process has exited, none of its processes and no shared memory is left."""
    shm_before = _shm()
    script = tmp_path / "kill.py"
    script.write_text(_KILL_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    seen = json.loads(lines[0][len("RESULT ") :])
    assert "rank 1 died (exit code -9)" in seen["error"]
    assert seen["seconds"] < 30
    assert len(seen["pids"]) >= 4  # rank 1, and both ranks' two sampler workers
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) for pid in seen["pids"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in seen["pids"] if psutil.pid_exists(pid)]
    # The killed rank's semaphores are unlinked by the resource tracker, which finishes its
    # clean-up a moment after the run's last process (later on a loaded machine).
    while not _shm() <= shm_before and time.monotonic() < deadline + 10:
        time.sleep(0.1)
    assert _shm() <= shm_before
