"""AsyncRl and AsyncRlEval with toy components (rl_runners_toys): the sampler and the memory
copier in processes of their own, rows by sampler iterations, the replay ratio kept whichever
side is slower, failures of a child raised quickly, Ctrl-C, stop signals and resume, and
nothing left behind (no child process, no /dev/shm entry, even after a kill -9 of the whole
process group)."""

import contextlib
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

import numpy as np
import psutil
import pytest
import torch
from rl_runners_toys import (
    AFFINITY_MARK,
    BATCHES,
    EVALUATIONS,
    INITIALIZED,
    RECEIVED,
    SHUT_DOWN,
    StatelessToySampler,
    ToyAlgo,
    make_async,
)

from rl_runners import AsyncRl, AsyncRlEval, load_checkpoint, logger_context

# Every test checks that no /dev/shm entry is left, and /dev/shm is the whole machine's: the
# tests of other workers would show there.
pytestmark = pytest.mark.serial

# 8 steps a batch, 24 iterations, a row every 8; learning from iteration 2 (3 batches in),
# then 4 updates of 8 samples per batch of 8: a call every quarter iteration.
RUN = dict(n_steps=192, log_interval_steps=64, seed=1)


def shm_entries():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def mapped_by_others(name):
    """Whether a process other than this one maps /dev/shm/``name`` (the machine's other
    programs use /dev/shm too: their entries come and go during a test)."""
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


def assert_no_new_shm(before):
    """No entry of /dev/shm made since ``before`` remains, but those other processes use."""
    for _ in range(20):
        gc.collect()
        new = {n for n in shm_entries() - before if not mapped_by_others(n)}
        if not new:
            return
        time.sleep(0.1)
    raise AssertionError(f"left in /dev/shm: {sorted(new)}")


def children():
    """Child processes (not multiprocessing's resource tracker or fork server)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "resource_tracker" not in cmdline and "forkserver" not in cmdline:
            found.add(child.pid)
    return found


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """Every test: no child process alive and no new /dev/shm entry afterwards (waiting a
    little: other processes on the machine use /dev/shm too)."""
    resource_tracker.ensure_running()
    before_shm, before_children = shm_entries(), children()
    yield
    gc.collect()
    assert mp.active_children() == []
    assert children() <= before_children
    assert_no_new_shm(before_shm)


def read_progress(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def column(rows, name, kind=float):
    return [kind(float(r[name])) for r in rows]


def train(tmp_path, runner_cls=AsyncRl, sampler_kwargs=None, algo_kwargs=None, **kwargs):
    """Train the toys; (algo, agent, sampler, rows)."""
    algo, agent, sampler = make_async(sampler_kwargs, algo_kwargs)
    runner = runner_cls(algo, agent, sampler, **{**RUN, "start_method": "fork", **kwargs})
    with logger_context(tmp_path, 0, "async", snapshot_mode="last") as run_dir:
        runner.train()
    return algo, agent, sampler, read_progress(run_dir)


@pytest.mark.parametrize(
    "pace, start_method",
    [
        ("optimizer-bound", "fork"),
        ("sampler-bound", "fork"),
        ("optimizer-bound", "spawn"),
        ("sampler-bound", "forkserver"),
    ],
)
def test_rows_by_sampler_iterations_at_the_replay_ratio(tmp_path, pace, start_method):
    slow = (
        dict(algo_kwargs=dict(update_delay=0.003))
        if pace == "optimizer-bound"
        else dict(sampler_kwargs=dict(delay=0.02))
    )
    affinity = {"sampler": {"toy_mark": 7}, "optimizer": [{"master_torch_threads": 1}]}
    threads = torch.get_num_threads()
    algo, agent, sampler, rows = train(
        tmp_path, start_method=start_method, affinity=affinity, **slow
    )
    assert column(rows, "Iteration", int) == [7, 15, 23]
    assert column(rows, "CumSteps", int) == [64, 128, 192]
    # Learning starts with 3 batches in the replay; a row waits for its batches' updates.
    assert column(rows, "CumUpdates", int) == [20, 52, 84]
    assert column(rows, "ReplayRatio")[1:] == [4.0, 4.0]
    assert all(r["OptThrottle"] != "" for r in rows)
    # Never ahead of the replay ratio: updates * batch_size <= 4 * samples copied.
    assert all(updates * 8 <= 4 * copied * 8 for updates, copied, _ in algo.record)
    # Each call is told the sampler iteration whose batch is the newest in the replay.
    assert all(2 <= sampler_itr < copied for _, copied, sampler_itr in algo.record)
    # Every batch went into the replay once, whole, in sampling order.
    np.testing.assert_array_equal(algo.replay_buffer.order, np.arange(24))
    # Trajectory infos reach the row of their batch: one trajectory a batch, return itr.
    assert column(rows, "CumCompletedTrajs", int) == [8, 16, 24]
    assert column(rows, "NewCompletedTrajs", int) == [8, 8, 8]
    assert column(rows, "ReturnAverage") == [3.5, 7.5, 11.5]
    # The sampler's process: initialized with its affinity, refreshed, shut down.
    record = sampler.record
    assert (record[INITIALIZED], record[SHUT_DOWN], record[BATCHES]) == (1, 1, 24)
    assert record[AFFINITY_MARK] == 7 and record[RECEIVED] > 0
    assert int(agent.sent) == algo.update_counter == 84  # parameters sent after every call
    assert algo.torch_threads == 1  # the optimizer's affinity while it trained ...
    assert torch.get_num_threads() == threads  # ... and this process's own again after
    assert column(rows, "lossAverage")[-1] < column(rows, "lossAverage")[0]
    assert algo.async_kwargs["sampler_n_itr"] == 24 and algo.async_kwargs["world_size"] == 1
    assert sampler.init_kwargs["seed"] == 1


def test_eval_runs_in_the_sampler_process_after_the_interval_is_trained_on(tmp_path):
    _, _, sampler, rows = train(tmp_path, AsyncRlEval, algo_kwargs=dict(update_delay=0.002))
    assert column(rows, "Iteration", int) == [0, 7, 15, 23]
    assert column(rows, "CumSteps", int) == [0, 64, 128, 192]
    assert column(rows, "ReturnAverage") == [0.5, 7.5, 15.5, 23.5]  # evaluated at itr 0, 7 ...
    assert column(rows, "TrajsInEval", int) == [2, 2, 2, 2]
    updates = column(rows, "CumUpdates", int)
    assert updates[0] == 0 and all(
        abs(u - e) <= 1 for u, e in zip(updates[1:], [20, 52, 84], strict=True)
    )
    assert sampler.record[EVALUATIONS] == 4 and sampler.record[SHUT_DOWN] == 1
    assert all(float(r["CumEvalTime"]) >= 0 for r in rows)


def test_eval_stop_return_ends_the_run_early(tmp_path):
    _, _, sampler, rows = train(tmp_path, AsyncRlEval, stop_return=7.0)
    assert column(rows, "Iteration", int) == [0, 7]
    assert sampler.record[SHUT_DOWN] == 1 and sampler.record[BATCHES] < 24


@pytest.mark.parametrize(
    "sampler_kwargs, algo_kwargs, start_method, expected",
    [
        (
            dict(fail_at=5),
            {},
            "fork",
            r"the sampler process failed:\n(.|\n)*toy sampler failed at 5",
        ),
        (dict(fail_at=5), {}, "spawn", "toy sampler failed at 5"),
        (dict(die_at=5), {}, "fork", r"the sampler process died \(exit code 3\)"),
        ({}, dict(fail_copy_at=4), "fork", r"the memory copier process failed(.|\n)*batch 4"),
        # The sampler dies holding the agent's lock: the optimizer, stuck on it in
        # send_shared_memory, is interrupted by the watchdog.
        (dict(die_holding_lock_at=6), {}, "fork", r"the sampler process died \(exit code 4\)"),
    ],
)
def test_a_failing_child_makes_train_raise_quickly(
    tmp_path, sampler_kwargs, algo_kwargs, start_method, expected
):
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=expected) as failure:
        train(
            tmp_path,
            sampler_kwargs=dict(delay=0.01, **sampler_kwargs),
            algo_kwargs=algo_kwargs,
            start_method=start_method,
        )
    del failure  # (its traceback holds the runner)
    assert time.monotonic() - start < 15


def test_the_watchdog_works_where_ctrl_c_is_ignored(tmp_path):
    """A background job ignores SIGINT: the optimizer stuck on the lock a dead sampler held
    is still freed, and Ctrl-C is ignored again afterwards."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"the sampler process died \(exit code 4\)"):
            train(tmp_path, sampler_kwargs=dict(delay=0.01, die_holding_lock_at=6))
        assert time.monotonic() - start < 15
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_ends_every_process(tmp_path):
    # Ctrl-C as in a terminal, even when the test run ignores SIGINT (a background job).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(
        1.0, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)
    )
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            train(tmp_path, sampler_kwargs=dict(delay=0.2), n_steps=8 * 200)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not (tmp_path / "async" / "progress.csv").exists()  # (stopped before a row)


def test_snapshots_hold_the_agent_and_optimizer_and_a_finished_run_resumes_to_its_end(tmp_path):
    algo, agent, sampler = make_async()
    runner = AsyncRl(algo, agent, sampler, start_method="fork", **RUN)
    with logger_context(tmp_path, 0, "snap", snapshot_mode="last") as run_dir:
        runner.train()
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["itr"] == 23 and checkpoint["cum_steps"] == 192
    assert checkpoint["sampler_state"] is False
    assert checkpoint["runner_state"]["async_opt_calls"] == 84  # (one update a call)
    torch.testing.assert_close(checkpoint["agent_state_dict"]["weight"], agent.model.weight)
    assert "optimizer" in checkpoint["optimizer_state_dict"]
    algo, agent, sampler = make_async()
    runner = AsyncRl(algo, agent, sampler, start_method="fork", **RUN)
    with logger_context(tmp_path, 0, "snap", snapshot_mode="last"):
        runner.resume(run_dir)  # (nothing left to do)
    assert sampler.record[BATCHES] == 0 and len(read_progress(run_dir)) == 3
    torch.testing.assert_close(agent.model.weight, checkpoint["agent_state_dict"]["weight"])


def _stop_with(signum, sampler, after_batches):
    """(thread) Send ``signum`` to this process once the sampler has made some batches."""
    deadline = time.monotonic() + 60
    while sampler.record[BATCHES] < after_batches and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(os.getpid(), signum)


@pytest.mark.parametrize(
    "runner_cls, signum, start_method",
    [(AsyncRl, signal.SIGTERM, "fork"), (AsyncRlEval, signal.SIGUSR1, "spawn")],
)
def test_a_stop_signal_snapshots_and_resume_goes_on_from_there(
    tmp_path, runner_cls, signum, start_method
):
    """SIGTERM or SIGUSR1 mid-run: the runner stops with a snapshot (its children live
    through it), and resume starts the sampler at the snapshot's iteration, its environments
    restarted, the rows going on to the end with none twice."""
    previous = signal.signal(signum, lambda *_: None)  # (a signal too late for the run)
    try:
        algo, agent, sampler = make_async(dict(delay=0.05))
        runner = runner_cls(algo, agent, sampler, **{**RUN, "start_method": start_method})
        stopper = threading.Thread(target=_stop_with, args=(signum, sampler, 10))
        stopper.start()
        with logger_context(tmp_path, 0, "stopped", snapshot_mode="last") as run_dir:
            runner.train()
        stopper.join()
    finally:
        signal.signal(signum, previous)
    assert runner.stopped_by == signal.Signals(signum).name
    checkpoint = load_checkpoint(run_dir)
    done = checkpoint["next_itr"]
    assert 8 <= done < 24 and checkpoint["cum_steps"] == done * 8
    assert sampler.record[SHUT_DOWN] == 1  # (the sampler's process was not killed by it)
    rows = read_progress(run_dir)
    iterations = [7, 15, 23] if runner_cls is AsyncRl else [0, 7, 15, 23]
    assert column(rows, "Iteration", int) == iterations[: len(rows)]

    algo, agent, sampler = make_async()
    runner = runner_cls(algo, agent, sampler, **{**RUN, "start_method": start_method})
    with logger_context(tmp_path, 0, "stopped", snapshot_mode="last"):
        runner.resume(run_dir)
    assert runner.stopped_by is None
    rows = read_progress(run_dir)
    assert column(rows, "Iteration", int) == iterations
    assert column(rows, "CumSteps", int)[-1] == 192
    # The sampler began where the snapshot was; with no replay saved, the replay holds only
    # the batches since, and learning started again once 3 were in.
    assert sampler.record[BATCHES] == 24 - done
    if runner_cls is AsyncRlEval:  # (no evaluation before the first batch of a resume)
        assert sampler.record[EVALUATIONS] == sum(1 for b in (8, 16, 24) if b > done)
    count = int(algo.replay_buffer.count[0])
    np.testing.assert_array_equal(algo.replay_buffer.order[:count], np.arange(done, 24))
    assert algo.record and all(
        in_replay >= 3 and sampler_itr >= done + 2 for _, in_replay, sampler_itr in algo.record
    )
    assert algo.update_counter > checkpoint["cum_updates"]
    log = (run_dir / "debug.log").read_text()
    assert f"Resumed from {run_dir / 'params.pt'} after {done} iterations." in log
    assert log.count("The environments restart") == 1


def test_a_childs_child_process_error_is_raised_as_it_is(tmp_path):
    """A ChildProcessError in the sampler's process (rl-samplers' WorkerError: a worker
    died) is raised here as it is, one line, not as a traceback."""
    with pytest.raises(ChildProcessError) as caught:
        train(tmp_path, sampler_kwargs=dict(delay=0.01, worker_dies_at=5))
    assert type(caught.value).__name__ == "ToyWorkerError"
    assert str(caught.value) == "toy sampler worker 1 (pid 12345) was killed by SIGKILL at 5"


KILLED = """
import sys
sys.path.insert(0, {tests!r})
from rl_runners_toys import make_async
from rl_runners import AsyncRl, logger_context
if __name__ == "__main__":
    algo, agent, sampler = make_async(dict(delay=0.02))
    runner = AsyncRl(algo, agent, sampler, n_steps=8 * 10_000, log_interval_steps=64, seed=1,
                     start_method={method!r})
    with logger_context({log_dir!r}, 0, "killed", snapshot_mode="last"):
        runner.train()
"""


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_killed_process_group_leaves_nothing_in_dev_shm(tmp_path, start_method):
    """``kill -9`` of the whole group (a scheduler's cgroup kill) mid-run: no process of the
    run had a named semaphore or shared-memory file open (the control block's pipes and
    counters have no name), so nothing is left in /dev/shm."""
    script = tmp_path / "run.py"
    tests = os.path.dirname(os.path.abspath(__file__))
    script.write_text(KILLED.format(tests=tests, method=start_method, log_dir=str(tmp_path)))
    run = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.DEVNULL, start_new_session=True
    )
    progress = tmp_path / "run_0" / "progress.csv"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            progress.exists() and len(progress.read_text().splitlines()) >= 2
        ):
            time.sleep(0.05)
        assert run.poll() is None and len(progress.read_text().splitlines()) >= 2
        processes = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
        assert len(processes) >= 3  # the main process, the sampler's and the copier
        named = []
        for process in processes:
            with open(f"/proc/{process.pid}/maps") as maps:
                named += [
                    line.split(None, 5)[-1]
                    for line in maps
                    if "/dev/shm/sem." in line
                    or ("/dev/shm/" in line and not line.rstrip().endswith("(deleted)"))
                ]
        assert named == []
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.wait(10)


def test_bad_arguments_are_refused_before_any_work():
    algo, agent, sampler = make_async()
    with pytest.raises(ValueError, match="one entry"):
        AsyncRl(algo, agent, sampler, affinity={"optimizer": [{}, {}]}, **RUN)
    with pytest.raises(ValueError, match="affinity must be"):
        AsyncRl(algo, agent, sampler, affinity={"master_cpus": [0]}, **RUN)
    with pytest.raises(ValueError, match="max_sampler_lead"):
        AsyncRl(algo, agent, sampler, max_sampler_lead=0, **RUN)
    with pytest.raises(ValueError, match="start_method"):
        AsyncRl(algo, agent, sampler, start_method="teleport", **RUN)
    with pytest.raises(TypeError, match="async_initialize"):
        AsyncRl(algo, agent, StatelessToySampler(), **RUN)
    with pytest.raises(TypeError, match="AsyncAlgoProtocol"):
        AsyncRl(ToyAlgo(), agent, sampler, **RUN)
    algo.replay_ratio = 0
    with pytest.raises(ValueError, match="replay_ratio"):
        AsyncRl(algo, agent, sampler, **RUN)
    algo, agent, sampler = make_async(dict(eval_n_envs=0))
    with pytest.raises(ValueError, match="eval_n_envs"):
        AsyncRlEval(algo, agent, sampler, **RUN)
    assert mp.active_children() == []


def test_start_method_default_avoids_fork_in_a_threaded_process():
    runner = AsyncRl(*make_async(), **RUN)
    assert runner.start_method_used() in mp.get_all_start_methods()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        if (mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0]) == "fork":
            assert runner.start_method_used() == "spawn"
    finally:
        stop.set()
        thread.join()
    assert AsyncRl(*make_async(), start_method="forkserver", **RUN).start_method_used() == (
        "forkserver"
    )
