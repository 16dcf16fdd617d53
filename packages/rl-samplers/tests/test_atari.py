import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")
cv2 = pytest.importorskip("cv2")

from rl_arrays import EnvStep  # noqa: E402
from rl_samplers import AtariEnv, AtariTrajInfo  # noqa: E402
from rl_samplers._atari import EnvInfo  # noqa: E402

SIZES = [(104, 80), (84, 84)]


def expected_frame(max_screen, obs_size):
    """What the newest observation frame must be: an independent downsample of the
    max-pooled 210x160 screen."""
    height, width = obs_size
    if obs_size == (104, 80):
        max_screen = max_screen[1:209]  # crop the first and last rows, then halve
    return cv2.resize(max_screen, (width, height), interpolation=cv2.INTER_AREA)


def run_until(env, predicate, max_steps, rng=None, action=0):
    """Step (with random actions if ``rng``) until ``predicate(env_step)``; return the steps."""
    steps = []
    for _ in range(max_steps):
        a = int(rng.integers(env.action_space.n)) if rng is not None else action
        steps.append(env.step(a))
        if predicate(steps[-1]):
            return steps
    raise AssertionError(f"no such step within {max_steps} steps")


@pytest.mark.parametrize("obs_size", SIZES)
def test_shapes_and_dtypes(obs_size):
    env = AtariEnv("pong", obs_size=obs_size, num_img_obs=3, seed=0)
    assert env.observation_space.shape == (3, *obs_size)
    assert env.observation_space.dtype == np.uint8
    assert env.action_space.n == len(env.ale.getMinimalActionSet()) == 6
    assert env.action_meanings[:2] == ["NOOP", "FIRE"]
    assert env.horizon == 27000
    observation = env.reset()
    assert observation.shape == (3, *obs_size) and observation.dtype == np.uint8
    env_step = env.step(np.int64(2))
    assert isinstance(env_step, EnvStep)
    assert env_step.observation.shape == (3, *obs_size)
    assert env_step.observation.dtype == np.uint8
    assert env.observation_space.contains(env_step.observation)
    assert isinstance(env_step.reward, float) and isinstance(env_step.done, bool)
    assert isinstance(env_step.env_info, EnvInfo)
    assert env_step.env_info._fields == ("game_score", "traj_done", "timeout")


def test_zeros_after_reset_except_newest():
    env = AtariEnv("pong", seed=1)
    for _ in range(2):
        observation = env.reset()
        assert not observation[:-1].any()
        assert observation[-1].any()
        for _ in range(3):
            observation = env.step(1).observation
        assert all(frame.any() for frame in observation)  # the zeros are shifted out


def test_single_frame_observations():
    env = AtariEnv("pong", num_img_obs=1, seed=2)
    assert env.reset().shape == (1, 104, 80)
    for _ in range(3):
        observation = env.step(0).observation
        assert observation.shape == (1, 104, 80) and observation.any()


def test_frames_oldest_to_newest():
    env = AtariEnv("pong", num_img_obs=4, seed=2)
    rng = np.random.default_rng(0)
    previous = env.reset()
    for t in range(12):
        observation = env.step(int(rng.integers(6))).observation
        np.testing.assert_array_equal(observation[:-1], previous[1:])
        assert not observation[: max(0, 2 - t)].any()  # zeros not yet shifted out
        previous = observation


def test_observations_are_not_aliased():
    env = AtariEnv("pong", seed=3)
    first = env.reset()
    kept = first.copy()
    second = env.step(0).observation
    first[:] = 255  # the caller owns what it got
    third = env.step(0).observation
    assert not np.shares_memory(first, second) and not np.shares_memory(second, third)
    np.testing.assert_array_equal(third[:-2], kept[2:])


@pytest.mark.parametrize("frame_skip", [1, 2, 4])
@pytest.mark.parametrize("obs_size", SIZES)
def test_newest_frame_is_downsampled_two_frame_max(obs_size, frame_skip):
    env = AtariEnv("pong", obs_size=obs_size, frame_skip=frame_skip, seed=4)
    ale = env.ale
    actions = ale.getMinimalActionSet()
    observation = env.reset()
    np.testing.assert_array_equal(
        observation[-1], expected_frame(ale.getScreenGrayscale(), obs_size)
    )
    rng = np.random.default_rng(1)
    for _ in range(60):  # far enough in for the ball to be on screen
        a = int(rng.integers(6))
        state = ale.cloneState()
        screens = [ale.getScreenGrayscale()]  # the last frame of the previous step
        observation = env.step(a).observation
        ale.restoreState(state)
        for _ in range(frame_skip):
            ale.act(actions[a])
            screens.append(ale.getScreenGrayscale())
        max_screen = np.maximum(screens[-2], screens[-1])
        np.testing.assert_array_equal(observation[-1], expected_frame(max_screen, obs_size))


def test_default_downsample_is_2x2_mean_of_cropped_screen():
    screen = np.random.default_rng(0).integers(0, 256, (210, 160), dtype=np.uint8)
    mean = screen[1:209].reshape(104, 2, 80, 2).mean(axis=(1, 3))
    diff = expected_frame(screen, (104, 80)).astype(float) - mean
    assert np.abs(diff).max() <= 0.5


def test_reward_clipping_keeps_game_score():
    rng = np.random.default_rng(0)
    for clip in (True, False):
        env = AtariEnv("space_invaders", clip_reward=clip, seed=5)
        env.reset()
        steps = run_until(env, lambda s: s.env_info.game_score > 1, 2000, rng)
        for s in steps:
            expected = np.sign(s.env_info.game_score) if clip else s.env_info.game_score
            assert s.reward == expected
        assert steps[-1].reward == (1.0 if clip else steps[-1].env_info.game_score)


def test_episodic_lives_continue_the_game():
    env = AtariEnv("breakout", fire_on_reset=True, max_start_noops=0, horizon=None, seed=6)
    env.reset()
    assert env.lives == 5
    life_losses = 0
    while True:  # NOOPs: the served ball is missed, one life every ~25 steps
        env_step = run_until(env, lambda s: s.done, 200)[-1]
        if env_step.env_info.traj_done:
            break
        life_losses += 1
        assert not env_step.env_info.timeout and not env.ale.game_over()
        assert env.lives == 5 - life_losses
        frame = env.ale.getEpisodeFrameNumber()
        observation = env.reset()
        # No hard reset: same game, one FIRE frame later, lives kept.
        assert env.ale.getEpisodeFrameNumber() == frame + 1
        assert env.lives == 5 - life_losses
        assert not observation[:-1].any() and observation[-1].any()
    assert life_losses == 4
    assert env.ale.game_over() and not env_step.env_info.timeout
    env.reset()  # game over: a full reset
    assert env.lives == 5 and env.ale.getEpisodeFrameNumber() == 1  # the FIRE frame


def test_without_episodic_lives_only_game_over_is_done():
    env = AtariEnv("breakout", fire_on_reset=True, episodic_lives=False, max_start_noops=0)
    env.reset()
    rng = np.random.default_rng(0)
    steps = run_until(env, lambda s: s.done, 3000, rng)
    assert steps[-1].env_info.traj_done and env.ale.game_over()
    assert not any(s.done for s in steps[:-1])


def test_fire_on_reset_needs_fire():
    with pytest.raises(ValueError, match="FIRE"):
        AtariEnv("freeway", fire_on_reset=True)


def test_horizon_times_out_the_whole_game():
    env = AtariEnv("pong", horizon=10, seed=7)
    assert env.horizon == 10
    env.reset()
    for t in range(1, 11):
        env_step = env.step(0)
        assert env_step.done == (t == 10)
        assert env_step.env_info.traj_done == (t == 10)
        assert env_step.env_info.timeout == (t == 10)
    env.reset()  # a full reset
    assert env.ale.getEpisodeFrameNumber() <= 30
    assert not any(env.step(0).done for _ in range(9))
    assert env.step(0).env_info.timeout


def test_horizon_counts_across_lives():
    env = AtariEnv("breakout", fire_on_reset=True, max_start_noops=0, horizon=40, seed=8)
    env.reset()
    first = run_until(env, lambda s: s.done, 40)  # a life loss after ~24 steps
    assert not first[-1].env_info.traj_done and len(first) < 40
    env.reset()
    second = run_until(env, lambda s: s.done, 40)
    assert len(first) + len(second) == 40
    assert second[-1].env_info.traj_done and second[-1].env_info.timeout


def run_actions(env, actions):
    observations = [env.reset()]
    for a in actions:
        env_step = env.step(a)
        observations.append(env_step.observation)
        if env_step.done:
            observations.append(env.reset())
    return np.stack(observations)


def test_seeding_reproduces():
    kwargs = dict(game="breakout", repeat_action_probability=0.25, fire_on_reset=True)
    actions = np.random.default_rng(0).integers(4, size=150)
    first = run_actions(AtariEnv(**kwargs, seed=11), actions)
    np.testing.assert_array_equal(first, run_actions(AtariEnv(**kwargs, seed=11), actions))
    env = AtariEnv(**kwargs, seed=12)  # re-seeding a used env: as good as new
    run_actions(env, actions[:30])
    env.seed(11)
    np.testing.assert_array_equal(first, run_actions(env, actions))
    other = run_actions(AtariEnv(**kwargs, seed=13), actions)
    assert first.shape != other.shape or not np.array_equal(first, other)


def start_noops(env):
    env.reset()
    return env.ale.getEpisodeFrameNumber()


def test_seeded_start_noops():
    noops = [start_noops(AtariEnv("pong", seed=seed)) for seed in range(10)]
    assert len(set(noops)) > 3 and all(0 <= n <= 30 for n in noops)
    assert noops[:3] == [start_noops(AtariEnv("pong", seed=seed)) for seed in range(3)]
    assert start_noops(AtariEnv("pong", max_start_noops=0)) == 0
    env = AtariEnv("pong", max_start_noops=5, seed=0)
    assert all(0 <= start_noops(env) <= 5 for _ in range(5))
    # Different start no-ops lead to different observations (same actions).
    first, second = (
        run_actions(AtariEnv("pong", seed=seed), [0] * 60)
        for seed in np.argsort(noops)[[0, -1]].tolist()
    )
    assert not np.array_equal(first, second)


def test_action_space_is_seeded():
    a = AtariEnv("pong", seed=5).action_space
    b = AtariEnv("pong", seed=5).action_space
    assert [a.sample() for _ in range(20)] == [b.sample() for _ in range(20)]


def ale_can_run(game):
    return bool(ale_py.ALEInterface.isSupportedROM(str(ale_py.roms.get_rom_path(game))))


@pytest.mark.parametrize("game", sorted(ale_py.roms.get_all_rom_ids()))
def test_every_game_runs(game):
    if not ale_can_run(game):  # e.g. combat in ale-py 0.12; loading it would exit()
        with pytest.raises(ValueError, match="cannot run"):
            AtariEnv(game)
        assert game not in AtariEnv.available_games()
        return
    env = AtariEnv(game, max_start_noops=0)
    assert env.game == game
    observation = env.reset()
    assert observation.shape == (4, 104, 80)
    env_step = env.step(env.action_space.n - 1)
    assert env_step.observation.shape == (4, 104, 80)
    env.close()


def test_game_name_spellings():
    games = sorted(ale_py.roms.get_all_rom_ids())
    assert AtariEnv.available_games() == [game for game in games if ale_can_run(game)]
    for name in ("space_invaders", "SpaceInvaders", "ALE/SpaceInvaders-v5", "SPACE INVADERS"):
        assert AtariEnv(name).game == "space_invaders"
    assert AtariEnv("MsPacmanNoFrameskip-v4").game == "ms_pacman"
    assert AtariEnv("TicTacToe3D").game == "tic_tac_toe_3d"


def test_unknown_game():
    with pytest.raises(ValueError, match="space_invaders"):
        AtariEnv("spaceinvader")
    with pytest.raises(ValueError, match="no close match"):
        AtariEnv("zzzzzzzzz")
    with pytest.raises(TypeError, match="game"):
        AtariEnv(3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(frame_skip=0), "frame_skip"),
        (dict(num_img_obs=0), "num_img_obs"),
        (dict(max_start_noops=-1), "max_start_noops"),
        (dict(horizon=0), "horizon"),
        (dict(repeat_action_probability=1.5), "repeat_action_probability"),
        (dict(obs_size=(84,)), "obs_size"),
        (dict(obs_size=(0, 84)), "obs_size"),
    ],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AtariEnv("pong", **kwargs)


def test_bad_action():
    env = AtariEnv("pong")
    env.reset()
    with pytest.raises(ValueError, match="action"):
        env.step(6)
    with pytest.raises(ValueError, match="action"):
        env.step(-1)


def test_traj_info_game_score():
    env = AtariEnv("space_invaders", seed=9)
    traj_info = AtariTrajInfo()
    observation = env.reset()
    rng = np.random.default_rng(0)
    scores, rewards = [], []
    for _ in range(300):
        a = int(rng.integers(env.action_space.n))
        o, r, d, env_info = env.step(a)
        traj_info.step(observation, a, r, d, None, env_info)
        scores.append(env_info.game_score)
        rewards.append(r)
        observation = env.reset() if d else o
    assert traj_info.GameScore == sum(scores) > traj_info.Return == sum(rewards) > 0
    assert traj_info.Length == 300


def test_env_info_and_step_pickle():
    env = AtariEnv("pong")
    env.reset()
    env_step = env.step(0)
    again = pickle.loads(pickle.dumps(env_step))
    assert type(again.env_info) is EnvInfo and again.env_info == env_step.env_info
    np.testing.assert_array_equal(again.observation, env_step.observation)


def test_close_frees_the_emulator():
    env = AtariEnv("pong")
    env.close()
    assert env.ale is None
    env.close()  # twice is fine


def test_missing_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)
    with pytest.raises(ImportError, match=r"pip install rl-samplers\[atari\]"):
        AtariEnv("pong")


def test_package_imports_without_atari_extra():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["ale_py"] = None
        sys.modules["cv2"] = None
        import rl_samplers, rl_samplers._atari
        try:
            rl_samplers._atari.AtariEnv("pong")
        except ImportError as err:
            assert "rl-samplers[atari]" in str(err), err
        else:
            raise AssertionError("no ImportError")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(game="pong", horizon=50),
        dict(game="breakout", fire_on_reset=True, repeat_action_probability=0.25, horizon=100),
    ],
)
def test_check_env(kwargs):
    from rl_samplers import check_env

    check_env(AtariEnv(**kwargs), n_steps=200)
