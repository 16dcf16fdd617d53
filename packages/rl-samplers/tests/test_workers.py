"""Parallel sampler workers in trouble, with real processes and signals: a stopped worker
times out by name, a killed one is named in one line, a killed process group leaves no
named semaphore or shared memory behind, workers live through the stop signals a scheduler
sends the whole group, and a seed fixes every sample and episode."""

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import torch
from sampler_toys import CountingEnv, EchoAgent, NoisyAgent, SlowEnv, assert_same

from rl_arrays import buffer_method
from rl_samplers import AlternatingSampler, CpuSampler, GpuSampler
from rl_samplers._worker import COLLECT

CONFIG = dict(batch_T=6, batch_B=4, max_decorrelation_steps=5)
TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(params=["fork", "forkserver", "spawn"])
def start_method(request):
    if request.param not in mp.get_all_start_methods():
        pytest.skip(f"no {request.param} here")
    return request.param


def _gone(pid):
    """Ended and reaped (or a zombie nobody waits for)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(
    ("sampler_cls", "method"),
    [(CpuSampler, "fork"), (CpuSampler, "spawn"), (GpuSampler, "fork")],
)
@pytest.mark.serial  # timed to the second: not beside other tests
def test_a_stopped_worker_times_out_by_name(sampler_cls, method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} here")
    sampler = sampler_cls(CountingEnv, {}, start_method=method, worker_timeout=1.0, **CONFIG)
    sampler.initialize(EchoAgent(), seed=0)
    sampler.obtain_samples(0)
    pid = sampler.workers[1].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            sampler.obtain_samples(1)
        waited = time.monotonic() - began
        message = str(caught.value)
        assert f"sampler-worker-1 (pid {pid}, stopped) did not answer within 1 s" in message
        assert "\n" not in message and "worker_timeout" in message
        assert isinstance(caught.value, ChildProcessError)  # (a WorkerError)
        assert (caught.value.worker, caught.value.pid) == ("sampler-worker-1", pid)
        assert 0.9 < waited < 5
        assert not sampler.workers and not mp.active_children() and _gone(pid)
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("sampler_cls", "method"),
    [(CpuSampler, "fork"), (CpuSampler, "forkserver"), (CpuSampler, "spawn"), (GpuSampler, "fork")],
)
@pytest.mark.serial  # timed to the second: not beside other tests
def test_a_killed_worker_is_named_in_one_line(sampler_cls, method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} here")
    config = dict(CONFIG, batch_T=100)  # a batch of 1 s: killed in the middle of it
    sampler = sampler_cls(SlowEnv, {"delay": 0.01}, start_method=method, **config)
    sampler.initialize(EchoAgent(), seed=0)
    pid = sampler.workers[1].pid
    killed = []
    kill = threading.Timer(
        0.3, lambda: (os.kill(pid, signal.SIGKILL), killed.append(time.monotonic()))
    )
    kill.start()
    with pytest.raises(ChildProcessError) as caught:
        sampler.obtain_samples(0)
    kill.join()
    assert time.monotonic() - killed[0] < 1.5
    message = str(caught.value)
    assert message == f"sampler worker sampler-worker-1 (pid {pid}) was killed by SIGKILL"
    assert not isinstance(caught.value, TimeoutError)
    assert not sampler.workers and not mp.active_children()


def test_a_worker_killed_between_batches_is_named_too():
    sampler = CpuSampler(CountingEnv, {}, **CONFIG)
    sampler.initialize(EchoAgent(), seed=0)
    pid = sampler.workers[0].pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    with pytest.raises(ChildProcessError, match=rf"sampler-worker-0 \(pid {pid}\) was killed"):
        sampler.obtain_samples(0)
    assert not sampler.workers and not mp.active_children()


CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from sampler_toys import CountingEnv, EchoAgent
from rl_samplers import {cls}
if __name__ == "__main__":
    s = {cls}(CountingEnv, {{}}, batch_T=2, batch_B=2, eval_n_envs=2, eval_max_steps=4,
              eval_max_trajectories=1, start_method={method!r})
    s.initialize(EchoAgent(), seed=0)
    s.obtain_samples(0)
    s.evaluate_agent(0)
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("sampler_cls", [CpuSampler, GpuSampler])
def test_a_killed_process_group_leaves_nothing_named(start_method, sampler_cls, tmp_path):
    """What a scheduler's cgroup kill does (``kill -9 -PGID``): no process of the run has
    a named semaphore or shared-memory file open, so none can be left behind."""
    script = tmp_path / "run.py"
    script.write_text(CHILD.format(tests=TESTS, cls=sampler_cls.__name__, method=start_method))
    run = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert run.stdout.readline().strip() == "ready"
        processes = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
        assert len(processes) >= 3  # the main process and its two workers (and any helper)
        named = []
        for process in processes:
            with open(f"/proc/{process.pid}/maps") as maps:
                named += [
                    line.split(None, 5)[-1]
                    for line in maps
                    # (a named semaphore is mapped under the temporary name it was made with,
                    # "(deleted)" once linked to its own: /dev/shm/sem.* is one either way)
                    if "/dev/shm/sem." in line
                    or ("/dev/shm/" in line and not line.rstrip().endswith("(deleted)"))
                ]
        assert named == []
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_gone(p.pid) for p in processes):
        time.sleep(0.05)
    assert all(_gone(p.pid) for p in processes)


SIGNALLED = """
import signal, sys
got = set()  # (what a runner does: the main process handles the stop signals)
if __name__ == "__main__":
    for name in ("SIGTERM", "SIGUSR1"):
        signal.signal(getattr(signal, name), lambda signum, frame: got.add(signum))
    print("listening", flush=True)
sys.path.insert(0, {tests!r})
from sampler_toys import CountingEnv, EchoAgent
from rl_samplers import {cls}
if __name__ == "__main__":
    s = {cls}(CountingEnv, {{}}, batch_T=2, batch_B=2, start_method={method!r})
    s.initialize(EchoAgent(), seed=0)
    print("ready", flush=True)
    sys.stdin.readline()
    s.obtain_samples(0)
    print("sampled", *sorted(signal.Signals(n).name for n in got), flush=True)
    s.shutdown()
"""


@pytest.mark.parametrize("sampler_cls", [CpuSampler, GpuSampler])
def test_workers_live_through_the_stop_signals_sent_to_the_group(
    start_method, sampler_cls, tmp_path
):
    """SIGTERM and SIGUSR1 to the whole process group (a scheduler's preemption), again and
    again from the workers' start on: the main process handles them, the workers go on."""
    if sampler_cls is GpuSampler and start_method != "fork":
        pytest.skip("one start method is enough for the action server")
    script = tmp_path / "run.py"
    script.write_text(SIGNALLED.format(tests=TESTS, cls=sampler_cls.__name__, method=start_method))
    run = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lines == ["listening\n"]  # (the main process's handlers are in place)
        while len(lines) < 2 and run.poll() is None and time.monotonic() < deadline:
            for signum in (signal.SIGTERM, signal.SIGUSR1):
                os.killpg(run.pid, signum)
            time.sleep(0.05)
        assert lines == ["listening\n", "ready\n"]
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            os.killpg(run.pid, signum)
        time.sleep(0.2)
        run.stdin.write("go\n")
        run.stdin.flush()
        assert run.wait(60) == 0
        reader.join(5)
        assert lines == ["listening\n", "ready\n", "sampled SIGTERM SIGUSR1\n"]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def test_shutdown_kills_busy_workers():
    """A worker in the middle of a batch does not hear a request to quit, and ignores
    SIGTERM: shutdown kills it."""
    sampler = CpuSampler(SlowEnv, {"delay": 0.01}, **dict(CONFIG, batch_T=500))
    sampler.initialize(EchoAgent(), seed=0)
    workers = list(sampler.workers)
    sampler.command(COLLECT, 0, 0)  # (a batch of 5 s)
    time.sleep(0.2)
    sampler.shutdown()
    assert [w.exitcode for w in workers] == [-signal.SIGKILL] * len(workers)
    assert not mp.active_children()


def _run(sampler_cls, start_method):
    """Batches and evaluations of a sampler whose agent acts at random."""
    torch.manual_seed(0)  # (what the runner does: the action server's agent draws here)
    sampler = sampler_cls(
        SlowEnv,
        {"delay": 0.0005, "max_len": 9},
        eval_n_envs=3,
        eval_max_steps=300,
        eval_max_trajectories=7,
        start_method=start_method,
        **dict(CONFIG, batch_B=5),
    )
    out = []
    with sampler:
        two_workers = {"workers_cpus": [None, None]}
        sampler.initialize(NoisyAgent(), affinity=two_workers, seed=11, bootstrap_value=True)
        for itr in range(3):
            samples, infos = sampler.obtain_samples(itr)
            out.append((buffer_method(samples, "clone"), infos))
            out.append(sampler.evaluate_agent(itr))
    return out


def _records(infos):
    return [dict(info) for info in infos]


@pytest.mark.parametrize(
    ("sampler_cls", "method"),
    [
        (CpuSampler, "fork"),
        (CpuSampler, "spawn"),
        (GpuSampler, "fork"),
        (AlternatingSampler, "fork"),
    ],
)
def test_the_same_seed_gives_the_same_samples_and_episodes(sampler_cls, method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} here")
    first, second = _run(sampler_cls, method), _run(sampler_cls, method)
    for a, b in zip(first, second, strict=True):
        if isinstance(a, tuple):  # a batch and its completed episodes
            assert_same(a[0], b[0])
            assert _records(a[1]) == _records(b[1]) and a[1]
        else:  # an evaluation: its first 7 episodes
            assert len(a) == 7 and _records(a) == _records(b)


def test_worker_timeout_is_checked():
    for bad in (0, -1.0, float("inf"), "10", True):
        with pytest.raises(ValueError, match="worker_timeout must be seconds > 0"):
            CpuSampler(CountingEnv, {}, worker_timeout=bad, **CONFIG)


FORGOTTEN = """
import sys
sys.path.insert(0, {tests!r})
from sampler_toys import CountingEnv, EchoAgent
from rl_samplers import {cls}
if __name__ == "__main__":
    s = {cls}(CountingEnv, {{}}, batch_T=2, batch_B=2, start_method={method!r})
    s.initialize(EchoAgent(), seed=0)
    s.obtain_samples(0)
    if {fail}:
        raise RuntimeError("the script fails before shutdown()")
"""


@pytest.mark.parametrize("fail", [False, True])
@pytest.mark.parametrize("sampler_cls", [CpuSampler, GpuSampler])
def test_a_script_that_never_shuts_its_sampler_down_still_exits(
    start_method, sampler_cls, fail, tmp_path
):
    """Workers ignore SIGTERM, multiprocessing's way to end daemon children at exit, and it
    then waits for them: the sampler's exit hook kills them first (it hung forever)."""
    script = tmp_path / "forgotten.py"
    code = FORGOTTEN.format(tests=TESTS, cls=sampler_cls.__name__, method=start_method, fail=fail)
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == (1 if fail else 0), run.stderr
