"""``OnPolicyRunner`` end to end, the rsl_rl way: ``rl_algos.PPO`` with an adaptive learning
rate, an ``rl_agents`` categorical agent normalising its observations, and
``rl_samplers.BatchedSampler`` over ``TorchCartPole`` (gymnasium's CartPole-v1 in torch)
with 256 environments, trained in ``learn`` calls until the mean return of the last 100
training episodes (``ReturnAverage`` in progress.csv) reaches 475, within 2 million steps;
then the deployed policy (``get_inference_policy``: greedy actions, no gradients) must
score 475 on average too, over the first episode of 64 fresh environments.

Seeds: ``RL_SUITE_LEARNING_SEEDS`` (comma-separated, default ``0``) as in
``test_learning.py``; at least 4 of every 5 must reach the bar.  About 10 to 25 s a seed on
a 2-core machine (250k to 500k steps).
"""

import csv
import os

import pytest
import torch

import rl_agents
import rl_algos
import rl_samplers
from rl_runners import OnPolicyRunner, logger_context

SEEDS = [int(seed) for seed in os.environ.get("RL_SUITE_LEARNING_SEEDS", "0").split(",")]
BATCH_T, N_ENVS = 24, 256
MAX_STEPS, BAR = 2_000_000, 475
ITERATIONS_PER_LEARN = 5

# rsl_rl's PPO settings: GAE, several epochs of minibatches, clipped value loss, advantages
# standardised, the learning rate adapted to a target KL (no schedule that needs an end).
PPO_KWARGS = dict(
    discount=0.99,
    gae_lambda=0.95,
    learning_rate=1e-3,
    epochs=5,
    minibatches=4,
    ratio_clip=0.2,
    value_clip=0.2,
    value_loss_coeff=1.0,
    entropy_loss_coeff=0.0,
    clip_grad_norm=1.0,
    normalize_advantage=True,
    linear_lr_schedule=False,
    desired_kl=0.01,
)


def make_runner(seed, n_envs=N_ENVS):
    sampler = rl_samplers.BatchedSampler(rl_samplers.TorchCartPole, batch_T=BATCH_T, batch_B=n_envs)
    agent = rl_agents.CategoricalFfAgent(model_kwargs=dict(normalize_observation=True))
    return OnPolicyRunner(
        rl_algos.PPO(**PPO_KWARGS),
        agent,
        sampler,
        seed=seed,
        log_interval_steps=BATCH_T * n_envs,  # a row every iteration, as rsl_rl logs
        affinity=dict(master_torch_threads=1),  # small networks: one thread is fastest
    )


def read_rows(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def learn_until_solved(seed, log_dir):
    """``learn`` calls until a row's ReturnAverage reaches the bar or the step budget is
    spent; returns the rows and the inference policy on the CPU."""
    with make_runner(seed) as runner, logger_context(log_dir, seed, "ppo_cartpole") as run_dir:
        while runner.current_learning_iteration * BATCH_T * N_ENVS < MAX_STEPS:
            runner.learn(ITERATIONS_PER_LEARN)
            rows = read_rows(run_dir)
            if float(rows[-1]["ReturnAverage"]) >= BAR:
                break
        return rows, runner.get_inference_policy(device="cpu")


def deployed_returns(policy, n_envs=64, seed=123):
    """The return of each fresh environment's first episode under ``policy``."""
    env = rl_samplers.TorchCartPole(n_envs, seed=seed)
    observation = env.reset()
    returns = torch.zeros(n_envs)
    running = torch.ones(n_envs, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        action = policy(observation)
        assert action.shape == (n_envs,) and action.dtype == torch.int64
        assert not action.requires_grad and torch.equal(policy(observation), action)
        observation, reward, terminated, truncated = env.step(action)
        returns += reward * running
        running &= ~(terminated | truncated)
    return returns


@pytest.mark.slow
def test_ppo_learns_cartpole_with_256_environments_in_learn_calls(tmp_path):
    best, deployed = {}, {}
    for seed in SEEDS:
        rows, policy = learn_until_solved(seed, tmp_path)
        steps = [int(r["CumSteps"]) for r in rows]
        assert steps == [BATCH_T * N_ENVS * (i + 1) for i in range(len(rows))]  # one per itr
        best[seed] = max(float(r["ReturnAverage"]) for r in rows if r["ReturnAverage"])
        deployed[seed] = float(deployed_returns(policy).mean())
    passes = sum(best[s] >= BAR and deployed[s] >= BAR for s in SEEDS)
    assert passes >= len(SEEDS) - len(SEEDS) // 5, (
        f"best ReturnAverage by seed: {best}; deployed policy's mean return: {deployed}"
    )


def assert_same(a, b, where="checkpoint"):
    """Nested dicts / lists of tensors and numbers, equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def test_save_and_load_carry_the_ppo_agent_its_normaliser_and_optimizer(tmp_path):
    """A checkpoint of a short run restores into a fresh runner (agent with its observation
    statistics, PPO's optimizer with the adapted learning rate and minibatch generator),
    and the next learn continues its curve."""
    with make_runner(1, n_envs=16) as runner, logger_context(tmp_path, 0, "ppo") as run_dir:
        runner.learn(3)
        path = runner.save(tmp_path / "model_3.pt", infos={"num_envs": 16, "task": "cartpole"})
    saved = torch.load(path, weights_only=True)
    assert saved["infos"] == {"num_envs": 16, "task": "cartpole"}
    assert saved["agent_state_dict"]["obs_rms.count"] > 0  # the normaliser's statistics
    assert saved["optimizer_state_dict"]["optimizer"]["state"]  # Adam's moments

    fresh = make_runner(None, n_envs=16)
    assert fresh.load(path) == saved["infos"]
    assert fresh.seed == 1 and fresh.current_learning_iteration == 3
    restored = torch.load(fresh.save(tmp_path / "restored.pt"), weights_only=True)
    assert_same(saved["agent_state_dict"], restored["agent_state_dict"])
    assert_same(saved["optimizer_state_dict"], restored["optimizer_state_dict"])
    with logger_context(tmp_path, 0, "ppo"):
        fresh.learn(2)
    fresh.close()
    assert [int(r["CumSteps"]) for r in read_rows(run_dir)] == [384 * i for i in range(1, 6)]

    without = make_runner(None, n_envs=16)
    without.load(path, load_optimizer=False)
    kept = torch.load(without.save(tmp_path / "without.pt"), weights_only=True)
    without.close()
    assert_same(saved["agent_state_dict"], kept["agent_state_dict"])
    assert kept["optimizer_state_dict"]["optimizer"]["state"] == {}  # a fresh Adam


def test_a_gaussian_agent_trains_from_the_batched_sampler(tmp_path):
    """The continuous-action path (MujocoFfAgent on TorchPendulum): the batch the sampler
    writes must hold no autograd history, or PPO's second minibatch would fail."""
    sampler = rl_samplers.BatchedSampler(rl_samplers.TorchPendulum, batch_T=16, batch_B=32)
    runner = OnPolicyRunner(
        rl_algos.PPO(**PPO_KWARGS),
        rl_agents.MujocoFfAgent(),
        sampler,
        seed=0,
        log_interval_steps=16 * 32,
    )
    with logger_context(tmp_path, 0, "gaussian"), runner:
        runner.learn(3)
    assert runner.current_learning_iteration == 3
