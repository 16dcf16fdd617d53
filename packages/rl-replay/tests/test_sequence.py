"""Sequence buffers against the reference world: every returned sequence is whole, valid,
starts at a stored rnn state, and matches the world step by step."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_world import World, decode

from rl_arrays import namedarraytuple
from rl_replay import (
    AsyncPrioritizedSequenceReplayBuffer,
    AsyncPrioritizedSequenceReplayFrameBuffer,
    AsyncUniformSequenceReplayBuffer,
    AsyncUniformSequenceReplayFrameBuffer,
    PrioritiesSamplesToBuffer,
    PrioritizedSequenceReplayBuffer,
    PrioritizedSequenceReplayFrameBuffer,
    SamplesToBufferRnn,
    UniformSequenceReplayBuffer,
    UniformSequenceReplayFrameBuffer,
)

DISCOUNT = 0.95
RnnState = namedarraytuple("RnnState", ["h", "c"])


def check_sequences(batch, world, buffer, batch_T):
    n, f, interval = buffer.n_step_return, buffer.off_forward, buffer.rnn_state_interval
    oldest = max(0, world.W - buffer.T)
    L = batch_T + n
    assert batch.all_observation.shape[:2] == (L, len(batch.return_[0]))
    assert batch.return_.shape[0] == batch_T and batch.action.shape == batch.done.shape
    for j in range(batch.all_observation.shape[1]):
        a, b = decode(batch.all_observation[0, j])
        assert oldest + f <= a and a + L - 1 <= world.W - 1, "sequence crosses invalid data"
        if interval > 1:
            assert a % interval == 0, "sequence does not start at a stored rnn state"
        if interval >= 1:
            np.testing.assert_array_equal(batch.init_rnn_state[j], world.rnn_state(a, b))
        else:
            assert batch.init_rnn_state is None
        for i in range(L):
            np.testing.assert_array_equal(batch.all_observation[i, j], world.observation(a + i, b))
            assert batch.all_action[i, j] == world.previous(world.action, a + i, b)
            assert batch.all_reward[i, j] == world.previous(world.reward, a + i, b)
        for i in range(batch_T):
            assert batch.action[i, j] == world.action[a + i, b]
            return_, done_n, _ = world.n_step(a + i, b, n, DISCOUNT)
            assert batch.return_[i, j] == pytest.approx(return_, rel=1e-5, abs=1e-5)
            assert batch.done[i, j] == world.done[a + i, b] and batch.done_n[i, j] == done_n


@st.composite
def setups(draw):
    B = draw(st.integers(1, 3))
    n_frames = draw(st.sampled_from([0, 1, 2, 4]))
    interval = draw(st.integers(0, 3))
    n = draw(st.integers(1, 3))
    batch_T = draw(st.integers(1, 5))
    T = draw(st.integers(batch_T + n + max(1, n_frames - 1) + 1, 40))
    unit = max(interval, 1)
    chunks = draw(st.lists(st.integers(1, max(1, T // unit)).map(lambda k: k * unit), max_size=10))
    batch_B = draw(st.integers(1, 8))
    return B, n_frames, interval, n, batch_T, T, chunks, batch_B


def starts_remain_once_full(T, n_frames, interval, n, batch_T):
    """Brute force: with the buffer full and its cursor at a stored rnn state, can any
    sequence start at a stored state and end before the cursor?"""
    unit = max(interval, 1)
    T = math.ceil(T / unit) * unit  # (the buffer rounds its length to whole intervals)
    oldest_valid, cursor = 10 * T - T + max(1, n_frames - 1), 10 * T
    starts = range(oldest_valid, cursor - batch_T - n + 1)
    return any(s % unit == 0 for s in starts)


def run(setup, seed, prioritized):
    B, n_frames, interval, n, batch_T, T, chunks, batch_B = setup
    world = World(B, n_frames, done_prob=0.15, rnn=interval > 0, seed=seed)
    example = world.example()
    if prioritized:
        cls = PrioritizedSequenceReplayFrameBuffer if n_frames else PrioritizedSequenceReplayBuffer
        if not starts_remain_once_full(T, n_frames, interval, n, batch_T):
            with pytest.raises(ValueError, match="no sequence start"):
                cls(example, T * B, B, interval, batch_T, n_step_return=n)
            return
    else:
        cls = UniformSequenceReplayFrameBuffer if n_frames else UniformSequenceReplayBuffer
    buffer = cls(
        example, T * B, B, interval, batch_T, discount=DISCOUNT, n_step_return=n, seed=seed
    )
    for T_new in chunks:
        T_new = min(T_new, buffer.T)
        buffer.append_samples(world.chunk(T_new))
        n_valid, _ = buffer._valid_starts(buffer._off_backward(batch_T), max(interval, 1))
        if n_valid == 0 or batch_B > n_valid * B:
            with pytest.raises(ValueError, match=r"not enough data|larger than"):
                buffer.sample_batch(batch_B)
            continue
        batch = buffer.sample_batch(batch_B)
        check_sequences(batch, world, buffer, batch_T)
        if prioritized:
            buffer.update_batch_priorities(world.rng.random(batch_B) + 0.01)


@settings(max_examples=60, deadline=None)
@given(setup=setups(), seed=st.integers(0, 2**16))
def test_uniform_sequences_are_whole_and_valid(setup, seed):
    run(setup, seed, prioritized=False)


@settings(max_examples=60, deadline=None)
@given(setup=setups(), seed=st.integers(0, 2**16))
def test_prioritized_sequences_are_whole_and_valid(setup, seed):
    run(setup, seed, prioritized=True)


def test_rnn_states_are_stored_once_per_interval():
    world = World(B=2, rnn=True, seed=1)
    buffer = UniformSequenceReplayBuffer(world.example(), 80, 2, rnn_state_interval=4, batch_T=3)
    assert buffer.samples.prev_rnn_state is None
    assert buffer.samples_prev_rnn_state.shape == (10, 2, 2)
    buffer.append_samples(world.chunk(6))  # steps 0..5: states of steps 0 and 4 kept
    np.testing.assert_array_equal(buffer.samples_prev_rnn_state[:2, 1], [[1, 2], [5, 2]])


def test_input_priorities_shift_to_the_sequence_start():
    """R2D1's scheme: priorities computed on a batch go to the start of its warm-up."""
    world = World(B=1, done_prob=0.0, rnn=True, seed=2)
    buffer = PrioritizedSequenceReplayBuffer(
        world.example(),
        40,
        1,
        rnn_state_interval=2,
        batch_T=4,
        input_priorities=True,
        input_priority_shift=1,
        alpha=1.0,
    )
    for k in range(6):
        buffer.append_samples(PrioritiesSamplesToBuffer(np.array([k + 1.0]), world.chunk(2)))
    leaves = buffer.priorities.tree.leaf_priorities()[:, 0]
    # 12 steps written: a sequence of 4 + 1 steps, with its previous step, fits at starts
    # 2, 4 and 6 (states 1, 2, 3); append k's priority k + 1 went to state k - 1.
    np.testing.assert_array_equal(leaves[:5], [0, 3, 4, 5, 0])
    assert leaves.sum() == 12


def test_sequence_errors():
    world = World(B=2, rnn=True, seed=3)
    with pytest.raises(ValueError, match="needs batch_T"):
        PrioritizedSequenceReplayBuffer(world.example(), 40, 2, 2, None)
    buffer = PrioritizedSequenceReplayBuffer(world.example(), 40, 2, 2, 3)
    with pytest.raises(ValueError, match="whole rnn-state intervals"):
        buffer.append_samples(world.chunk(3))
    assert buffer.t_total == 0  # refused before writing
    with pytest.raises(ValueError, match="prev_rnn_state"):
        UniformSequenceReplayBuffer(World(B=1).example(), 40, 1, 2)
    uniform = UniformSequenceReplayBuffer(world.example(), 40, 2, 1)
    with pytest.raises(ValueError, match="give batch_T"):
        uniform.sample_batch(2)
    with pytest.raises(ValueError, match="does not fit"):
        uniform.sample_batch(2, batch_T=20)


def test_save_and_load_keep_rnn_states_and_priorities(tmp_path):
    world = World(B=2, n_frames=2, rnn=True, seed=7)
    chunks = [world.chunk(4) for _ in range(8)]

    def make(seed):
        return PrioritizedSequenceReplayFrameBuffer(
            world.example(), 48, 2, rnn_state_interval=2, batch_T=3, seed=seed
        )

    original = make(7)
    for chunk in chunks[:5]:
        original.append_samples(chunk)
    original.sample_batch(4)
    original.update_batch_priorities([0.5, 2.0, 3.0, 0.1])
    original.save(tmp_path / "r2d1.npz")
    restored = make(99)
    restored.load(tmp_path / "r2d1.npz")
    for chunk in chunks[5:]:
        for buffer in (original, restored):
            buffer.append_samples(chunk)
        a, b = original.sample_batch(4), restored.sample_batch(4)
        np.testing.assert_array_equal(a.all_observation, b.all_observation)
        np.testing.assert_array_equal(a.init_rnn_state, b.init_rnn_state)
        np.testing.assert_array_equal(a.is_weights, b.is_weights)


def test_action_is_the_one_taken_even_at_an_episode_last_step():
    T, B, batch_T = 12, 2, 6
    action = np.arange(1, T * B + 1).reshape(T, B)  # no action is 0
    done = np.zeros((T, B), bool)
    done[4, 0] = done[7, 1] = True
    samples = SamplesToBufferRnn(
        observation=np.stack(np.meshgrid(np.arange(T), np.arange(B), indexing="ij"), -1),
        action=action,
        reward=np.ones((T, B), np.float32),
        done=done,
        prev_rnn_state=np.zeros((T, B, 1), np.float32),
    )
    buffer = UniformSequenceReplayBuffer(samples[0, 0], T * B, B, 1, batch_T, seed=0)
    buffer.append_samples(samples)
    T_idxs, B_idxs = (x.ravel() for x in np.meshgrid(np.arange(1, 6), np.arange(B)))
    batch = buffer.extract_batch(T_idxs, B_idxs, batch_T)  # every valid start
    for j, (a, b) in enumerate(batch.all_observation[0]):
        np.testing.assert_array_equal(batch.action[:, j], action[a : a + batch_T, b])
    ended, next_prev_action = batch.done, batch.all_action[1 : batch_T + 1]
    assert ended.any()
    assert (batch.action[ended] != 0).all() and (next_prev_action[ended] == 0).all()
    np.testing.assert_array_equal(batch.action[~ended], next_prev_action[~ended])


def assert_same(a, b):
    """Two (nested) batches hold equal arrays, field by field."""
    if isinstance(a, tuple):
        assert a._fields == b._fields
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("interval", [0, 1, 4])
@pytest.mark.parametrize(
    "cls",
    [
        UniformSequenceReplayBuffer,
        PrioritizedSequenceReplayBuffer,
        UniformSequenceReplayFrameBuffer,
        PrioritizedSequenceReplayFrameBuffer,
        AsyncUniformSequenceReplayBuffer,
        AsyncPrioritizedSequenceReplayBuffer,
        AsyncUniformSequenceReplayFrameBuffer,
        AsyncPrioritizedSequenceReplayFrameBuffer,
    ],
)
def test_state_dict_round_trip_with_rnn_state_tuples(tmp_path, cls, interval):
    """An rnn state like an LSTM's (h, c) saves and loads at any storing interval."""
    world = World(B=2, n_frames=2 if cls.frame_based else 0, rnn=True, seed=interval)

    def with_tuple_state(samples):
        state = samples.prev_rnn_state
        return samples._replace(prev_rnn_state=RnnState(h=state, c=-state))

    chunks = [with_tuple_state(world.chunk(4)) for _ in range(6)]
    example = with_tuple_state(world.example())

    def make(seed):
        return cls(example, 48, 2, interval, 3, discount=DISCOUNT, n_step_return=2, seed=seed)

    original = make(1)
    for chunk in chunks[:4]:
        original.append_samples(chunk)
    if original.prioritized:
        original.sample_batch(4)
        original.update_batch_priorities([0.5, 2.0, 3.0, 0.1])
    original.save(tmp_path / "replay.npz")
    from_file, from_dict = make(2), make(3)
    from_file.load(tmp_path / "replay.npz")
    from_dict.load_state_dict(original.state_dict())
    for chunk in [None, *chunks[4:]]:
        for buffer in (original, from_file, from_dict):
            if chunk is not None:
                buffer.append_samples(chunk)
        batch = original.sample_batch(4)
        if interval:
            assert isinstance(batch.init_rnn_state, RnnState)
        assert_same(from_file.sample_batch(4), batch)
        assert_same(from_dict.sample_batch(4), batch)
