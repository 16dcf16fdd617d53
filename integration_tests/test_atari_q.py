"""The trainer's Atari Q-learning presets (``atari-dqn``, ``atari-catdqn``, ``atari-r2d1``), each
run briefly on Pong: the loss and TD errors stay finite, the frame replay buffer stores one
frame per step and gives back stacked observations of the right shapes, and the observations
it rebuilds from those frames equal the environment's own stacked frames, step by step,
including right after an episode's reset (where the frames from before the reset are zeros).

Each preset keeps its structure (frame buffer, four 104x80 frames, its reward clipping and
episode ends, its algorithm's options) and is made short: a few hundred small iterations,
learning only over the last ones, a small replay buffer that wraps many times, short
evaluations. Pong's games are far longer than such a run, so ``env_kwargs.horizon`` ends
each episode after ``HORIZON`` steps (a timeout is a reset like a game over: the collector
resets the environment, whose frame history restarts from zeros).
"""

import csv
import math

import numpy as np
import pytest
import torch

import rl_suite
from rl_arrays import buffer_method, numpify_buffer, torchify_buffer
from rl_replay import SequenceNStepReturnBuffer

N_FRAMES, FRAME_SHAPE = 4, (104, 80)
HORIZON = 100  # steps per episode, so that every environment resets within the run

# What every preset gets: a short run logged four times, the target network updated every
# few gradient steps, and short evaluations (at the start and the end).
SHORT_RUN = [
    "runner.snapshot_mode='none'",
    f"env_kwargs.horizon={HORIZON}",
    f"sampler.max_decorrelation_steps={HORIZON}",  # the environments reset at different steps
    "sampler.eval_n_envs=1",
    f"sampler.eval_max_steps={HORIZON}",
    "sampler.eval_max_trajectories=1",
    "algo_kwargs.target_update_interval=4",
    "torch_threads=1",
]

# preset: (iterations, of which learning, sampler kind, batch_T, batch_B, its own overrides).
# Learning starts near the end (min_steps_learn), so the run stays short; the replay buffer
# is small, so it wraps many times before.
CASES = {
    # 1 update of 32 transitions per iteration of 2 x 8 steps (replay ratio 2, the preset's 8)
    "atari-dqn": (
        256,
        16,
        "serial",
        2,
        8,
        ["algo_kwargs.replay_size=1024", "algo_kwargs.replay_ratio=2"],
    ),
    "atari-catdqn": (
        256,
        16,
        "cpu",
        2,
        8,
        ["algo_kwargs.replay_size=1024", "algo_kwargs.replay_ratio=2"],
    ),
    # The preset's R2D1 proportions, scaled down: the sampler's batch_T, the burn-in and the
    # rnn-state interval equal (6; the interval must divide the sampler's batch_T with
    # prioritized replay, whose priorities are kept per stored state), training sequences
    # twice as long (12), the preset's 5-step returns (input priorities need sampler batches
    # longer than that). 4 sequences per update.
    "atari-r2d1": (
        192,
        8,
        "cpu",
        6,
        4,
        [
            "algo_kwargs.batch_T=12",
            "algo_kwargs.warmup_T=6",
            "algo_kwargs.store_rnn_state_interval=6",
            "algo_kwargs.batch_B=4",
            "algo_kwargs.replay_size=256",
        ],
    ),
}


def short_config(preset):
    iterations, learning, kind, batch_T, batch_B, overrides = CASES[preset]
    steps = iterations * batch_T * batch_B
    config = rl_suite.make_config(preset, steps=steps, seed=0)
    settings = [
        *SHORT_RUN,
        f"sampler.kind='{kind}'",
        f"sampler.batch_T={batch_T}",
        f"sampler.batch_B={batch_B}",
        f"runner.log_interval_steps={steps // 4}",
        f"algo_kwargs.min_steps_learn={(iterations - learning) * batch_T * batch_B}",
        *overrides,
    ]
    if kind != "serial":
        settings.append("sampler.workers=2")
    return rl_suite.apply_overrides(config, settings)


def rebuilt_observations(buffer, start, T):
    """The observations the replay buffer rebuilds from its frames for the ``T`` time slots
    from ``start`` on (wrapping) of every environment, ``[T, B, n_frames, H, W]``."""
    B = buffer.B
    if isinstance(buffer, SequenceNStepReturnBuffer):
        return buffer.extract_observation(np.full(B, start), np.arange(B), T)
    slots = (start + np.arange(T)) % buffer.T
    T_idxs, B_idxs = np.meshgrid(slots, np.arange(B), indexing="ij")
    rebuilt = buffer.extract_observation(T_idxs.ravel(), B_idxs.ravel())
    return rebuilt.reshape(T, B, *rebuilt.shape[1:])


def describe_mismatch(expected, rebuilt, first_step=None):
    """Where rebuilt observations ``[T, B, frames, H, W]`` differ from the environment's."""
    differ = np.argwhere((expected != rebuilt).any(axis=(-2, -1)))
    t, b, _ = differ[0]
    frames = [int(f) for tt, bb, f in differ if (tt, bb) == (t, b)]
    where = f"step {t}, environment {b}"
    if first_step is not None:
        where += f" (an episode's first step: {bool(first_step[t, b])})"
    return (
        f"{len({(int(tt), int(bb)) for tt, bb, _ in differ})} observations differ; the first "
        f"at {where}, frames {frames}; the environment's frame sums "
        f"{expected[t, b].reshape(N_FRAMES, -1).sum(-1).tolist()}, the buffer's "
        f"{rebuilt[t, b].reshape(N_FRAMES, -1).sum(-1).tolist()}"
    )


class Recorder:
    """Wraps the algorithm's ``optimize_agent``. After each call (which appends the
    sampler's batch to the replay buffer) it compares the observations the buffer rebuilds
    for the slots just written with the batch's own, keeps a copy of each observation at its
    buffer slot (``shadow``, for checks of the whole buffer at the end) and every OptInfo
    value (one per gradient step)."""

    def __init__(self, algo):
        self.algo, self.optimize_agent = algo, algo.optimize_agent
        self.opt_values = {field: [] for field in algo.opt_info_fields}
        self.mismatches = []
        self.first_steps = self.learning_itrs = 0
        self.shadow = self.last_done = None
        algo.optimize_agent = self

    def __call__(self, itr, samples=None, sampler_itr=None):
        buffer = self.algo.replay_buffer
        start = buffer.t
        opt_info = self.optimize_agent(itr, samples, sampler_itr)
        for field, values in self.opt_values.items():
            values.extend(getattr(opt_info, field))
        self.learning_itrs += bool(opt_info.loss)

        # (copies: a parallel sampler overwrites its shared batch in the next iteration)
        observation = np.array(numpify_buffer(samples.env.observation))
        done = np.array(numpify_buffer(samples.env.done), dtype=bool)
        T, B = done.shape
        if self.shadow is None:
            self.shadow = np.zeros((buffer.T, *observation.shape[1:]), np.uint8)
            self.last_done = np.zeros(B, bool)
        first_step = np.concatenate([self.last_done[None], done[:-1]])  # a reset before t
        self.last_done = done[-1]
        self.first_steps += int(first_step.sum())
        # The premise: an episode's first observation has zeros for its older frames.
        if observation[first_step][:, :-1].any():
            self.mismatches.append(f"itr {itr}: an episode's first observation has old frames")
        rebuilt = rebuilt_observations(buffer, start, T)
        if not np.array_equal(rebuilt, observation):
            mismatch = describe_mismatch(observation, rebuilt, first_step)
            self.mismatches.append(f"itr {itr}: {mismatch}")
        self.shadow[(start + np.arange(T)) % buffer.T] = observation
        return opt_info


def check_whole_buffer(buffer, shadow):
    """Every observation the buffer can still rebuild (all but the ``n_frames - 1`` oldest,
    whose older frames were overwritten) equals the environment's at that slot, rebuilt
    alone and (single-transition buffers) in training batches with their targets
    ``n_step_return`` steps later, as ``sample_batch`` builds them."""
    assert buffer.t_total > buffer.T  # it wrapped
    start = (buffer.t + N_FRAMES - 1) % buffer.T
    slots = (start + np.arange(buffer.T - (N_FRAMES - 1))) % buffer.T
    rebuilt = rebuilt_observations(buffer, start, len(slots))
    assert np.array_equal(rebuilt, shadow[slots]), describe_mismatch(shadow[slots], rebuilt)
    if isinstance(buffer, SequenceNStepReturnBuffer):  # (their batches rebuild as above)
        return
    n = buffer.n_step_return
    T_idxs, B_idxs = (a.ravel() for a in np.meshgrid(slots[:-n], np.arange(buffer.B)))
    batch = buffer.extract_batch(T_idxs, B_idxs)
    assert batch.done_n.any()  # some targets come after a reset
    np.testing.assert_array_equal(
        batch.agent_inputs.observation, shadow[T_idxs, B_idxs], err_msg="batch observations"
    )
    np.testing.assert_array_equal(
        batch.target_inputs.observation,
        shadow[(T_idxs + n) % buffer.T, B_idxs],
        err_msg="batch target observations",
    )


def check_shapes(preset, runner):
    """One stored frame per step; sampled batches of stacked uint8 frames; the agent's
    outputs for them."""
    algo, agent, buffer = runner.algo, runner.agent, runner.algo.replay_buffer
    n_actions = agent.env_spaces.action.n
    assert buffer.samples.observation is None  # frames only, each stored once
    assert buffer.samples_frames.dtype == np.uint8
    assert buffer.samples_frames.shape == (buffer.T + N_FRAMES - 1, buffer.B, *FRAME_SHAPE)
    if preset == "atari-r2d1":
        batch = buffer.sample_batch(algo.batch_B)
        T = algo.warmup_T + algo.batch_T + algo.n_step_return
        assert batch.all_observation.shape == (T, algo.batch_B, N_FRAMES, *FRAME_SHAPE)
        assert batch.all_observation.dtype == np.uint8
        b = torchify_buffer(batch)
        # The stored states are [B, N, H]; the agent takes [N, B, H] (as R2D1 hands them over).
        rnn_state = buffer_method(buffer_method(b.init_rnn_state, "transpose", 0, 1), "contiguous")
        with torch.no_grad():
            q, _ = agent(b.all_observation, b.all_action, b.all_reward, rnn_state)
        assert q.shape == (T, algo.batch_B, n_actions)
        assert torch.isfinite(q).all()
        return
    batch = buffer.sample_batch(algo.batch_size)
    for inputs in (batch.agent_inputs, batch.target_inputs):
        assert inputs.observation.shape == (algo.batch_size, N_FRAMES, *FRAME_SHAPE)
        assert inputs.observation.dtype == np.uint8
    with torch.no_grad():
        out = agent(*torchify_buffer(batch.agent_inputs))
    if preset == "atari-catdqn":  # probabilities over the atoms
        assert out.shape == (algo.batch_size, n_actions, agent.n_atoms)
        torch.testing.assert_close(out.sum(-1), torch.ones(algo.batch_size, n_actions))
    else:
        assert out.shape == (algo.batch_size, n_actions)
    assert torch.isfinite(out).all()


@pytest.mark.slow
@pytest.mark.parametrize("preset", list(CASES))
def test_atari_preset_short_run(preset, tmp_path):
    config = short_config(preset)
    runner = rl_suite.build(config)
    recorder = Recorder(runner.algo)
    with rl_suite.logger_context(
        tmp_path, 0, preset, log_params={"config": config}, override_prefix=True
    ) as run_dir:
        runner.train()

    algo = runner.algo
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    learning = [row for row in rows if int(row["Iteration"]) >= algo.min_itr_learn]
    assert learning, "no row logged after learning started"
    assert algo.update_counter > 0
    assert int(rows[-1]["CumUpdates"]) == algo.update_counter
    for row in learning:
        for key in ("lossAverage", "tdAbsErrAverage", "gradNormAverage"):
            assert math.isfinite(float(row[key])), (key, row["Iteration"], row[key])
    assert recorder.learning_itrs == CASES[preset][1]
    for field, values in recorder.opt_values.items():  # every gradient step's value
        assert len(values) == algo.update_counter, field
        assert all(math.isfinite(v) for v in values), (field, values)

    assert recorder.first_steps > 0, "no episode reset in the run: the check missed resets"
    assert not recorder.mismatches, "\n".join(recorder.mismatches[:5])
    check_whole_buffer(algo.replay_buffer, recorder.shadow)
    check_shapes(preset, runner)
