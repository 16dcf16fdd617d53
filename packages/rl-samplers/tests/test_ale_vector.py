"""AleVectorEnv: ale-py's vector env as a BatchEnv with AtariEnv's spaces, clipped rewards
beside the raw game score, and trajectories that span all lives of a game."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("ale_py.vector_env")

from rl_arrays import AgentStep  # noqa: E402
from rl_samplers import TRAJ_DONE, AleVectorEnv, AtariEnv, BatchedSampler  # noqa: E402


class RandomAgent:
    """Uniform random actions from its own seeded generator (the same each run)."""

    def __init__(self, seed=0):
        self.generator = torch.Generator().manual_seed(seed)

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        self.n = env_spaces.action.n

    def step(self, observation, prev_action, prev_reward):
        action = torch.randint(self.n, prev_reward.shape, generator=self.generator)
        return AgentStep(action, None)

    def reset(self):
        pass

    def reset_one(self, idx):
        pass

    def sample_mode(self, itr):
        pass


def sampler(game, T, B, seed=0, **env_kwargs):
    batched = BatchedSampler(lambda n: AleVectorEnv(game, n, **env_kwargs), batch_T=T, batch_B=B)
    batched.initialize(RandomAgent(), seed=seed)
    return batched


def random_steps(env, n_steps, seed=0):
    """``n_steps`` random-action steps of ``env``: lists of (reward, terminated, truncated,
    extras), numpy."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(n_steps):
        _, reward, terminated, truncated, extras = env.step(
            torch.as_tensor(rng.integers(env.action_space.n, size=env.num_envs))
        )
        steps.append((reward.numpy(), terminated.numpy(), truncated.numpy(), extras))
    return steps


@pytest.mark.parametrize(
    "kwargs", [{}, dict(obs_size=(84, 84), num_img_obs=3, frame_skip=2, game="breakout")]
)
def test_spaces_and_dtypes_are_atari_envs(kwargs):
    kwargs = {"game": "pong", **kwargs}
    single = AtariEnv(**kwargs, seed=0)
    env = AleVectorEnv(num_envs=2, **kwargs)
    try:
        for ours, theirs in ((env.observation_space, single.observation_space),
                             (env.action_space, single.action_space)):  # fmt: skip
            assert repr(ours) == repr(theirs)
        assert env.action_space.n == len(single.action_meanings)
        env.seed(0)
        observation = env.reset()
        assert observation.shape == (2, *single.observation_space.shape)
        assert observation.dtype == torch.uint8 and observation.device == torch.device("cpu")
        assert not observation[:, :-1].any() and observation[:, -1].any()  # as AtariEnv's
        observation, reward, terminated, truncated, extras = env.step(torch.zeros(2, dtype=int))
        assert observation.dtype == torch.uint8
        assert reward.dtype == extras["GameScore"].dtype == torch.float32
        assert terminated.dtype == truncated.dtype == extras[TRAJ_DONE].dtype == torch.bool
        assert all(x.shape == (2,) for x in (reward, terminated, truncated, *extras.values()))
    finally:
        env.close()


def test_batched_sampler_records_life_losses_and_whole_games():
    """Breakout, random actions: a life loss is done, the trajectory is the whole game."""
    T, B = 250, 2
    batched = sampler("breakout", T, B, seed=1, max_start_noops=0)
    samples, infos = batched.obtain_samples(0)
    batched.shutdown()
    observation, done = samples.env.observation, samples.env.done
    assert observation.shape == (T, B, 4, 104, 80) and observation.dtype == torch.uint8
    assert samples.agent.action.shape == samples.env.reward.shape == done.shape == (T, B)
    assert not samples.env.env_info.timeout.any()
    # Each game has 5 lives: every 5th done of an env ends its trajectory.
    n_games = int((done.sum(0) // 5).sum())
    assert n_games >= 1 and len(infos) == n_games
    for info in infos:
        assert info.Length > 20 and info.GameScore >= info.Return >= 0
        assert info.NonzeroRewards == info.Return  # (Breakout's rewards are positive)
        assert set(info) >= {"Length", "Return", "DiscountedReturn", "GameScore"}
    # The first game of each env that ended, against the recorded rewards.
    ends = done.cumsum(0) == 5
    for b in range(B):
        if ends[:, b].any():
            t = int(torch.nonzero(ends[:, b])[0])
            length, ret = t + 1, float(samples.env.reward[: t + 1, b].sum())
            assert any(i.Length == length and i.Return == ret for i in infos)


def test_timeouts_and_seeds_reproduce():
    def batch(seed):
        batched = sampler("pong", 40, 2, seed=seed, horizon=12)
        samples, _ = batched.obtain_samples(0)
        batched.shutdown()
        return samples

    first, again, other = batch(3), batch(3), batch(4)
    assert torch.equal(first.env.observation, again.env.observation)
    assert torch.equal(first.env.done, again.env.done)
    assert not torch.equal(first.env.observation, other.env.observation)
    # A time-out every 12 steps (as AtariEnv's horizon): no game of Pong ends sooner.
    timeout = first.env.env_info.timeout
    assert torch.equal(timeout, first.env.done)
    assert torch.equal(torch.nonzero(timeout[:, 0]).flatten(), torch.tensor([11, 23, 35]))


def test_clipped_reward_and_game_score():
    """Space Invaders scores 5 to 30 points per alien: the reward is the score's sign, the
    trajectory infos sum the score."""
    for clip in (True, False):
        env = AleVectorEnv("space_invaders", 1, clip_reward=clip, horizon=None)
        env.seed(5)
        env.reset()
        steps = random_steps(env, 300)
        env.close()
        reward = np.stack([s[0] for s in steps])
        score = np.stack([s[3]["GameScore"].numpy() for s in steps])
        assert score.max() > 1
        np.testing.assert_array_equal(reward, np.sign(score) if clip else score)
    batched = sampler("space_invaders", 100, 2, horizon=100)
    _, infos = batched.obtain_samples(0)
    batched.shutdown()
    assert len(infos) == 2 and any(i.GameScore > i.Return > 0 for i in infos)
    assert all(i.GameScore >= i.Return == i.NonzeroRewards for i in infos)


def test_without_episodic_lives_only_the_game_over_is_done():
    env = AleVectorEnv("breakout", 2, episodic_lives=False, max_start_noops=0)
    env.seed(2)
    env.reset()
    steps = random_steps(env, 400)
    env.close()
    done = np.stack([s[1] | s[2] for s in steps])
    traj_done = np.stack([s[3][TRAJ_DONE].numpy() for s in steps])
    assert done.any() and np.array_equal(done, traj_done)


def record_ale_infos(env, monkeypatch):
    """Every ``info`` ALE's vector env returns from ``reset`` and ``step``, in a list."""
    infos = []
    vector_env = env.vector_env
    for name in ("reset", "step"):
        method = getattr(vector_env, name)

        def recorded(*args, _method=method, **kwargs):
            result = _method(*args, **kwargs)
            infos.append({k: np.array(v) for k, v in result[-1].items()})
            return result

        monkeypatch.setattr(vector_env, name, recorded)
    return infos


@pytest.mark.parametrize("episodic_lives", [True, False])
def test_every_game_end_ends_the_trajectory(monkeypatch, episodic_lives):
    """Amidar, random actions: a new game reports 0 lives at its first frame, fewer than the
    old game's last, so a game end must not be read as a life loss from the lives alone.
    Game ends are found here by ALE's episode frame number starting again."""
    env = AleVectorEnv("amidar", 3, max_start_noops=0, horizon=None, episodic_lives=episodic_lives)
    infos = record_ale_infos(env, monkeypatch)
    env.seed(0)
    env.reset()
    steps = random_steps(env, 650)
    env.close()
    frame = np.stack([i["episode_frame_number"] for i in infos])
    lives = np.stack([i["lives"] for i in infos])
    new_game = frame[1:] < frame[:-1]
    life_lost = (lives[1:] < lives[:-1]) & ~new_game
    terminated = np.stack([s[1] for s in steps])
    truncated = np.stack([s[2] for s in steps])
    traj_done = np.stack([s[3][TRAJ_DONE].numpy() for s in steps])
    assert new_game.sum() >= 3 and life_lost.sum() >= 3 and not truncated.any()
    np.testing.assert_array_equal(traj_done, new_game)
    np.testing.assert_array_equal(terminated, new_game | (life_lost & episodic_lives))


@pytest.mark.parametrize("fire_on_reset", [False, True])
@pytest.mark.parametrize("max_start_noops", [0, 2])
def test_start_noops_are_atari_envs(monkeypatch, max_start_noops, fire_on_reset):
    """0 to ``max_start_noops`` idle frames at a game's start (and FIRE's frame), as
    ``AtariEnv``'s; ALE draws from one fewer and counts FIRE as one of them."""
    env = AleVectorEnv("breakout", 4, max_start_noops=max_start_noops, fire_on_reset=fire_on_reset)
    infos = record_ale_infos(env, monkeypatch)
    env.seed(0)
    for _ in range(25):  # (100 games started)
        env.reset()
    env.close()
    frames = {int(f) for info in infos for f in info["episode_frame_number"]}
    first = int(fire_on_reset)
    assert frames == set(range(first, first + max_start_noops + 1))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="close matches"):
        AleVectorEnv("pongg", 1)
    with pytest.raises(ValueError, match="FIRE"):
        AleVectorEnv("freeway", 1, fire_on_reset=True)
    with pytest.raises(ValueError, match="num_threads must be"):
        AleVectorEnv("pong", 2, num_threads=0)
    with pytest.raises(ValueError, match="obs_size"):
        AleVectorEnv("pong", 2, obs_size=(84,))
    env = AleVectorEnv("pong", 2)
    env.reset()
    with pytest.raises(ValueError, match=r"action must be in range\(6\)"):
        env.step(torch.tensor([0, 6]))  # (ALE itself would hang)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(torch.tensor([0]))
    env.close()


def test_a_clear_error_without_ale_pys_vector_env(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py.vector_env", None)  # (import raises)
    with pytest.raises(ImportError, match=r"AleVectorEnv needs ale-py 0.12 or later"):
        AleVectorEnv("pong", 1)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_frames_reach_the_gpu_as_uint8():
    """On a GPU the whole batch is there, the frames still uint8 (a quarter of float32)."""
    batched = sampler("pong", 16, 2, device="cuda", horizon=8)
    samples, infos = batched.obtain_samples(0)
    batched.shutdown()
    device = torch.zeros(0, device="cuda").device
    assert samples.env.observation.device == samples.env.reward.device == device
    assert samples.env.observation.dtype == torch.uint8
    assert len(infos) == 4 and all(i.Length == 8 and i.GameScore <= 0 for i in infos)
