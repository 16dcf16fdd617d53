"""Preemption through the command line, with real runs, process groups and signals: a
scheduler's SIGTERM to the whole group stops a run with parallel sampler workers (exit 75,
the command that continues it), `--async` runs stop, get killed (-9) and resume to their end
leaving nothing in /dev/shm, a dead worker of an `--async` run is one line, and
`sampler.worker_timeout` reaches the samplers."""

import csv
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

import rl_suite
from rl_suite._cli import main
from rl_suite._config import apply_overrides, make_config

STOPPED = 75  # (the CLI's exit code for a run stopped by a signal, with its snapshot)


def _rows(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def _steps(run_dir):
    return [int(r["CumSteps"]) for r in _rows(run_dir)]


def _start(*args):
    """`rl-suite ARGS` in a process group of its own, as a scheduler's job is."""
    return subprocess.Popen(
        [sys.executable, "-m", "rl_suite", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for_rows(process, run_dir, rows, timeout=240):
    """Until ``run_dir`` has more than ``rows`` rows; the run must still be going."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if (run_dir / "progress.csv").exists() and len(_rows(run_dir)) > rows:
            break
        time.sleep(0.05)
    assert process.poll() is None, process.stderr.read()[-3000:]


def _group(process):
    """The processes of ``process``'s group (itself, its workers and children)."""
    return [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]


def _named_in_dev_shm(processes):
    """What the processes have open in /dev/shm under a name (a named semaphore is mapped
    under the temporary name it was made with, "(deleted)" once linked to its own)."""
    named = []
    for process in processes:
        with open(f"/proc/{process.pid}/maps") as maps:
            named += [
                line.split(None, 5)[-1]
                for line in maps
                if "/dev/shm/sem." in line
                or ("/dev/shm/" in line and not line.rstrip().endswith("(deleted)"))
            ]
    return named


def _gone(processes, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes):
            return True
        time.sleep(0.05)
    return False


def _checkpoint(run_dir):
    return torch.load(run_dir / "params.pt", map_location="cpu", weights_only=True)


def _stopped_message(stderr, signame, run_dir):
    match = re.search(
        rf"rl-suite (?:train|resume): stopped by {signame} after (\d+) steps; continue with: "
        rf"rl-suite resume (\S+)",
        stderr,
    )
    assert match, stderr[-3000:]
    assert os.path.samefile(match.group(2), run_dir)
    return int(match.group(1))


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups")
def test_sigterm_to_the_group_of_a_run_with_workers_stops_it_and_resume_ends_it(tmp_path):
    """SIGTERM to the whole group (sampler workers included): the workers live on, the run
    finishes its iteration, writes a snapshot and exits 75 naming the command that continues
    it; that command runs to the end, every row once."""
    run_dir = tmp_path / "run_0"
    args = ["train", "ppo", "--env", "CartPole-v1", "--sampler", "cpu", "--workers", "2"]
    args += ["--log-dir", str(tmp_path), "--steps", "8192"]
    args += ["--set", "runner.log_interval_steps=256", "--set", "runner.evaluate=False"]
    process = _start(*args)
    try:
        _wait_for_rows(process, run_dir, 2)
        workers = _group(process)[1:]
        assert len(workers) >= 2
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(120) == STOPPED, process.stderr.read()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    steps = _stopped_message(process.stderr.read(), "SIGTERM", run_dir)
    assert _checkpoint(run_dir)["cum_steps"] == steps < 8192
    assert _gone(workers)  # (ended by the run, not by the signal: it exited 75 with them)
    assert main(["resume", str(run_dir)]) == 0
    assert _steps(run_dir) == list(range(256, 8192 + 1, 256))


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux's /proc")
def test_an_async_run_stops_on_sigterm_resumes_after_a_kill_and_ends(tmp_path, capsys):
    """`--async` DQN on CartPole, its replay kept: SIGTERM to the group stops it with a
    snapshot (exit 75); resumed, it goes on from that snapshot's steps; killed (-9, the whole
    group) it leaves nothing in /dev/shm; resumed again from its last snapshot, it ends."""
    run_dir = tmp_path / "run_0"
    args = ["train", "dqn", "--async", "--env", "CartPole-v1", "--log-dir", str(tmp_path)]
    args += ["--steps", "15360", "--set", "runner.log_interval_steps=512"]
    args += ["--set", "runner.evaluate=False", "--set", "runner.checkpoint_replay=True"]
    process = _start(*args)
    try:
        _wait_for_rows(process, run_dir, 2)
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(120) == STOPPED, process.stderr.read()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    steps = _stopped_message(process.stderr.read(), "SIGTERM", run_dir)
    checkpoint = _checkpoint(run_dir)
    assert checkpoint["cum_steps"] == steps and checkpoint["replay_file"]
    first_rows = len(_rows(run_dir))

    process = _start("resume", str(run_dir))
    try:
        _wait_for_rows(process, run_dir, first_rows + 1)
        group = _group(process)
        assert len(group) >= 3  # the optimizer, the sampler's process, the memory copier
        assert _named_in_dev_shm(group) == []
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert _gone(group)
    log = (run_dir / "debug.log").read_text()
    next_itr = checkpoint["next_itr"]
    assert f"Resumed from {run_dir.resolve() / 'params.pt'} after {next_itr} iterations." in log

    checkpoint = _checkpoint(run_dir)  # (the resumed run's last)
    assert checkpoint["cum_steps"] > steps
    capsys.readouterr()
    assert main(["resume", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"after {checkpoint['next_itr']} iterations." in out
    assert out.count("The environments restart") == 1  # (said once: not kept by --async)
    assert _steps(run_dir) == list(range(512, 15360 + 1, 512))
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups")
def test_a_dead_worker_of_an_async_run_is_one_line(tmp_path):
    """`--async` with cpu workers: a worker killed mid-run stops the run with one line
    naming it (the sampler's WorkerError, raised as such in the optimizer's process)."""
    run_dir = tmp_path / "run_0"
    args = ["train", "dqn", "--async", "--sampler", "cpu", "--workers", "2"]
    args += ["--log-dir", str(tmp_path), "--steps", "100000"]
    args += ["--set", "runner.log_interval_steps=512", "--set", "runner.evaluate=False"]
    process = _start(*args)
    try:
        _wait_for_rows(process, run_dir, 1)
        group = _group(process)
        sampler = next(p for p in group[1:] if len(p.children()) >= 2)  # (it has workers)
        worker = sampler.children()[-1]
        worker.kill()
        assert process.wait(60) == 2
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    lines = process.stderr.read().strip().splitlines()
    assert re.fullmatch(
        rf"rl-suite train: error: sampler worker sampler-worker-\d \(pid {worker.pid}\) was "
        r"killed by SIGKILL",
        lines[-1],
    ), lines[-20:]
    assert "Traceback" not in "\n".join(lines)
    assert _gone(group)


def test_worker_timeout_reaches_the_parallel_samplers(capsys):
    config = apply_overrides(
        make_config(algo="ppo"), ["sampler.kind=cpu", "sampler.worker_timeout=7.5"]
    )
    assert rl_suite.build(config).sampler.worker_timeout == 7.5
    config = apply_overrides(
        make_config(algo="dqn"), ["sampler.kind=cpu", "runner.asynchronous=True"]
    )
    sampler = rl_suite.build(config).sampler  # (AsyncCpuSampler: the CpuSampler it runs)
    assert sampler.sampler.worker_timeout == 300.0  # the default
    del config["sampler"]["worker_timeout"]  # (a run saved before the setting existed)
    assert rl_suite.build(config).sampler.sampler.worker_timeout == 300.0
    for bad, expected in (("0", "seconds > 0"), ("soon", "a number")):
        argv = ["train", "ppo", "--sampler", "cpu", "--dry-run"]
        assert main([*argv, "--set", f"sampler.worker_timeout={bad}"]) == 2
        err = capsys.readouterr().err
        assert "worker_timeout" in err and expected in err and len(err.splitlines()) == 1
