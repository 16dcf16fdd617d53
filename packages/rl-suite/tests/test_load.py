"""``rl_suite.load``: a trained agent from a run directory made by the command line, acting on
raw observations as SB3's ``predict`` does."""

import gymnasium
import numpy as np
import pytest
import torch

import rl_suite
from rl_suite._cli import main


def _train(tmp_path, *argv):
    assert main(["train", *argv, "--log-dir", str(tmp_path), "--set", "torch_threads=1"]) == 0
    (run_dir,) = tmp_path.iterdir()
    return run_dir


@pytest.fixture(scope="module")
def ppo_cartpole(tmp_path_factory):
    """PPO trained on CartPole-v1 until its evaluation return reaches 475."""
    root = tmp_path_factory.mktemp("ppo")
    return _train(root, "ppo", "--preset", "cartpole", "--set", "runner.stop_return=475")


def _play(agent, env_id, episodes, deterministic, seed=0):
    env = gymnasium.make(env_id)
    returns = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        total, over = 0.0, False
        while not over:
            action, _ = agent.predict(observation, deterministic=deterministic)
            observation, reward, terminated, truncated, _ = env.step(action)
            total, over = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return returns


@pytest.mark.slow
def test_a_trained_ppo_agent_plays_gymnasiums_env_as_it_was_evaluated(ppo_cartpole):
    agent = rl_suite.load(ppo_cartpole)
    assert agent.env_id == "CartPole-v1" and agent.checkpoint.name == "params.pt"
    assert np.mean(_play(agent, "CartPole-v1", 3, deterministic=True)) >= 450
    observation = np.zeros(4, np.float32)
    action, state = agent.predict(observation, deterministic=True)
    assert state is None and action.shape == () and int(action) in (0, 1)
    actions, _ = agent.predict(np.zeros((5, 4)), deterministic=False)  # a batch, sampled
    assert actions.shape == (5,) and set(actions.tolist()) <= {0, 1}


def test_observation_statistics_come_with_the_agent(tmp_path):
    run_dir = _train(
        tmp_path, "ppo", "--env", "Pendulum-v1", "--steps", "1024",
        "--set", "agent.model_kwargs.normalize_observation=True",
        "--set", "runner.log_interval_steps=512", "--set", "runner.evaluate=False",
    )  # fmt: skip
    agent = rl_suite.load(run_dir)
    model = agent.agent.model
    assert float(model.obs_rms.count) > 0
    observation = np.array([0.5, -0.5, 3.0], np.float32)
    action, _ = agent.predict(observation, deterministic=True)
    normalized = (torch.as_tensor(observation) - model.obs_rms.mean) / model.obs_rms.var.sqrt()
    model.normalize_observation = False  # the same network on the normalised observation
    mu, _, _ = model(normalized.clamp(-10, 10).float(), None, None)
    assert np.allclose(action, mu.detach().numpy(), atol=1e-5)


def test_dqn_acts_greedily_when_deterministic(tmp_path):
    run_dir = _train(
        tmp_path, "dqn", "--preset", "cartpole-dqn", "--steps", "2000",
        "--set", "runner.log_interval_steps=1000", "--set", "runner.evaluate=False",
    )  # fmt: skip
    agent = rl_suite.load(run_dir)
    observations = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    actions, _ = agent.predict(observations, deterministic=True)
    q = agent.agent.model(torch.as_tensor(observations), None, None)
    assert actions.tolist() == q.argmax(-1).tolist()


def test_sac_actions_are_in_the_box_and_sampled_unless_deterministic(tmp_path):
    run_dir = _train(
        tmp_path, "sac", "--env", "Pendulum-v1", "--steps", "800",
        "--set", "algo_kwargs.min_steps_learn=300", "--set", "runner.log_interval_steps=400",
        "--set", "runner.evaluate=False",
    )  # fmt: skip
    agent = rl_suite.load(run_dir)
    observation = np.array([1.0, 0.0, 0.5], np.float32)
    first, _ = agent.predict(observation, deterministic=True)
    again, _ = agent.predict(observation, deterministic=True)
    assert first.shape == (1,) and -2 <= first[0] <= 2 and first == again
    sampled = np.array([agent.predict(observation)[0][0] for _ in range(20)])
    assert np.all(np.abs(sampled) <= 2) and sampled.std() > 0


def test_bad_observations_and_states_are_named(ppo_cartpole):
    agent = rl_suite.load(ppo_cartpole / "params.pt")
    with pytest.raises(ValueError, match=r"CartPole-v1 gives \(4,\)"):
        agent.predict(np.zeros(3))
    with pytest.raises(ValueError, match="keeps its recurrent state inside"):
        agent.predict(np.zeros(4), state=object())
    with pytest.raises(FileNotFoundError):
        rl_suite.load(ppo_cartpole / "nowhere")


def test_a_recurrent_agent_keeps_its_state_and_restarts_marked_episodes(tmp_path):
    run_dir = _train(
        tmp_path, "ppo", "--preset", "cartpole-masked-lstm", "--steps", "1024",
        "--set", "runner.log_interval_steps=512", "--set", "runner.evaluate=False",
    )  # fmt: skip
    agent, fresh = rl_suite.load(run_dir), rl_suite.load(run_dir)
    assert agent.recurrent
    observations = np.random.default_rng(1).normal(size=(4, 2, 2)).astype(np.float32)
    for observation in observations[:3]:
        agent.predict(observation, deterministic=True)
    policy = agent._deterministic  # (its state: buffers h and c, [layers, B, H])
    carried = policy.h[:, 1].clone()
    agent.predict(observations[3], episode_start=[True, False], deterministic=True)
    fresh.predict(observations[3], deterministic=True)  # a first step, for both
    assert torch.equal(policy.h[:, 0], fresh._deterministic.h[:, 0])  # restarted
    assert not torch.equal(policy.h[:, 1], fresh._deterministic.h[:, 1])  # carried on
    assert not torch.equal(policy.h[:, 1], carried)
    actions = [agent.predict(o, deterministic=False)[0] for o in observations]  # sampled
    assert all(a.shape == (2,) and set(a.tolist()) <= {0, 1} for a in actions)
