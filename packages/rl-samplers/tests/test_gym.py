import pickle
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gs
from gymnasium.wrappers import TimeLimit

from rl_arrays import EnvStep, is_namedarraytuple
from rl_samplers import (
    Composite,
    EnvInfoWrapper,
    FloatBox,
    GymEnvWrapper,
    GymSpaceWrapper,
    InfoActionMask,
    IntBox,
    check_env,
    make,
)
from rl_samplers._gym import _field_names
from rl_samplers._spaces import sample_action, stack_values


class SpaceEnv(gym.Env):
    """Observations sampled from its (seeded) observation space; checks its actions;
    terminates after ``length`` steps.  ``infos`` (one dict per step, cycled) are its
    step infos."""

    def __init__(self, observation_space, action_space, length=7, infos=None):
        self.observation_space = observation_space
        self.action_space = action_space
        self.length = length
        self.infos = infos or [{}]
        self.t = 0
        self.actions = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {"reset": True}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.actions.append(action)
        info = dict(self.infos[self.t % len(self.infos)])
        self.t += 1
        reward = float(self.np_random.normal())
        return self.observation_space.sample(), reward, self.t >= self.length, False, info


def dict_spaces():
    observation = gs.Dict(
        {
            "pos": gs.Box(-1.0, 1.0, (2,), np.float64),
            "1st-key": gs.Discrete(3, start=1),
            "nested": gs.Dict(
                {"bits": gs.MultiBinary(4), "pair": gs.Tuple((gs.Discrete(2), gs.Box(0, 1, (1,))))}
            ),
        }
    )
    action = gs.Dict({"move": gs.Discrete(2), "my.force": gs.Box(-1, 1, (2,), np.float64)})
    return observation, action


# ------------------------------------------------------------------------------ spaces


def test_field_names_are_valid_distinct_and_deterministic():
    keys = ["ale.lives", "1st", "_x", "class", "get", "a.b", "a_b", "", "ok"]
    names = _field_names(keys)
    assert names == ["ale_lives", "k1st", "k_x", "class_", "get_", "a_b", "a_b_1", "k", "ok"]
    assert _field_names(keys) == names
    assert _field_names(["timeout"], taken=["timeout"]) == ["timeout_1"]


def test_box_float_is_float32_unless_asked():
    box = gs.Box(-1.0, 2.0, (3,), np.float64)
    space = GymSpaceWrapper(box)
    assert isinstance(space.space, FloatBox) and space.dtype == np.float32
    assert space.convert(np.ones(3)).dtype == np.float32
    assert space.revert(np.ones(3, np.float32)).dtype == np.float64
    assert GymSpaceWrapper(box, force_float32=False).dtype == np.float64


def test_integer_boxes():
    image = GymSpaceWrapper(gs.Box(0, 255, (4, 4, 3), np.uint8))
    assert isinstance(image.space, IntBox)
    assert (image.low, image.high, image.dtype, image.shape) == (0, 256, np.uint8, (4, 4, 3))
    assert image.contains(np.full((4, 4, 3), 255, np.uint8))
    with pytest.raises(ValueError, match="bounds differ"):
        GymSpaceWrapper(gs.Box(np.array([0, 0]), np.array([3, 4]), dtype=np.int64))


def test_discrete_multidiscrete_multibinary():
    discrete = GymSpaceWrapper(gs.Discrete(3, start=1), name="act")
    assert (discrete.low, discrete.high, discrete.n) == (1, 4, 3)
    assert discrete.null_value() == 1  # 0 is clipped into the space
    assert discrete.revert(np.array(2)) == 2 and type(discrete.revert(np.array(2))) is int
    multi = GymSpaceWrapper(gs.MultiDiscrete([4, 4, 4]))
    assert (multi.low, multi.high, multi.shape) == (0, 4, (3,))
    with pytest.raises(ValueError, match="nvec"):
        GymSpaceWrapper(gs.MultiDiscrete([2, 3]))
    binary = GymSpaceWrapper(gs.MultiBinary(5))
    assert (binary.low, binary.high, binary.shape, binary.dtype) == (0, 2, (5,), np.int8)


def test_float_null_value_is_clipped_into_bounds():
    space = GymSpaceWrapper(
        gs.Box(np.array([1.0, -2.0]), np.array([2.0, 3.0]), dtype=np.float64), null_value=0
    )
    np.testing.assert_array_equal(space.null_value(), [1.0, 0.0])
    assert space.contains(space.null_value())


def test_dict_space_converts_and_reverts_nested():
    observation, action = dict_spaces()
    space = GymSpaceWrapper(observation)
    assert isinstance(space.space, Composite)
    assert space.names == ("k1st_key", "nested", "pos")  # gymnasium sorts the keys
    assert space.spaces[1].names == ("bits", "pair") and space.spaces[1].spaces[1].names == (
        "f0",
        "f1",
    )
    observation.seed(0)
    value = space.convert(observation.sample())
    assert is_namedarraytuple(value) and space.contains(value)
    assert value.pos.dtype == np.float32 and value.nested.pair.f1.shape == (1,)
    assert space.contains(space.sample()) and space.contains(space.null_value())
    assert space.null_value().k1st_key == 1

    act_space = GymSpaceWrapper(action, name="act")
    gym_action = act_space.revert(act_space.sample())
    assert set(gym_action) == {"move", "my.force"} and action.contains(gym_action)
    restored = pickle.loads(pickle.dumps(value))  # types made at run time pickle (spawn)
    assert restored._fields == value._fields and restored.pos.tolist() == value.pos.tolist()
    assert pickle.loads(pickle.dumps(space)).names == space.names


def test_tuple_space():
    space = GymSpaceWrapper(gs.Tuple((gs.Discrete(5), gs.Box(-1, 1, (2,)))))
    assert space.names == ("f0", "f1")
    value = space.convert((3, np.zeros(2)))
    assert value.f0 == 3 and value.f1.dtype == np.float32
    assert isinstance(space.revert(value), tuple)


def test_space_seeding_is_reproducible():
    a, b = (GymSpaceWrapper(dict_spaces()[0]) for _ in range(2))
    a.seed(3)
    b.seed(3)
    for _ in range(3):
        x, y = a.sample(), b.sample()
        assert x.pos.tolist() == y.pos.tolist() and x.nested.bits.tolist() == y.nested.bits.tolist()


@pytest.mark.parametrize(
    "space",
    [gs.Text(5), gs.Graph(gs.Box(0, 1, (2,)), None), gs.Sequence(gs.Discrete(2))],
    ids=["Text", "Graph", "Sequence"],
)
def test_unsupported_spaces_name_themselves(space):
    with pytest.raises(TypeError, match=type(space).__name__):
        GymSpaceWrapper(space)
    with pytest.raises(TypeError, match=type(space).__name__):
        GymSpaceWrapper(gs.Dict({"inner": space}))


# ------------------------------------------------------------------------ environments


def test_cartpole():
    env = make("CartPole-v1")
    assert isinstance(env.action_space.space, IntBox) and env.action_space.n == 2
    assert env.horizon == 500
    env.seed(0)
    observation = env.reset()
    assert observation.dtype == np.float32 and env.observation_space.contains(observation)
    step = env.step(env.action_space.sample())
    assert isinstance(step, EnvStep) and type(step.reward) is float and type(step.done) is bool
    assert step.env_info._fields == ("timeout",) and step.env_info.timeout is False
    assert pickle.loads(pickle.dumps(step.env_info)) == step.env_info
    check_env(env)
    env.close()


def test_pendulum():
    env = make("Pendulum-v1")
    assert isinstance(env.action_space.space, FloatBox) and env.action_space.shape == (1,)
    assert env.horizon == 200
    env.seed(1)
    env.reset()
    step = env.step(env.action_space.sample())
    assert step.observation.dtype == np.float32 and np.isfinite(step.reward)
    check_env(env)


def test_terminated_is_not_timeout_and_final_observation_is_returned():
    env = make("CartPole-v1")
    env.seed(0)
    env.reset()
    for t in range(500):  # noqa: B007 (t read after the loop)
        step = env.step(np.array(0))  # always push left: the pole falls
        if step.done:
            break
    assert t < 50 and step.done and not step.env_info.timeout
    x, _, theta, _ = step.observation
    assert abs(theta) > 12 * 2 * np.pi / 360 or abs(x) > 2.4  # the terminal state itself
    np.testing.assert_allclose(step.observation, env.env.unwrapped.state, rtol=1e-6)


def test_truncation_sets_timeout_and_done():
    inner = SpaceEnv(gs.Box(-1, 1, (2,)), gs.Discrete(2), length=100)
    env = GymEnvWrapper(TimeLimit(inner, max_episode_steps=5))
    assert env.horizon == 5
    env.reset()
    steps = [env.step(np.array(1)) for _ in range(5)]
    assert [s.done for s in steps] == [False] * 4 + [True]
    assert [bool(s.env_info.timeout) for s in steps] == [False] * 4 + [True]
    check_env(env, n_steps=30)


def test_terminated_and_truncated_together_is_not_timeout():
    inner = SpaceEnv(gs.Box(-1, 1, (2,)), gs.Discrete(2), length=3)
    env = GymEnvWrapper(TimeLimit(inner, max_episode_steps=3))
    env.reset()
    steps = [env.step(np.array(0)) for _ in range(3)]
    assert steps[-1].done and not steps[-1].env_info.timeout


def test_dict_env_reverts_actions_and_passes_check():
    observation, action = dict_spaces()
    inner = SpaceEnv(observation, action)
    env = GymEnvWrapper(inner)
    assert env.horizon is None
    env.seed(0)
    first = env.reset()
    assert first._fields == ("k1st_key", "nested", "pos")
    env.step(env.action_space.null_value())
    assert isinstance(inner.actions[-1], dict) and inner.actions[-1]["move"] == 0
    check_env(env)


def test_multidiscrete_and_tuple_envs_pass_check():
    multi = GymEnvWrapper(SpaceEnv(gs.MultiDiscrete([4, 4, 4]), gs.MultiDiscrete([3, 3])))
    check_env(multi)
    tuple_env = GymEnvWrapper(
        SpaceEnv(gs.Tuple((gs.Discrete(5), gs.Box(-1, 1, (2,)))), gs.Tuple((gs.Discrete(2),) * 2))
    )
    check_env(tuple_env)


def test_seeding_reproduces_episodes():
    def run(seed):
        env = make("CartPole-v1")
        env.seed(seed)
        observations = [env.reset()]
        for _ in range(30):
            step = env.step(env.action_space.sample())
            observations.append(step.observation)
            if step.done:
                observations.append(env.reset())
        return np.stack(observations)

    np.testing.assert_array_equal(run(4), run(4))
    assert not np.array_equal(run(4), run(5))


def test_reset_seeds_only_the_next_reset():
    env = make("CartPole-v1")
    env.seed(7)
    first = env.reset()
    second = env.reset()  # continues the seeded stream: a different start
    env.seed(7)
    np.testing.assert_array_equal(env.reset(), first)
    assert not np.array_equal(first, second)


# ---------------------------------------------------------------------------- env_info


def info_env():
    infos = [
        {"ale.lives": 3, "name": "pong", "score": 1.5, "sometimes": np.zeros(2, np.int32)},
        {"ale.lives": 2, "name": "pong", "score": 2.5},
        {"ale.lives": 1, "name": "pong", "score": np.float32(3.5), "late": 1.0},
    ]
    return GymEnvWrapper(SpaceEnv(gs.Box(-1, 1, (2,)), gs.Discrete(2), length=9, infos=infos))


def test_env_info_fields_renames_and_warnings():
    env = info_env()
    env.reset()
    with pytest.warns(UserWarning, match="'name'") as record:
        first = env.step(np.array(0))
    assert len(record) == 1
    assert first.env_info._fields == ("timeout", "ale_lives", "score", "sometimes")
    assert env.info_fields["ale.lives"] == "ale_lives"
    assert first.env_info.ale_lives == 3 and first.env_info.sometimes.dtype == np.int32

    second = env.step(np.array(0))  # "sometimes" missing: zero of the same shape and dtype
    np.testing.assert_array_equal(second.env_info.sometimes, np.zeros(2, np.int32))
    assert second.env_info.sometimes.dtype == np.int32

    with pytest.warns(UserWarning, match="'late'"):
        third = env.step(np.array(0))
    assert "late" not in third.env_info._fields
    assert third.env_info.score.dtype == np.float64

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # each key warned about once only
        for _ in range(5):
            step = env.step(np.array(0))
            assert step.env_info._fields == first.env_info._fields
            if step.done:
                env.reset()


def test_env_info_shape_change_is_an_error():
    infos = [{"x": np.zeros(2)}, {"x": np.zeros(3)}]
    env = GymEnvWrapper(SpaceEnv(gs.Box(-1, 1, (2,)), gs.Discrete(2), infos=infos))
    env.reset()
    env.step(np.array(0))
    with pytest.raises(ValueError, match=r"'x'.*cannot change shape"):
        env.step(np.array(0))


def test_info_env_passes_check():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(info_env(), n_steps=30)


def test_env_info_wrapper_and_make_info_example():
    inner = SpaceEnv(gs.Box(-1, 1, (2,)), gs.Discrete(2), infos=[{}, {"bonus": 2.0}])
    env = GymEnvWrapper(EnvInfoWrapper(inner, {"bonus": 0.0}))
    env.reset()
    assert env.step(np.array(0)).env_info.bonus == 0.0
    assert env.step(np.array(0)).env_info.bonus == 2.0

    env = make("CartPole-v1", info_example={"extra": np.int16(0)})
    env.reset()
    info = env.step(np.array(1)).env_info
    assert info._fields == ("timeout", "extra") and info.extra.dtype == np.int16
    with pytest.raises(TypeError, match="mapping"):
        EnvInfoWrapper(inner, [("bonus", 0.0)])


# ------------------------------------------------------------------------------- Atari


def test_make_atari_pong():
    pytest.importorskip("ale_py")
    env = make("ALE/Pong-v5")
    assert env.observation_space.dtype == np.uint8 and env.observation_space.high == 256
    env.seed(0)
    env.reset()
    for _ in range(5):
        step = env.step(env.action_space.sample())
    assert step.observation.shape == (210, 160, 3)
    assert {"timeout", "lives", "frame_number"} <= set(step.env_info._fields)
    check_env(env, n_steps=30)
    env.close()


def test_make_atari_without_ale_py_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # makes `import ale_py` fail
    with pytest.raises(ImportError, match=r"pip install rl-samplers\[atari\]"):
        make("ALE/Pong-v5")


# ------------------------------------------------------------------ action masks


def test_info_action_mask_puts_taxis_mask_into_the_observation():
    env = InfoActionMask(gym.make("Taxi-v4"))
    assert set(env.observation_space.spaces) == {"observation", "action_mask"}
    observation, info = env.reset(seed=0)
    for _ in range(20):
        np.testing.assert_array_equal(observation["action_mask"], info["action_mask"])
        assert observation["action_mask"].dtype == np.int8
        action = int(np.flatnonzero(observation["action_mask"])[0])
        observation, _, _, _, info = env.step(action)


def test_info_action_mask_refuses_what_it_cannot_mask():
    with pytest.raises(ValueError, match="Discrete action space"):
        InfoActionMask(gym.make("Pendulum-v1"))
    env = InfoActionMask(gym.make("CartPole-v1"))
    with pytest.raises(KeyError, match="no 'action_mask'"):
        env.reset(seed=0)


def test_random_actions_respect_an_observation_mask():
    env = GymEnvWrapper(InfoActionMask(gym.make("Taxi-v4")))
    env.action_space.seed(0)
    observation = env.reset()
    for _ in range(200):
        action = sample_action(env.action_space, observation)
        assert observation.action_mask[int(action)] == 1
        observation = env.step(action).observation
        if observation.action_mask.sum() == 0:
            observation = env.reset()


def test_stack_values_stacks_dict_observations_field_by_field():
    env = GymEnvWrapper(InfoActionMask(gym.make("Taxi-v4")))
    stacked = stack_values([env.reset() for _ in range(3)])
    assert type(stacked) is type(env.reset())
    assert stacked.action_mask.shape == (3, 6) and stacked.observation.shape == (3,)
