"""Bad settings are refused when training starts: one line that names the setting and what it
takes, the command line's error exit, and no run directory made."""

import pytest
import torch

from rl_suite import make_config
from rl_suite._cli import main
from rl_suite._trainer import build

BAD_SETTINGS = {
    "a keyword the model does not take": (
        ["ppo", "--set", "agent.model_kwargs.nonlinearity=Bogus"],
        "agent.model_kwargs: CategoricalFfModel.__init__() got an unexpected keyword argument "
        "'nonlinearity' (it takes hidden_sizes, hidden_nonlinearity,",
    ),
    "layer sizes that are not ints": (
        ["ppo", "--set", "agent.model_kwargs.hidden_sizes=abc"],
        "agent.model_kwargs: hidden_sizes must be a positive int or a list of them, got 'abc'",
    ),
    "no environments to evaluate in": (
        ["ppo", "--set", "sampler.eval_n_envs=0"],
        "sampler.eval_n_envs must be a positive int when runner.evaluate=True",
    ),
    "a replay far beyond the memory": (
        ["dqn", "--set", "algo_kwargs.replay_size=10000000000000"],
        "algo_kwargs.replay_size=10000000000000 needs ",
    ),
    "a flag that is neither true nor false": (
        ["ppo", "--set", "agent.recurrent=maybe"],
        "agent.recurrent must be true or false, got 'maybe'",
    ),
    "a string for a number": (
        ["ppo", "--set", "sampler.batch_T=abc"],
        "sampler.batch_T must be a number, got 'abc'",
    ),
    "a number for a flag": (
        ["ppo", "--set", "runner.evaluate=1"],
        "runner.evaluate must be true or false, got 1",
    ),
}


@pytest.mark.parametrize("case", BAD_SETTINGS)
def test_a_bad_setting_is_one_line_before_anything_starts(tmp_path, capsys, case):
    (algo, *args), message = BAD_SETTINGS[case]
    common = ["--env", "CartPole-v1", "--steps", "2000", "--log-dir", str(tmp_path)]
    code = main(["train", algo, *common, *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("rl-suite train: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not any(tmp_path.iterdir())  # no run directory made


def test_the_replay_refusal_says_what_it_needs_and_what_fits(tmp_path, capsys):
    args = ["--log-dir", str(tmp_path), "--set", "algo_kwargs.replay_size=1e13"]
    assert main(["train", "dqn", "--steps", "2000", *args]) == 2
    err = capsys.readouterr().err
    assert "GiB (" in err and "of memory is available: algo_kwargs.replay_size <= " in err


def test_build_refuses_the_same_settings_through_the_python_api():
    with pytest.raises(ValueError, match=r"agent\.recurrent must be true or false, got 'maybe'"):
        build(make_config(agent={"recurrent": "maybe"}))
    with pytest.raises(ValueError, match=r"sampler\.eval_n_envs must be a positive int"):
        build(make_config(sampler={"eval_n_envs": 0}))


def test_no_evaluation_takes_no_evaluation_envs_and_building_keeps_the_random_state():
    config = make_config(sampler={"eval_n_envs": 0}, runner={"evaluate": False})
    state = torch.get_rng_state()
    build(config)  # (builds the agent's model once, to check its settings)
    assert torch.equal(state, torch.get_rng_state())
