"""The asynchronous runners with the real pieces: rl-samplers' async sampler in its own
process, rl-agents' agents sharing parameters across processes, rl-algos' algorithms on a
shared replay buffer. DQN learns CartPole and SAC learns Pendulum with the replay ratio kept
within 10% of the setting (the synchronous presets' settings, rl_suite._config); a sampler
killed mid-run makes train() raise, and nothing is left behind, nor by a kill -9 of the
whole process group."""

import csv
import gc
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import resource_tracker

import psutil
import pytest

from rl_agents import SacAgent, VectorDqnAgent
from rl_algos import DQN, SAC
from rl_runners import AsyncRl, AsyncRlEval, logger_context
from rl_samplers import AsyncSerialSampler, make

# One core each for the optimizer and the sampler (small networks: more threads only cost).
AFFINITY = {"sampler": {"master_torch_threads": 1}, "optimizer": [{"master_torch_threads": 1}]}


def cartpole_dqn(**dqn_kwargs):
    """rl-suite's cartpole-dqn preset: 8 environments x 32 steps a batch, 128 updates of 64
    transitions a batch (replay ratio 32), double DQN, dueling 256x256 MLP, 3-step returns."""
    algo = DQN(
        discount=0.99,
        batch_size=64,
        learning_rate=2.3e-3,
        replay_size=100_000,
        replay_ratio=32,
        min_steps_learn=1_000,
        target_update_interval=128,
        eps_steps=8_000,
        n_step_return=3,
        double_dqn=True,
        delta_clip=1.0,
        clip_grad_norm=10.0,
        **dqn_kwargs,
    )
    agent = VectorDqnAgent(
        model_kwargs={"hidden_sizes": [256, 256], "dueling": True}, eps_final=0.04, eps_eval=0.0
    )
    sampler = AsyncSerialSampler(
        EnvCls=make,
        env_kwargs={"id": "CartPole-v1"},
        batch_T=32,
        batch_B=8,
        max_decorrelation_steps=0,
        eval_n_envs=8,
        eval_max_steps=40_000,
        eval_max_trajectories=16,
    )
    return algo, agent, sampler


def pendulum_sac():
    """rl-suite's pendulum-sac preset: one environment, one update of 256 per step."""
    algo = SAC(
        discount=0.99,
        batch_size=256,
        replay_ratio=256,
        learning_rate=1e-3,
        min_steps_learn=1_000,
        replay_size=100_000,
    )
    sampler = AsyncSerialSampler(
        EnvCls=make,
        env_kwargs={"id": "Pendulum-v1"},
        batch_T=1,
        batch_B=1,
        max_decorrelation_steps=0,
        eval_n_envs=10,
        eval_max_steps=2_000,
        eval_max_trajectories=10,
    )
    return algo, SacAgent(), sampler


def read_progress(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def check_replay_ratio(rows, algo, after_steps):
    """Each row's measured replay ratio, once learning has run a whole interval, is within
    10% of the setting."""
    ratios = [float(r["ReplayRatio"]) for r in rows if int(r["CumSteps"]) > after_steps]
    assert ratios, "no row after learning started"
    for ratio in ratios:
        assert abs(ratio - algo.replay_ratio) <= 0.1 * algo.replay_ratio, ratios


@pytest.mark.slow
def test_async_dqn_learns_cartpole(tmp_path):
    algo, agent, sampler = cartpole_dqn()
    runner = AsyncRlEval(
        algo,
        agent,
        sampler,
        n_steps=100_000,
        seed=0,
        affinity=AFFINITY,
        log_interval_steps=2_000,  # a row of learning alone even if 475 comes by 5k steps
        stop_return=475,
    )
    with logger_context(tmp_path, 0, "dqn", snapshot_mode="none") as run_dir:
        runner.train()
    rows = read_progress(run_dir)
    best = max(float(r["ReturnAverage"]) for r in rows if r["ReturnAverage"])
    assert best >= 475, [(r["CumSteps"], r["ReturnAverage"]) for r in rows]
    check_replay_ratio(rows, algo, after_steps=algo.min_steps_learn + 2_000)


@pytest.mark.slow
def test_async_sac_learns_pendulum(tmp_path):
    algo, agent, sampler = pendulum_sac()
    runner = AsyncRlEval(
        algo,
        agent,
        sampler,
        n_steps=20_000,
        seed=0,
        affinity=AFFINITY,
        log_interval_steps=1_000,
        stop_return=-200,
    )
    with logger_context(tmp_path, 0, "sac", snapshot_mode="none") as run_dir:
        runner.train()
    rows = read_progress(run_dir)
    best = max(float(r["ReturnAverage"]) for r in rows if r["ReturnAverage"])
    assert best >= -200, [(r["CumSteps"], r["ReturnAverage"]) for r in rows]
    check_replay_ratio(rows, algo, after_steps=algo.min_steps_learn + 1_000)


# ------------------------------------------------------------------ a killed sampler


def shm_entries():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def mapped_by_others(name):
    """Whether a process other than this one maps /dev/shm/``name`` (other programs on the
    machine use /dev/shm too)."""
    if not os.path.isdir("/proc"):
        return False
    try:  # (by inode: a named semaphore is mapped under the temporary name it was made with)
        inode = str(os.stat(f"/dev/shm/{name}").st_ino)
    except OSError:
        return True  # (gone meanwhile)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                if any("/dev/shm/" in line and line.split()[4] == inode for line in f):
                    return True
        except OSError:
            continue
    return False


def children():
    """Child processes, not counting multiprocessing's resource tracker and fork server."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "resource_tracker" not in cmdline and "forkserver" not in cmdline:
            found.add(child.pid)
    return found


def kill_sampler_once_running(algo, killed):
    """(thread) SIGKILL the sampler's process once the replay holds some batches."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        sampler = [p for p in mp.active_children() if p.name == "sampler"]
        buffer = algo.replay_buffer
        if sampler and buffer is not None and buffer.t_total >= 4 * 32:
            os.kill(sampler[0].pid, signal.SIGKILL)
            killed.append(time.monotonic())
            return
        time.sleep(0.05)


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_a_killed_sampler_makes_train_raise_and_leaves_nothing(tmp_path, start_method):
    resource_tracker.ensure_running()
    before_shm, before_children = shm_entries(), children()
    algo, agent, sampler = cartpole_dqn()
    runner = AsyncRl(
        algo,
        agent,
        sampler,
        n_steps=1_000_000,
        seed=0,
        affinity=AFFINITY,
        log_interval_steps=5_000,
        start_method=start_method,
    )
    killed = []
    killer = threading.Thread(target=kill_sampler_once_running, args=(algo, killed))
    killer.start()
    try:
        with (
            pytest.raises(RuntimeError, match=r"the sampler process died \(signal 9\)"),
            logger_context(tmp_path, 0, "killed", snapshot_mode="none"),
        ):
            runner.train()
    finally:
        killer.join()
    assert killed and time.monotonic() - killed[0] < 30
    del runner, algo, agent, sampler
    gc.collect()
    assert mp.active_children() == []
    assert children() <= before_children
    for _ in range(30):
        gc.collect()
        new = {n for n in shm_entries() - before_shm if not mapped_by_others(n)}
        if not new:
            break
        time.sleep(0.1)
    assert not new, f"left in /dev/shm: {sorted(new)}"


# ------------------------------------------------------------------ a killed process group

KILLED_GROUP = """
import sys
sys.path.insert(0, {tests!r})
from test_async_rl import AFFINITY, cartpole_dqn
from rl_runners import AsyncRl, logger_context
from rl_samplers import AsyncCpuSampler, make

if __name__ == "__main__":
    algo, agent, _ = cartpole_dqn()
    sampler = AsyncCpuSampler(EnvCls=make, env_kwargs={{"id": "CartPole-v1"}}, batch_T=32,
                              batch_B=8, max_decorrelation_steps=0, eval_n_envs=0,
                              start_method={method!r})
    affinity = {{**AFFINITY, "sampler": {{"workers_cpus": [None, None]}}}}
    runner = AsyncRl(algo, agent, sampler, n_steps=1_000_000, seed=0, affinity=affinity,
                     log_interval_steps=512, start_method={method!r})
    with logger_context({log_dir!r}, 0, "group", snapshot_mode="last"):
        runner.train()
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux's /proc")
# (not fork: this process has run torch, whose thread pools a forked child may find locked)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_killed_process_group_leaves_nothing_in_dev_shm(tmp_path, start_method):
    """``kill -9`` of the whole group of a running AsyncRl (the optimizer, the sampler's
    process, its two CPU workers, the memory copier), as a scheduler's cgroup kill does: no
    process had a named semaphore or shared-memory file open (the agent's lock, the replay's
    read-write lock and the runner's control block have no name), so nothing is left in
    /dev/shm. (What the processes had open is checked, not the listing of /dev/shm, where
    other programs' entries come and go.)"""
    script = tmp_path / "run.py"
    tests = os.path.dirname(os.path.abspath(__file__))
    script.write_text(KILLED_GROUP.format(tests=tests, method=start_method, log_dir=str(tmp_path)))
    run = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.DEVNULL, start_new_session=True
    )
    progress = tmp_path / "run_0" / "progress.csv"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and run.poll() is None:
            if progress.exists() and len(progress.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        assert run.poll() is None and len(progress.read_text().splitlines()) >= 3
        group = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
        assert len(group) >= 5  # the optimizer, sampler, copier and two workers
        named = []
        for process in group:
            with open(f"/proc/{process.pid}/maps") as maps:
                named += [
                    line.split(None, 5)[-1]
                    for line in maps
                    # (a named semaphore is mapped under the temporary name it was made with)
                    if "/dev/shm/sem." in line
                    or ("/dev/shm/" in line and not line.rstrip().endswith("(deleted)"))
                ]
        assert named == []
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    _, alive = psutil.wait_procs(group, timeout=15)
    assert not alive
