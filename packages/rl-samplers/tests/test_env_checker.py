import gymnasium as gym
import numpy as np
import pytest

from rl_arrays import EnvStep, namedarraytuple
from rl_samplers import Composite, Env, EnvCheckError, FloatBox, IntBox, check_env, make

EnvInfo = namedarraytuple("EnvInfo", ["timeout", "score"])
WithExtra = namedarraytuple("WithExtra", ["timeout", "score", "extra"])
Obs = namedarraytuple("Obs", ["position", "flag"])


class ToyEnv(Env):
    """A correct environment that ``broken`` breaks in one named way."""

    def __init__(self, broken=None, horizon=10, composite=False):
        self.broken = broken
        self._horizon = horizon
        self.composite = composite
        if composite:
            self._observation_space = Composite([FloatBox(-1, 1, shape=(3,)), IntBox(0, 2)], Obs)
        else:
            self._observation_space = FloatBox(-1, 1, shape=(3,))
        self._action_space = IntBox(0, 2)
        self.rng = np.random.default_rng()
        self.t = 0
        self.n_steps = 0

    def seed(self, seed):
        super().seed(seed)
        self.rng = np.random.default_rng(seed)

    def _observation(self):
        position = self.rng.uniform(-1, 1, 3).astype(np.float32)
        if self.broken == "dtype":
            position = position.astype(np.float64)
        if self.broken == "bounds" and self.n_steps == 4:
            position[0] = 5.0
        if self.composite:
            return Obs(position, np.array(self.t % 2, np.int32))
        return position

    def reset(self):
        if self.broken == "seed":
            self.rng = np.random.default_rng()  # ignores the seed
        self.t = 0
        return self._observation()

    def step(self, action):
        assert self._action_space.contains(action)
        self.t += 1
        self.n_steps += 1
        reward = float(self.rng.normal())
        if self.broken == "nan" and self.n_steps == 3:
            reward = float("nan")
        timeout = self._horizon is not None and self.t >= self._horizon
        done = timeout or self.rng.random() < 0.05
        if self.broken == "done":
            done = int(done)
        info = EnvInfo(timeout, np.float32(reward))
        if self.broken == "info" and self.n_steps == 5:
            info = WithExtra(timeout, np.float32(reward), 0)
        if self.broken == "info_dtype" and self.n_steps == 5:
            info = EnvInfo(timeout, reward)  # float64 instead of float32
        if self.broken == "timeout":
            info = EnvInfo(True, np.float32(reward))
        if self.broken == "tuple":
            return self._observation(), reward, done, info
        return EnvStep(self._observation(), reward, done, info)

    @property
    def horizon(self):
        return self._horizon


@pytest.mark.parametrize("composite", [False, True])
def test_correct_env_passes(composite):
    assert check_env(ToyEnv(composite=composite), n_steps=60) is None


def test_gymnasium_env_passes():
    check_env(make("CartPole-v1"), n_steps=50)


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("dtype", r"^reset\(\): observation has dtype float64, but its space wants float32"),
        ("bounds", r"step 3: observation is outside its space"),
        ("nan", r"step 2: reward is not finite"),
        ("done", r"step 0: done must be a bool, got int"),
        ("info", r"step 4: env_info changed fields, shapes or dtypes"),
        ("info_dtype", r"step 4: env_info changed fields, shapes or dtypes"),
        ("timeout", r"step 0: env_info.timeout is true but done is false"),
        ("tuple", r"step 0: step\(\) must return an rl_arrays.EnvStep, got tuple"),
        ("seed", r"seed\(0\) twice gave different runs .*: the observation of reset\(\) differs"),
    ],
)
def test_broken_env_fails_with_a_precise_message(broken, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env(ToyEnv(broken=broken), n_steps=60)


def test_dtype_error_names_the_composite_field():
    env = ToyEnv(broken="dtype", composite=True)
    with pytest.raises(EnvCheckError, match=r"observation.position has dtype float64"):
        check_env(env)


def test_nondeterministic_env_skips_the_seed_check():
    env = ToyEnv(broken="seed")
    env.nondeterministic = True
    check_env(env)


def test_horizon_needs_a_timeout_field():
    class NoTimeout(ToyEnv):
        def step(self, action):
            step = super().step(action)
            return step._replace(env_info=Obs(step.env_info.score, 0))

    with pytest.raises(EnvCheckError, match="'timeout' field"):
        check_env(NoTimeout())


def test_episode_longer_than_horizon_fails():
    class Liar(ToyEnv):
        @property
        def horizon(self):
            return 3

    with pytest.raises(EnvCheckError, match="over horizon 3"):
        check_env(Liar(horizon=None, broken=None), n_steps=200)


def test_spaces_must_be_ours():
    env = ToyEnv()
    env._observation_space = gym.spaces.Box(-1, 1, (3,))
    with pytest.raises(EnvCheckError, match="observation_space must be an rl_samplers Space"):
        check_env(env)


def test_null_value_outside_space_fails():
    env = ToyEnv()
    env._action_space = IntBox(1, 3)
    env._action_space._null = 0  # bypass the constructor's own check
    with pytest.raises(EnvCheckError, match=r"action_space.null_value\(\) is outside its space"):
        check_env(env)


def test_check_error_is_an_assertion_error():
    assert issubclass(EnvCheckError, AssertionError)
