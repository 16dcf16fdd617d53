"""The batched on-policy path does the same fixed work per iteration at any number of
environments, counted on the CPU: what a GPU pays for per iteration is a launch per
operation and a wait per read of the device on the host, so these counts are its fixed
cost, and a count that grows with the environments is time that grows with them there.

One iteration of ``OnPolicyRunner`` (``BatchedSampler`` over ``TorchPendulum`` whose
episodes end every 3 steps, a Gaussian agent, PPO with an adaptive learning rate, clipped
values and normalised advantages) at 16 and at 512 environments: the same host reads (none
while sampling), the same trajectory-info objects (the runner's window, not one per
episode), the same aten operations.  The batches stay under 1,024 rows, below which the
twin MLPs run as one batched pair: their CPU-only chunked path (never taken off the CPU)
would add operations per chunk here that a GPU never runs.

And the adaptive learning rate follows rsl_rl's rule on rsl_rl's statistic: the mean
KL(old || new) over every step of the minibatch, checked against a hand computation.
"""

import collections
import functools
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

import rl_agents
import rl_algos
import rl_samplers
from rl_arrays import AgentSamplesBsv, EnvSamples, Samples, namedarraytuple
from rl_runners import OnPolicyRunner, logger_context

SIZES = (16, 512)
T, EPOCHS, MINIBATCHES, WINDOW = 4, 2, 4, 10
aten = torch.ops.aten


class HostReads(TorchDispatchMode):
    """Counts the operations that read a tensor on the host: a scalar (``item``, ``bool``,
    ``float``, ``int``), a data-dependent shape (``nonzero``, boolean indexing), and the
    Python calls ``tolist``, ``numpy`` and ``cpu`` (which a CPU tensor answers without an
    operation), by kind."""

    SCALAR_OR_SHAPE = frozenset(
        [aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default]
    )
    INDEXING = frozenset([aten.index.Tensor, aten.index_put_.default, aten.index_put.default])

    def __init__(self, monkeypatch):
        super().__init__()
        self.reads = collections.Counter()
        self.active = False  # (counting only inside its block)
        for name in ("tolist", "numpy", "cpu"):
            method = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counted(name, method))

    def _counted(self, name, method):
        def counted(tensor, *args, **kwargs):
            if self.active:
                self.reads[name] += 1
            return method(tensor, *args, **kwargs)

        return counted

    def __enter__(self):
        self.active = True
        return super().__enter__()

    def __exit__(self, *exc):
        self.active = False
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.SCALAR_OR_SHAPE:
            self.reads[str(func)] += 1
        elif func in self.INDEXING and any(
            i is not None and i.dtype == torch.bool for i in args[1]
        ):
            self.reads["boolean index"] += 1
        return func(*args, **(kwargs or {}))


class CountedTrajInfo(rl_samplers.TrajInfo):
    made = 0

    def __init__(self, **kwargs):
        type(self).made += 1
        super().__init__(**kwargs)


def make_runner(n_envs):
    sampler = rl_samplers.BatchedSampler(
        functools.partial(rl_samplers.TorchPendulum, max_episode_steps=3),
        batch_T=T,
        batch_B=n_envs,
        TrajInfoCls=CountedTrajInfo,
    )
    agent = rl_agents.MujocoFfAgent(model_kwargs=dict(hidden_sizes=[32, 32]))
    algo = rl_algos.PPO(
        epochs=EPOCHS,
        minibatches=MINIBATCHES,
        gae_lambda=0.95,
        value_clip=0.2,
        normalize_advantage=True,
        linear_lr_schedule=False,
        desired_kl=0.01,
    )
    return OnPolicyRunner(algo, agent, sampler, seed=0, log_traj_window=WINDOW)


def one_iteration(n_envs, tmp_path, monkeypatch):
    """``(host reads while sampling, while updating, in the whole iteration, trajectory
    infos made, aten operations)`` of the third iteration (the first two warm up)."""
    runner = make_runner(n_envs)
    with runner, logger_context(tmp_path / str(n_envs), 0, "scale", snapshot_mode="none"):
        runner.learn(2)
        sampling, updating = HostReads(monkeypatch), HostReads(monkeypatch)
        for counter, owner, name in (
            (sampling, runner.sampler, "obtain_samples"),
            (updating, runner.algo, "optimize_agent"),
        ):
            monkeypatch.setattr(owner, name, _inside(counter, getattr(owner, name)))
        CountedTrajInfo.made = 0
        with HostReads(monkeypatch) as whole, profile(activities=[ProfilerActivity.CPU]) as prof:
            runner.learn(1)  # (a progress row is written at its end: the log's reads too)
    operations = sum(1 for event in prof.events() if event.name.startswith("aten::"))
    return sampling.reads, updating.reads, whole.reads, CountedTrajInfo.made, operations


def _inside(counter, method):
    def counted(*args, **kwargs):
        with counter:
            return method(*args, **kwargs)

    return counted


def test_an_iteration_costs_the_same_at_any_number_of_environments(tmp_path, monkeypatch):
    small, large = (one_iteration(n, tmp_path, monkeypatch) for n in SIZES)
    assert small == large, f"{SIZES[0]} envs: {small}\n{SIZES[1]} envs: {large}"
    sampling, updating, whole, infos, _ = large
    assert sum(sampling.values()) == 0  # stepping never waits for the device
    # PPO reads its diagnostics and its input check once; the adaptive learning rate
    # follows each minibatch's KL on the device (rsl_rl reads it on the host).
    assert sum(updating.values()) <= 2
    assert sum(whole.values()) <= sum(updating.values()) + 4  # episodes, the log
    assert infos == WINDOW  # the runner's window, built from the device: not one per episode


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_batched_path_stays_on_the_gpu(tmp_path):
    """An env declared on "cuda" (no index): the batch, the agent's outputs and the update
    stay on that GPU, whose tensors say "cuda:0"."""
    sampler = rl_samplers.BatchedSampler(
        functools.partial(rl_samplers.TorchCartPole, device="cuda"), batch_T=8, batch_B=256
    )
    agent = rl_agents.CategoricalFfAgent()
    algo = rl_algos.PPO(linear_lr_schedule=False, desired_kl=0.01, gae_lambda=0.95)
    runner = OnPolicyRunner(algo, agent, sampler, seed=0, affinity=dict(cuda_idx=0))
    with runner, logger_context(tmp_path, 0, "gpu", snapshot_mode="none"):
        runner.learn(3)
        samples, infos = sampler.obtain_samples(3)
    device = torch.zeros(0, device="cuda").device
    assert sampler.device == agent.device == agent.output_device == device
    assert samples.env.observation.device == samples.agent.action.device == device
    assert len(infos) > 0 and all(math.isfinite(info.Return) for info in infos[-5:])


# ------------------------------------------------------------ the adaptive learning rate

DistInfoStd = namedarraytuple("DistInfoStd", ["mean", "log_std"])
AgentInfo = namedarraytuple("AgentInfo", ["dist_info", "value"])


def rsl_rl_rule(learning_rate, kl, desired_kl):
    """rsl_rl's adaptive schedule, written out."""
    if kl > 2 * desired_kl:
        return max(1e-5, learning_rate / 1.5)
    if 0 < kl < desired_kl / 2:
        return min(1e-2, learning_rate * 1.5)
    return learning_rate


@pytest.mark.parametrize("desired_kl", [0.01, 1.0, 2.0])
def test_the_adaptive_learning_rate_is_rsl_rls_on_the_minibatch_mean_kl(desired_kl):
    """One minibatch whose sampling policy differs from the agent's: before the step the
    rate moves by rsl_rl's rule on the mean over every step of the analytic Gaussian
    KL(old || new) summed over the action dims, the time-out step included (rsl_rl does
    not leave time-outs out of it; the losses do)."""
    torch.manual_seed(0)
    B, A = 3, 2
    spaces = rl_samplers.TorchPendulum(1).spaces
    spaces = spaces._replace(action=rl_samplers.FloatBox(-1, 1, shape=(A,)))
    agent = rl_agents.MujocoFfAgent(model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(spaces)
    algo = rl_algos.PPO(
        learning_rate=1e-3,
        desired_kl=desired_kl,
        linear_lr_schedule=False,
        epochs=1,
        minibatches=1,
        gae_lambda=0.95,
    )
    algo.initialize(agent, n_itr=1, mid_batch_reset=True)
    observation = torch.randn(T, B, 3)
    new_mean, new_log_std, value = (x.detach() for x in agent.model(observation, None, None))
    old_mean = new_mean + torch.linspace(-0.3, 0.3, T * B * A).reshape(T, B, A)
    old_log_std = new_log_std + 0.2
    timeout = torch.zeros(T, B, dtype=torch.bool)
    timeout[1, 2] = True
    old_mean[1, 2] += 3.0  # a large KL at the time-out step: its weight decides the rate
    samples = _samples(observation, DistInfoStd(old_mean, old_log_std), value, timeout)
    old_std, new_std = old_log_std.exp(), new_log_std.exp()
    kl = (
        torch.log(new_std / old_std)
        + (old_std**2 + (old_mean - new_mean) ** 2) / (2 * new_std**2)
        - 0.5
    ).sum(-1)
    mean_kl = float(kl.mean())
    expected = rsl_rl_rule(1e-3, mean_kl, desired_kl)
    opt_info = algo.optimize_agent(0, samples)
    assert opt_info.learningRate == [pytest.approx(expected)]
    without_timeout = float(kl[~timeout].mean())  # what averaging the losses' steps would give
    if desired_kl == 1.0:  # here the steps of the losses would have moved it up
        assert rsl_rl_rule(1e-3, without_timeout, desired_kl) != expected


def test_separate_clipping_clips_the_policys_and_the_values_gradients_as_rsl_rl_does():
    """``clip_grad_separately``: each network's gradient norm clipped on its own (rsl_rl's
    ``clip_grad_norm_`` on the actor, then on the critic), checked against the same update
    unclipped; and refused, before training, for an agent whose networks share weights."""
    torch.manual_seed(1)
    spaces = rl_samplers.TorchPendulum(1).spaces
    agents = [rl_agents.MujocoFfAgent(model_kwargs=dict(hidden_sizes=[8])) for _ in range(2)]
    for agent in agents:
        agent.initialize(spaces)
    agents[1].load_state_dict(agents[0].state_dict())
    samples = _random_samples(agents[0], spaces)
    max_norm = 0.05
    for agent, clip in zip(agents, (max_norm, None), strict=True):
        algo = rl_algos.PPO(
            clip_grad_norm=clip,
            clip_grad_separately=True,
            OptimCls=torch.optim.SGD,
            minibatches=1,
            epochs=1,
        )
        algo.initialize(agent, n_itr=1, mid_batch_reset=True)
        algo.optimize_agent(0, samples)
    clipped, raw = (agent.gradient_groups() for agent in agents)
    for got, grads in zip(clipped, raw, strict=True):
        norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        assert norm > max_norm  # (so that clipping happened)
        for g_clipped, g_raw in zip(got, grads, strict=True):
            torch.testing.assert_close(g_clipped, g_raw * max_norm / (norm + 1e-6))
    shared = rl_agents.MujocoLstmAgent(model_kwargs=dict(hidden_sizes=[8], lstm_size=8))
    shared.initialize(spaces)  # (one LSTM and one head for the policy and the value)
    with pytest.raises(TypeError, match="gradient_groups"):
        rl_algos.PPO(clip_grad_separately=True).initialize(shared, n_itr=1)


def _random_samples(agent, spaces, T=4, B=3):
    """A batch sampled (in its distribution) by ``agent``, random actions and rewards."""
    observation = torch.randn(T, B, *spaces.observation.shape)
    with torch.no_grad():  # (copies: log_std is a view of the parameter the steps change)
        mean, log_std, value = (x.clone() for x in agent.model(observation, None, None))
    timeout = torch.zeros(T, B, dtype=torch.bool)
    return _samples(observation, DistInfoStd(mean, log_std), value, timeout)


def _samples(observation, dist_info, value, timeout):
    """A ``[T, B]`` batch with these sampling-time outputs, random actions and rewards; done
    exactly at the time-outs."""
    T, B, A = dist_info.mean.shape
    return Samples(
        agent=AgentSamplesBsv(
            action=torch.randn(T, B, A),
            prev_action=torch.zeros(T, B, A),
            agent_info=AgentInfo(dist_info, value),
            bootstrap_value=torch.zeros(B),
        ),
        env=EnvSamples(
            observation=observation,
            reward=torch.randn(T, B),
            prev_reward=torch.zeros(T, B),
            done=timeout.clone(),
            env_info=namedarraytuple("EnvInfo", ["timeout"])(timeout),
        ),
    )
