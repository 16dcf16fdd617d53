"""Asynchronous parameter sharing between two processes, under every start method."""

import multiprocessing as mp
import os
import pickle
import threading

import pytest
import rl_agents_mp_children as children
import torch
from rl_agents_testkit import MUJOCO_SPACES

import rl_agents as ra

TIMEOUT = 60


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_sampler_process_sees_parameters_only_once_sent(method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    ctx = mp.get_context(method)
    torch.manual_seed(0)
    trainer = ra.MujocoFfAgent(model_kwargs=dict(hidden_sizes=[16], normalize_observation=True))
    trainer.initialize(MUJOCO_SPACES, share_memory=True)
    original = {k: v.tolist() for k, v in trainer.state_dict().items()}
    changed, sent, results = ctx.Event(), ctx.Event(), ctx.Queue()
    process = ctx.Process(
        target=children.receive_parameters, args=(trainer, changed, sent, results)
    )
    process.start()
    try:
        stage, start = results.get(timeout=TIMEOUT)
        assert stage == "start"
        assert start == original

        # Train in place on the shared model (a CPU trainer): the sampler's own model is
        # untouched until the update is sent.
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(1.0)
        trainer.update_obs_rms(torch.randn(32, 5) + 4.0)
        changed.set()
        stage, unchanged = results.get(timeout=TIMEOUT)
        assert stage == "changed"
        assert unchanged == original

        trainer.send_shared_memory()
        sent.set()
        stage, received = results.get(timeout=TIMEOUT)
        assert stage == "sent"
        assert received == {k: v.tolist() for k, v in trainer.state_dict().items()}
        assert received != original and received["obs_rms.count"] == 32
    finally:
        process.join(TIMEOUT)
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0


def named_semaphores():
    """The named semaphores this process has open (each mapped from /dev/shm): inodes."""
    with open("/proc/self/maps") as f:
        return {line.split()[4] for line in f if "/dev/shm/sem." in line}


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux's /proc")
@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_the_lock_excludes_across_processes_and_has_no_name(method):
    """The lock over the shared model is a pipe: a child holding it keeps the trainer's
    send_shared_memory waiting, and no semaphore with a name in /dev/shm is made (a kill -9
    of the whole group would leave it there)."""
    before = named_semaphores()
    trainer = ra.MujocoFfAgent(model_kwargs=dict(hidden_sizes=[8]))
    trainer.initialize(MUJOCO_SPACES, share_memory=True)
    ctx = mp.get_context(method)
    here, there = ctx.Pipe()
    process = ctx.Process(target=children.hold_the_lock, args=(trainer, there))
    process.start()
    try:
        assert here.poll(TIMEOUT) and here.recv() == "held"
        sender = threading.Thread(target=trainer.send_shared_memory)
        sender.start()
        sender.join(0.3)
        assert sender.is_alive() and int(trainer._send_count) == 0  # waiting for the lock
        here.send("release")
        sender.join(TIMEOUT)
        assert not sender.is_alive() and int(trainer._send_count) == 1
    finally:
        process.join(TIMEOUT)
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0
    assert named_semaphores() == before
    with pytest.raises(RuntimeError, match="inheritance"):  # (to children only, as a lock)
        pickle.dumps(trainer._rw_lock)
