"""Async buffers: a writer process and a reader process see each other's data."""

import multiprocessing as mp
import os
import threading
import time

import numpy as np
import pytest
import rl_replay_mp_children as children
from replay_world import World, decode

from rl_arrays import np_mp_array
from rl_replay import (
    AsyncPrioritizedReplayBuffer,
    AsyncPrioritizedSequenceReplayFrameBuffer,
    AsyncUniformReplayFrameBuffer,
    RWLock,
)

TIMEOUT = 60


@pytest.fixture(params=["fork", "spawn"])
def ctx(request):
    return mp.get_context(request.param)


def _run(ctx, target, *args):
    process = ctx.Process(target=target, args=args)
    process.start()
    return process


@pytest.mark.parametrize("cls", [AsyncUniformReplayFrameBuffer, AsyncPrioritizedReplayBuffer])
def test_writer_and_reader_processes_share_the_buffer(ctx, cls):
    world = World(B=2, n_frames=3 if "Frame" in cls.__name__ else 0, seed=1)
    buffer = cls(world.example(), 60, 2, discount=0.9, n_step_return=2, seed=1)
    chunks = [world.chunk(4) for _ in range(5)]
    queue = ctx.Queue()
    writer = _run(ctx, children.append_chunks, buffer, chunks, queue)
    assert queue.get(timeout=TIMEOUT) == 20
    writer.join(TIMEOUT)
    assert buffer.t_total == 20  # the parent sees the child's writes and cursor
    reader = _run(ctx, children.sample_from, buffer, 8, queue)
    seen, observation, return_ = queue.get(timeout=TIMEOUT)
    reader.join(TIMEOUT)
    assert seen == 20 and writer.exitcode == 0 and reader.exitcode == 0
    for i, obs in enumerate(observation):
        a, b = decode(obs)
        assert 1 <= a <= 17
        np.testing.assert_array_equal(obs, world.observation(a, b))
        assert return_[i] == pytest.approx(world.n_step(a, b, 2, 0.9)[0], rel=1e-5)
    buffer.append_samples(world.chunk(4))  # and the parent can go on writing
    assert buffer.t_total == 24


def test_async_sequence_buffer_in_a_child(ctx):
    world = World(B=1, n_frames=2, rnn=True, seed=2)
    buffer = AsyncPrioritizedSequenceReplayFrameBuffer(
        world.example(), 40, 1, rnn_state_interval=2, batch_T=3, seed=2
    )
    queue = ctx.Queue()
    writer = _run(ctx, children.append_chunks, buffer, [world.chunk(4) for _ in range(4)], queue)
    assert queue.get(timeout=TIMEOUT) == 16
    writer.join(TIMEOUT)
    batch = buffer.sample_batch(4)
    for j in range(4):
        a, _ = decode(batch.all_observation[0, j])
        assert a % 2 == 0 and a + 3 <= 15


def test_rw_lock_readers_share_writers_exclude():
    lock = RWLock()
    events = []
    with lock.read_lock(), lock.read_lock():  # readers share (also re-entrant)
        events.append("two readers")

    def writer():
        with lock.write_lock():
            events.append("writer")

    with lock.read_lock():
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(0.2)
        events.append("reader done")
    thread.join(5)
    assert events == ["two readers", "reader done", "writer"]


def named_semaphores():
    """The named semaphores this process has open (each is mapped from /dev/shm): inodes."""
    with open("/proc/self/maps") as f:
        return {line.split()[4] for line in f if "/dev/shm/sem." in line}


@pytest.mark.skipif(
    not (os.path.exists("/proc/self/maps") and os.confstr("CS_GNU_LIBC_VERSION")),
    reason="semaphores on anonymous shared memory: Linux with glibc",
)
def test_rw_lock_excludes_across_processes_and_names_nothing(ctx):
    """A writer in a child keeps a reader here waiting; no semaphore with a name in /dev/shm
    (one would be left there if the processes were killed)."""
    before = named_semaphores()
    lock, flag = RWLock(), np_mp_array(1, np.int64)
    here, there = ctx.Pipe()
    writer = _run(ctx, children.hold_write_lock, lock, flag, there)
    assert here.poll(TIMEOUT) and here.recv() == "held"
    with lock.read_lock():
        assert flag[0] == 1  # the writer was done before the reader got in
    writer.join(TIMEOUT)
    assert writer.exitcode == 0
    assert named_semaphores() == before
