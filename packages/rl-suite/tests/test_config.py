"""Configurations: presets over defaults, --set overrides, and clear refusals."""

import pytest

from rl_suite._config import PRESETS, apply_overrides, default_preset, make_config


def test_a_preset_changes_only_what_it_names():
    config = make_config("cartpole-masked-lstm")
    assert config["agent"]["recurrent"] is True and config["sampler"]["mid_batch_reset"] is False
    assert config["sampler"]["kind"] == "serial"  # (a default the preset keeps)
    assert config["env_kwargs"] == {"observation_indices": [0, 2]}
    assert make_config("cartpole")["agent"]["recurrent"] is False  # presets share nothing
    for name in PRESETS:
        make_config(name)


def test_overrides_parse_values_and_reach_nested_settings():
    config = apply_overrides(
        make_config("cartpole"),
        [
            "sampler.batch_B=16",
            "algo_kwargs.learning_rate=3e-4",
            "algo_kwargs.new_option=True",
            "env=Acrobot-v1",
            "sampler.workers=None",
        ],
    )
    assert config["sampler"]["batch_B"] == 16 and config["env"] == "Acrobot-v1"
    assert config["algo_kwargs"]["learning_rate"] == 3e-4
    assert config["algo_kwargs"]["new_option"] is True and config["algo_kwargs"]["epochs"] == 20


def test_unknown_names_are_refused_with_what_exists():
    with pytest.raises(KeyError, match="unknown preset 'nope'; presets: cartpole"):
        make_config("nope")
    with pytest.raises(KeyError, match="unknown algorithm 'dqn2'"):
        make_config(algo="dqn2")
    with pytest.raises(KeyError, match=r"unknown setting 'sampler.batch'; known here: .*batch_B"):
        apply_overrides(make_config(), ["sampler.batch=3"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(make_config(), ["sampler.batch_B"])
    with pytest.raises(ValueError, match="sampler is a group of settings"):
        apply_overrides(make_config(), ["sampler=3"])


@pytest.mark.parametrize(
    ("algo", "env", "preset"),
    [
        ("ppo", "CartPole-v1", "cartpole"),
        ("dqn", "ALE/Breakout-v5", "atari-dqn"),
        ("sac", "Pendulum-v1", "pendulum-sac"),
        ("td3", "Pendulum-v1", "pendulum-td3"),
        ("sac", "HalfCheetah-v5", "mujoco-sac"),
        ("td3", "Hopper-v5", "mujoco-td3"),
        ("ddpg", "Walker2d-v5", "mujoco-ddpg"),
        ("sac", "Ant-v5", "mujoco-sac"),
        ("ppo", "Hopper-v5", "ppo-mujoco"),
        ("ppo", "Walker2d-v5", "ppo-mujoco"),
        ("sac", "MountainCarContinuous-v0", None),
    ],
)
def test_the_default_preset_is_the_one_made_for_the_algorithm_and_environment(algo, env, preset):
    assert default_preset(algo, env) == preset
