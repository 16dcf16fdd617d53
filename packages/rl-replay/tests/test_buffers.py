"""Single-transition buffers against the reference world: what they return is always a
valid transition, with the right returns, histories and targets."""

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_world import World, decode

from rl_replay import (
    PrioritiesSamplesToBuffer,
    PrioritizedReplayBuffer,
    PrioritizedReplayFrameBuffer,
    ReplayBuffer,
    SamplesToBuffer,
    TlPrioritizedReplayBuffer,
    TlUniformReplayBuffer,
    UniformReplayBuffer,
    UniformReplayFrameBuffer,
)

DISCOUNT = 0.9


@pytest.fixture(params=["numpy", "torch"], autouse=True)
def gather_backend(request, monkeypatch):
    """Frames are gathered by torch when the program has loaded it, else by numpy: test both."""
    if request.param == "torch":
        pytest.importorskip("torch")
    else:
        monkeypatch.delitem(sys.modules, "torch", raising=False)
    return request.param


def check_batch(batch, world, buffer):
    """Every transition valid and consistent with the world."""
    n, f = buffer.n_step_return, buffer.off_forward
    oldest = max(0, world.W - buffer.T)
    for i in range(len(batch.action)):
        a, b = decode(batch.agent_inputs.observation[i])
        assert oldest + f <= a, "history or previous action overwritten"
        assert a + n <= world.W - 1, "target not written yet"
        np.testing.assert_array_equal(batch.agent_inputs.observation[i], world.observation(a, b))
        assert batch.action[i] == world.action[a, b]
        assert batch.agent_inputs.prev_action[i] == world.previous(world.action, a, b)
        assert batch.agent_inputs.prev_reward[i] == world.previous(world.reward, a, b)
        return_, done_n, timeout_n = world.n_step(a, b, n, DISCOUNT)
        assert batch.return_[i] == pytest.approx(return_, rel=1e-5, abs=1e-5)
        assert batch.done[i] == world.done[a, b] and batch.done_n[i] == done_n
        target = batch.target_inputs
        np.testing.assert_array_equal(target.observation[i], world.observation(a + n, b))
        assert target.prev_action[i] == world.previous(world.action, a + n, b)
        if buffer.time_limit:
            assert batch.timeout[i] == world.timeout[a, b] and batch.timeout_n[i] == timeout_n


def expected_valid(buffer, world):
    return (min(world.W, buffer.T) - buffer.n_step_return - buffer.off_forward) * buffer.B


@st.composite
def setups(draw, frames=None):
    B = draw(st.integers(1, 3))
    n_frames = draw(st.integers(1, 4)) if frames else 0
    n = draw(st.integers(1, 4))
    T = draw(st.integers(max(1, n_frames - 1) + n + 1, 30))
    chunks = draw(st.lists(st.integers(1, T), min_size=1, max_size=12))
    batch_B = draw(st.integers(1, 12))
    done_prob = draw(st.sampled_from([0.0, 0.2, 0.6]))
    return B, n_frames, n, T, chunks, batch_B, done_prob


def run(cls, setup, seed, timeout_prob=0.0, **kwargs):
    B, n_frames, n, T, chunks, batch_B, done_prob = setup
    world = World(B, n_frames, done_prob, timeout_prob, seed=seed)
    buffer = cls(world.example(), T * B, B, DISCOUNT, n, seed=seed, **kwargs)
    for T_new in chunks:
        buffer.append_samples(world.chunk(T_new))
        valid = expected_valid(buffer, world)
        if valid < 1 or batch_B > valid:
            with pytest.raises(ValueError, match=r"not enough data|larger than"):
                buffer.sample_batch(batch_B)
            continue
        batch = buffer.sample_batch(batch_B)
        check_batch(batch, world, buffer)
        if buffer.prioritized:
            assert batch.is_weights.max() == pytest.approx(1.0)
            buffer.update_batch_priorities(world.rng.random(batch_B) + 0.01)
    return buffer, world


SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(setup=setups(), seed=st.integers(0, 2**16))
def test_uniform_never_returns_an_invalid_transition(setup, seed):
    run(UniformReplayBuffer, setup, seed)


@SETTINGS
@given(setup=setups(frames=True), seed=st.integers(0, 2**16))
def test_uniform_frames_rebuild_histories(setup, seed):
    buffer, _ = run(UniformReplayFrameBuffer, setup, seed)
    assert buffer.samples.observation is None  # frames are stored once, apart


@SETTINGS
@given(setup=setups(), seed=st.integers(0, 2**16))
def test_prioritized_never_returns_an_invalid_transition(setup, seed):
    run(PrioritizedReplayBuffer, setup, seed)


@SETTINGS
@given(setup=setups(frames=True), seed=st.integers(0, 2**16), unique=st.booleans())
def test_prioritized_frames(setup, seed, unique):
    run(PrioritizedReplayFrameBuffer, setup, seed, unique=unique)


@SETTINGS
@given(setup=setups(), seed=st.integers(0, 2**16))
def test_time_limit_buffers_carry_timeouts(setup, seed):
    run(TlUniformReplayBuffer, setup, seed, timeout_prob=0.5)
    run(TlPrioritizedReplayBuffer, setup, seed, timeout_prob=0.5)


@SETTINGS
@given(setup=setups(frames=True), seed=st.integers(0, 2**16), prioritized=st.booleans())
def test_frames_with_time_limits(setup, seed, prioritized):
    """A combination of options that had no class before the options."""
    options = dict(frame_based=True, time_limit=True, prioritized=prioritized)
    buffer, _ = run(ReplayBuffer, setup, seed, timeout_prob=0.5, **options)
    assert buffer.samples.observation is None


@SETTINGS
@given(
    setup=setups(frames=None),
    frames=st.booleans(),
    n_batches=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_sample_batches_never_returns_an_invalid_transition(setup, frames, n_batches, seed):
    B, _, n, T, chunks, batch_B, done_prob = setup
    n_frames = 3 if frames else 0
    T = max(T, n_frames + n + 1)
    world = World(B, n_frames, done_prob, timeout_prob=0.0 if frames else 0.5, seed=seed)
    cls = UniformReplayFrameBuffer if frames else TlUniformReplayBuffer
    buffer = cls(world.example(), T * B, B, DISCOUNT, n, seed=seed)
    for T_new in chunks:
        buffer.append_samples(world.chunk(min(T_new, T)))
        valid = expected_valid(buffer, world)
        if valid < 1 or batch_B > valid:  # checked per batch, as sample_batch does
            with pytest.raises(ValueError, match=r"not enough data|larger than"):
                buffer.sample_batches(batch_B, n_batches)
            continue
        batches = buffer.sample_batches(batch_B, n_batches)
        assert len(batches.action) == n_batches * batch_B
        check_batch(batches, world, buffer)


def test_sample_batches_draw_uniformly_and_one_batch_as_sample_batch():
    world = World(B=2, done_prob=0.2, seed=0)
    buffers = [UniformReplayBuffer(world.example(), 40, 2, DISCOUNT, 2, seed=3) for _ in "ab"]
    for T_new in (15, 12):  # wraps: the oldest valid slot is no longer slot 0
        samples = world.chunk(T_new)
        for buffer in buffers:
            buffer.append_samples(samples)
    one, many = buffers
    np.testing.assert_array_equal(
        one.sample_batch(5).agent_inputs.observation,
        many.sample_batches(5, 1).agent_inputs.observation,
    )
    batches = many.sample_batches(8, 2_500)  # 20,000 transitions
    steps = np.array([decode(o) for o in batches.agent_inputs.observation])
    counts = np.zeros((world.W, 2), int)
    np.add.at(counts, (steps[:, 0], steps[:, 1]), 1)
    valid = np.zeros_like(counts, bool)
    oldest = world.W - many.T
    valid[oldest + many.off_forward : world.W - many.n_step_return] = True
    assert valid.sum() == expected_valid(many, world)
    assert counts[~valid].sum() == 0
    expected = len(steps) / valid.sum()
    assert np.abs(counts[valid] - expected).max() < 5 * np.sqrt(expected)  # ~5 sigma


def test_sample_batches_refuses_a_bad_count():
    world = World(B=1, seed=0)
    buffer = UniformReplayBuffer(world.example(), 10, 1)
    buffer.append_samples(world.chunk(6))
    for n_batches in (0, -1, 1.5):
        with pytest.raises(ValueError, match="n_batches"):
            buffer.sample_batches(2, n_batches)


def test_frames_are_stored_once():
    world = World(B=8, n_frames=4, seed=1)
    plain = UniformReplayBuffer(world.example(), 8000, 8)
    framed = UniformReplayFrameBuffer(world.example(), 8000, 8)
    assert framed.samples_frames.nbytes * 4 == pytest.approx(
        plain.samples.observation.nbytes, rel=0.01
    )


def test_a_frame_buffer_refuses_observations_that_are_not_stacked_frames():
    """Colour channels [3, H, W] look like 3 stacked frames; keeping only the last would lose
    the other two, so the first append checks that consecutive steps share frames."""
    world = World(B=2, n_frames=3, seed=1)
    chunk = world.chunk(6)
    buffer = UniformReplayFrameBuffer(world.example(), 64, 2)
    rgb = np.random.default_rng(0).integers(0, 255, chunk.observation.shape, dtype=np.uint8)
    with pytest.raises(ValueError, match=r"not stacked frames.*frame_based=False"):
        buffer.append_samples(chunk._replace(observation=rgb))
    buffer.append_samples(chunk)  # the world's real frame stacks


def test_a_buffer_that_cannot_fit_is_refused_before_allocation(monkeypatch):
    world = World(B=8, n_frames=4, seed=1)
    monkeypatch.setattr("rl_arrays._memory.available_memory", lambda: 10**6)
    with pytest.raises(MemoryError, match=r"size=80000 needs 3.4 MiB .* size <= \d+ would fit"):
        UniformReplayBuffer(world.example(), 80_000, 8)
    step = UniformReplayFrameBuffer(world.example(), 80, 8).samples_frames[0, 0].nbytes
    fits = 10**6 // (step + 8 + 4 + 1)  # a frame, the action, reward and done of a step
    UniformReplayFrameBuffer(world.example(), fits - fits % 8, 8)
    with pytest.raises(MemoryError):
        UniformReplayFrameBuffer(world.example(), fits + 8, 8)


def test_prioritized_sampling_follows_priorities():
    """Transitions come back in proportion to priority ** alpha (chi-square, fixed seed)."""
    world = World(B=2, done_prob=0.0, seed=3)
    alpha = 0.7
    buffer = PrioritizedReplayBuffer(
        world.example(), 40, 2, alpha=alpha, input_priorities=True, seed=3
    )
    priorities = 1.0 + np.arange(20)[:, None] + 20.0 * np.arange(2)[None, :]  # p(a, b)
    buffer.append_samples(PrioritiesSamplesToBuffer(priorities, world.chunk(20)))
    valid = [(a, b) for a in range(1, 19) for b in range(2)]  # not 0 (no previous), not 19
    counts = dict.fromkeys(valid, 0)
    for _ in range(1000):
        batch = buffer.sample_batch(36)
        for observation in batch.agent_inputs.observation:
            counts[decode(observation)] += 1  # a KeyError here is an invalid transition
    weights = np.array([priorities[a, b] ** alpha for a, b in valid])
    expected = weights / weights.sum() * 36_000
    observed = np.array([counts[key] for key in valid])
    chi_square = ((observed - expected) ** 2 / expected).sum()
    assert chi_square < 70  # 35 degrees of freedom: P(chi2 > 70) < 0.0005


def test_input_priorities_and_shift():
    world = World(B=2, done_prob=0.0, seed=4)
    buffer = PrioritizedReplayBuffer(
        world.example(), 40, 2, alpha=1.0, input_priorities=True, input_priority_shift=1, seed=4
    )
    priorities = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    buffer.append_samples(PrioritiesSamplesToBuffer(priorities, world.chunk(4)))
    leaves = buffer.priorities.tree.leaf_priorities()
    # Shifted one step back: step k's priority lands on step k - 1; valid steps are 1 and 2.
    np.testing.assert_array_equal(leaves[1:3], priorities[2:4])
    with pytest.raises(ValueError, match="input_priorities=False"):
        PrioritizedReplayBuffer(world.example(), 40, 2).append_samples(
            PrioritiesSamplesToBuffer(priorities, world.chunk(4))
        )


def test_bad_samples_are_refused_before_anything_is_written():
    world = World(B=2, seed=5)
    buffer = UniformReplayBuffer(world.example(), 40, 2, n_step_return=2)
    good = world.chunk(3)
    with pytest.raises(ValueError, match=r"leading dims \[T, B=2\]"):
        buffer.append_samples(good[:, :1])
    with pytest.raises(ValueError, match="example's fields"):
        buffer.append_samples(good.observation)
    with pytest.raises(ValueError, match="1 to 20 time steps"):
        buffer.append_samples(world.chunk(21))
    assert buffer.t_total == 0
    with pytest.raises(ValueError, match="not enough data to sample yet"):
        buffer.sample_batch(1)
    buffer.append_samples(good)
    buffer.append_samples(world.chunk(3))
    with pytest.raises(ValueError, match="larger than the 6 valid samples"):
        buffer.sample_batch(7)
    with pytest.raises(ValueError, match="batch_B must be a positive integer"):
        buffer.sample_batch(0)


def test_bad_construction_is_refused():
    example = World(B=1).example()
    with pytest.raises(ValueError, match="B must be a positive integer"):
        UniformReplayBuffer(example, 10, 0)
    with pytest.raises(ValueError, match="too few"):
        UniformReplayBuffer(example, 4, 1, n_step_return=3)
    with pytest.raises(ValueError, match="fields"):
        UniformReplayBuffer((1, 2), 10, 1)
    with pytest.raises(ValueError, match="timeout"):
        TlUniformReplayBuffer(example, 10, 1)
    with pytest.raises(ValueError, match=r"observations \[n_frames, \.\.\.\]"):
        UniformReplayFrameBuffer(
            SamplesToBuffer(np.zeros(3), np.int64(0), np.float32(0), False), 10, 1
        )


@pytest.mark.parametrize("cls", [UniformReplayFrameBuffer, PrioritizedReplayFrameBuffer])
def test_save_and_load_resume_exactly(tmp_path, cls):
    world = World(B=2, n_frames=3, seed=6)
    chunks = [world.chunk(5) for _ in range(6)]
    original = cls(world.example(), 40, 2, DISCOUNT, 2, seed=6)
    for chunk in chunks[:4]:
        original.append_samples(chunk)
    original.save(tmp_path / "replay.npz")
    restored = cls(world.example(), 40, 2, DISCOUNT, 2, seed=123)
    restored.load(tmp_path / "replay.npz")
    for chunk in chunks[4:]:
        original.append_samples(chunk)
        restored.append_samples(chunk)
        a, b = original.sample_batch(8), restored.sample_batch(8)
        for x, y in zip(a.agent_inputs, b.agent_inputs, strict=True):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a.return_, b.return_)
    assert [p.name for p in tmp_path.iterdir()] == ["replay.npz"]  # no temporary left
    with pytest.raises(ValueError, match="same arguments"):
        cls(world.example(), 60, 2, DISCOUNT, 2).load(tmp_path / "replay.npz")
