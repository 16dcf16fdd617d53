"""An env written for rsl_rl (a subclass of ``rsl_rl.env.VecEnv``, as Isaac Lab hands to
rsl_rl) trains with our PPO through ``RslRlVecEnvAdapter`` + ``BatchedSampler`` +
``OnPolicyRunner``: its time-outs become time-limit info (bootstrapped), its ``"critic"``
observation group reaches the critic, and the very same env object also runs under rsl_rl's
own runner (so the toy is a faithful ``VecEnv``).

rsl-rl-lib is a test tool (the nox ``integration`` session installs it), never a dependency.
"""

from __future__ import annotations

import csv

import pytest
import torch

from rl_agents import AsymmetricGaussianPgAgent
from rl_algos import PPO
from rl_arrays import buffer_method
from rl_runners import OnPolicyRunner, logger_context
from rl_samplers import ActorCriticObservation, BatchedSampler, RslRlVecEnvAdapter, TorchCartPole

rsl_rl_env = pytest.importorskip("rsl_rl.env", reason="rsl-rl-lib is a test tool")
tensordict = pytest.importorskip("tensordict")

NUM_ENVS, BATCH_T, MAX_STEPS = 32, 24, 40


class ToyCartPole(rsl_rl_env.VecEnv):
    """CartPole for rsl_rl: one real action thresholded at 0 (rsl_rl's policies are all
    continuous); groups ``"policy"`` (positions x, theta) and ``"critic"`` (the full state);
    ``time_outs`` after ``MAX_STEPS`` steps.  Records every step's dones and time-outs."""

    def __init__(self, num_envs: int = NUM_ENVS, seed: int = 0, device: str = "cpu"):
        self.cartpole = TorchCartPole(num_envs, device, MAX_STEPS, seed)
        self.num_envs, self.num_actions, self.device = num_envs, 1, self.cartpole.device
        self.max_episode_length, self.cfg = MAX_STEPS, {}
        self._observations = self._group(self.cartpole.reset())
        self.dones: list[torch.Tensor] = []
        self.time_outs: list[torch.Tensor] = []
        self.states: list[torch.Tensor] = []

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.cartpole.elapsed

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.cartpole.elapsed = value.to(torch.int64)

    def _group(self, state: torch.Tensor) -> tensordict.TensorDict:
        groups = {"policy": state[:, [0, 2]], "critic": state.clone()}
        return tensordict.TensorDict(groups, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> tensordict.TensorDict:
        return self._observations

    def step(self, actions: torch.Tensor):
        state, reward, terminated, truncated = self.cartpole.step((actions[:, 0] > 0).long())
        self._observations = self._group(state)
        time_outs = truncated & ~terminated
        self.dones.append(terminated | truncated)
        self.time_outs.append(time_outs)
        self.states.append(state.clone())
        return self._observations, reward, (terminated | truncated).long(), {"time_outs": time_outs}


def make_runner(env: ToyCartPole, n_itr: int) -> tuple[OnPolicyRunner, RslRlVecEnvAdapter]:
    adapter = RslRlVecEnvAdapter(env, obs_groups={"actor": ["policy"], "critic": ["critic"]})
    sampler = BatchedSampler(adapter.make_env, batch_T=BATCH_T, batch_B=NUM_ENVS)
    agent = AsymmetricGaussianPgAgent(
        model_kwargs=dict(hidden_sizes=[32, 32], hidden_nonlinearity=torch.nn.ELU)
    )
    algo = PPO(
        discount=0.99,
        gae_lambda=0.95,
        learning_rate=1e-3,
        linear_lr_schedule=False,
        desired_kl=0.01,
        epochs=5,
        minibatches=4,
        value_clip=0.2,
        clip_grad_norm=1.0,
    )
    device = torch.device(env.device)
    affinity = {"cuda_idx": device.index or 0} if device.type == "cuda" else None
    runner = OnPolicyRunner(
        algo,
        agent,
        sampler,
        n_steps=n_itr * BATCH_T * NUM_ENVS,
        seed=0,
        affinity=affinity,
        log_interval_steps=1,
    )
    return runner, adapter


def first_linear(module: torch.nn.Module) -> torch.nn.Linear:
    return next(m for m in module.modules() if isinstance(m, torch.nn.Linear))


GPU = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
def test_a_vec_env_of_rsl_rl_trains_with_our_ppo(tmp_path, device):
    env = ToyCartPole(device=device)
    assert isinstance(env, rsl_rl_env.VecEnv)
    n_itr = 4
    runner, adapter = make_runner(env, n_itr)
    assert adapter.critic_groups == ["critic"] and adapter.critic_observation_space.shape == (4,)
    batch = []
    optimize = runner.algo.optimize_agent

    def keep_batch(itr, samples_):  # the batches the algorithm learns from
        batch.append(buffer_method(samples_.env, "clone"))  # (the buffer is reused)
        return optimize(itr, samples_)

    runner.algo.optimize_agent = keep_batch
    with logger_context(tmp_path, 0, "rsl_rl_adapter", snapshot_mode="none") as run_dir, runner:
        runner.learn()
    # The env was stepped exactly by the training batches (the sampler's probe steps nothing).
    assert len(env.dones) == n_itr * BATCH_T
    dones, time_outs = torch.stack(env.dones), torch.stack(env.time_outs)
    assert time_outs.any() and (dones & ~time_outs).any()  # both kinds of episode end
    # Time-outs are the time-limit info the algorithm bootstraps from; terminations are not.
    timeout = torch.cat([b.env_info.timeout for b in batch])
    assert torch.equal(torch.cat([b.done for b in batch]), dones)
    assert torch.equal(timeout, time_outs)
    # The critic's group reaches the critic: the batch holds the full state beside the
    # policy's positions, and the model's critic reads 4 inputs where the actor reads 2.
    observation = torch.cat([b.observation.critic for b in batch])
    assert torch.equal(observation[1:], torch.stack(env.states)[:-1])
    assert isinstance(batch[0].observation, ActorCriticObservation)
    assert torch.equal(torch.cat([b.observation.actor for b in batch]), observation[..., [0, 2]])
    model = runner.agent.model
    assert first_linear(model.actor).in_features == 2
    assert first_linear(model.critic).in_features == 4
    # And the value depends on the critic's part alone.
    prev = (torch.zeros(1, 1, device=device), torch.zeros(1, device=device))

    def value(actor, critic):
        return runner.agent.value(ActorCriticObservation(actor, critic), *prev)

    actor, critic = torch.zeros(1, 2, device=device), torch.zeros(1, 4, device=device)
    assert not torch.equal(value(actor, critic), value(actor, critic + 1))
    assert torch.equal(value(actor, critic), value(actor + 1, critic))
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["CumSteps"]) for r in rows][-1] == n_itr * BATCH_T * NUM_ENVS
    assert float(rows[-1]["ReturnAverage"]) > 0


def test_the_toy_env_also_runs_under_rsl_rls_own_runner():
    """The same class under ``rsl_rl.runners.OnPolicyRunner``: one iteration, its groups
    given as the same ``obs_groups`` (so the adapter test uses a faithful ``VecEnv``)."""
    from rsl_rl.runners import OnPolicyRunner as RslRlRunner

    mlp = {"class_name": "rsl_rl.models:MLPModel", "hidden_dims": [32], "activation": "elu"}
    config = {
        "num_steps_per_env": 8,
        "save_interval": 10,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "actor": {
            **mlp,
            "distribution_cfg": {"class_name": "rsl_rl.modules:GaussianDistribution"},
        },
        "critic": dict(mlp),
        "algorithm": {"class_name": "rsl_rl.algorithms:PPO"},
    }
    env = ToyCartPole(num_envs=8)
    runner = RslRlRunner(env, config, log_dir=None, device="cpu")
    runner.learn(1)
    assert len(env.dones) == 8
