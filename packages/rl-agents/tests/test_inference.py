"""Deployable policies: ``agent.inference_policy()`` and ``export_policy`` act as the agent
does in deterministic evaluation, in Python, as TorchScript and as ONNX (run with
onnxruntime; skipped without the ``onnx`` extra), with non-trivial observation
normalisation statistics, and for recurrent policies over a sequence with resets."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest
import torch
from rl_agents_testkit import (
    ATARI_FF_KWARGS,
    ATARI_LSTM_KWARGS,
    ATARI_SPACES,
    MUJOCO_SPACES,
    VECTOR_DISCRETE_SPACES,
    Box,
    Discrete,
)
from torch.testing import assert_close

import rl_agents as ra
from rl_arrays import EnvSpaces, namedarraytuple

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
needs_onnx = pytest.mark.skipif(
    not HAS_ONNX, reason="needs the onnx extra (onnx, onnxscript) and onnxruntime"
)

B, T = 3, 7

# Asymmetric observations: a stand-in for rl-samplers' ActorCriticObservation and Composite.
Parts = namedarraytuple("Parts", ["actor", "critic"])


class PartsSpace:
    shape = Parts(actor=(4,), critic=(6,))


ASYM_DISCRETE = EnvSpaces(observation=PartsSpace(), action=Discrete(3))
ASYM_CONTINUOUS = EnvSpaces(observation=PartsSpace(), action=Box((2,)))
BOUNDED = EnvSpaces(
    observation=Box((5,)),
    action=type("Bounds", (), {"shape": (2,), "low": [-2.0, 0.0], "high": [1.0, 3.0]})(),
)

NORM = dict(normalize_observation=True)
SMALL_QPG = dict(model_kwargs=dict(hidden_sizes=[16]), q_model_kwargs=dict(hidden_sizes=[16]))

# id: (agent class, spaces, constructor kwargs)
FEED_FORWARD = {
    "atari_ff": (ra.AtariFfAgent, ATARI_SPACES, dict(model_kwargs=ATARI_FF_KWARGS)),
    "mujoco_ff": (
        ra.MujocoFfAgent,
        MUJOCO_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], **NORM)),
    ),
    "categorical_ff": (
        ra.CategoricalFfAgent,
        VECTOR_DISCRETE_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], **NORM)),
    ),
    "asym_categorical_ff": (
        ra.AsymmetricCategoricalPgAgent,
        ASYM_DISCRETE,
        dict(model_kwargs=dict(hidden_sizes=[16], **NORM)),
    ),
    "asym_gaussian_ff": (
        ra.AsymmetricGaussianPgAgent,
        ASYM_CONTINUOUS,
        dict(model_kwargs=dict(hidden_sizes=[16], **NORM)),
    ),
    "dqn_dueling": (
        ra.VectorDqnAgent,
        VECTOR_DISCRETE_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], dueling=True)),
    ),
    "cat_dqn": (
        ra.VectorCatDqnAgent,
        VECTOR_DISCRETE_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], n_atoms=11, dueling=True)),
    ),
    "ddpg": (ra.DdpgAgent, BOUNDED, SMALL_QPG),
    "td3": (ra.Td3Agent, BOUNDED, SMALL_QPG),
    "sac": (ra.SacAgent, BOUNDED, SMALL_QPG),
}
RECURRENT = {
    "atari_lstm": (ra.AtariLstmAgent, ATARI_SPACES, dict(model_kwargs=ATARI_LSTM_KWARGS)),
    "mujoco_lstm": (
        ra.MujocoLstmAgent,
        MUJOCO_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], lstm_size=8, **NORM)),
    ),
    "categorical_lstm": (
        ra.CategoricalLstmAgent,
        VECTOR_DISCRETE_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], lstm_size=8, **NORM)),
    ),
    "alternating_mujoco_lstm": (
        ra.AlternatingMujocoLstmAgent,
        MUJOCO_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], lstm_size=8)),
    ),
    "asym_categorical_lstm": (
        ra.AsymmetricRecurrentCategoricalPgAgent,
        ASYM_DISCRETE,
        dict(model_kwargs=dict(hidden_sizes=[16], lstm_size=8, **NORM)),
    ),
    "asym_gaussian_lstm": (
        ra.AsymmetricRecurrentGaussianPgAgent,
        ASYM_CONTINUOUS,
        dict(model_kwargs=dict(hidden_sizes=[16], lstm_size=8, critic_lstm_size=5, **NORM)),
    ),
    "r2d1": (
        ra.VectorR2d1Agent,
        VECTOR_DISCRETE_SPACES,
        dict(model_kwargs=dict(hidden_sizes=[16], lstm_size=8, head_size=8)),
    ),
}


def _deterministic_kwargs(cls) -> dict:
    if issubclass(cls, ra.DqnAgent):
        return dict(eps_eval=0.0)
    if issubclass(cls, (ra.DdpgAgent, ra.SacAgent)):
        return {}
    return dict(deterministic_eval=True)


def _set_statistics(agent, seed: int = 3) -> None:
    """Non-trivial normalisation statistics (one variance tiny, so that clipping acts)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in agent.model.modules():
            if isinstance(module, ra.RunningMeanStdModel):
                module.mean.copy_(torch.rand(module.mean.shape, generator=gen) * 2 - 1)
                module.var.copy_(torch.rand(module.var.shape, generator=gen) * 3 + 0.2)
                module.var.view(-1)[0] = 1e-3
                module.count.fill_(100)


def make(case: tuple, seed: int = 0):
    cls, spaces, kwargs = case
    torch.manual_seed(seed)
    agent = cls(**kwargs, **_deterministic_kwargs(cls))
    agent.initialize(spaces)
    if isinstance(agent, ra.CatDqnAgent):
        agent.give_V_min_max(-3.0, 12.0)
    _set_statistics(agent)
    agent.eval_mode(0)
    return agent


def observations(spaces, lead: tuple[int, ...], gen: torch.Generator):
    """``(agent observation, policy observation)``: the actor part alone for asymmetric
    agents."""
    shape = spaces.observation.shape
    if isinstance(shape, Parts):
        actor = torch.randn(*lead, *shape.actor, generator=gen) * 2
        critic = torch.randn(*lead, *shape.critic, generator=gen)
        return Parts(actor=actor, critic=critic), actor
    if len(shape) == 3:
        image = torch.randint(0, 256, (*lead, *shape), generator=gen).to(torch.uint8)
        return image, image
    observation = torch.randn(*lead, *shape, generator=gen) * 2
    return observation, observation


def null_action(spaces, batch: int) -> torch.Tensor:
    if hasattr(spaces.action, "n"):
        return torch.zeros(batch, dtype=torch.int64)
    return torch.zeros(batch, *spaces.action.shape)


def assert_same_actions(actual, expected) -> None:
    actual = torch.as_tensor(actual)
    if expected.is_floating_point():
        assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(actual.to(expected.dtype), expected)


def onnx_session(path):
    import onnxruntime

    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------ feed-forward


@pytest.mark.parametrize("case", FEED_FORWARD.values(), ids=FEED_FORWARD.keys())
def test_feed_forward_policy_and_torchscript_match_the_agent(case, tmp_path):
    agent = make(case)
    _, spaces, _ = case
    policy = agent.inference_policy()
    assert isinstance(policy, ra.InferencePolicy)
    gen = torch.Generator().manual_seed(1)
    agent_obs, obs = observations(spaces, (B,), gen)
    expected = agent.step(agent_obs, null_action(spaces, B), torch.zeros(B)).action
    assert_same_actions(policy(obs), expected)

    path = ra.export_policy(agent, tmp_path / "policy.pt", example_observation=obs)
    loaded = torch.jit.load(str(path))
    assert_same_actions(loaded(obs), expected)
    loaded.reset()  # feed-forward: a no-op, there for uniform deployment code

    for _ in range(3):  # more random batches through the same exported module
        agent_obs, obs = observations(spaces, (B,), gen)
        expected = agent.step(agent_obs, null_action(spaces, B), torch.zeros(B)).action
        assert_same_actions(loaded(obs), expected)
        assert_same_actions(policy(obs), expected)


@needs_onnx
@pytest.mark.parametrize("case", FEED_FORWARD.values(), ids=FEED_FORWARD.keys())
def test_feed_forward_onnx_matches_the_agent(case, tmp_path):
    agent = make(case)
    _, spaces, _ = case
    gen = torch.Generator().manual_seed(2)
    agent_obs, obs = observations(spaces, (B,), gen)
    path = ra.export_policy(agent, tmp_path / "policy.onnx", "onnx", example_observation=obs)
    session = onnx_session(path)
    assert [i.name for i in session.get_inputs()] == ["observation"]
    for _ in range(3):
        expected = agent.step(agent_obs, null_action(spaces, B), torch.zeros(B)).action
        (action,) = session.run(None, {"observation": obs.numpy()})
        assert_same_actions(action, expected)
        agent_obs, obs = observations(spaces, (B,), gen)


def test_policy_is_a_frozen_independent_copy():
    agent = make(FEED_FORWARD["mujoco_ff"])
    policy = agent.inference_policy()
    gen = torch.Generator().manual_seed(4)
    _, obs = observations(MUJOCO_SPACES, (B,), gen)
    before = policy(obs)
    assert not policy.training
    assert all(not p.requires_grad for p in policy.parameters())
    assert not before.requires_grad
    agent_tensors = {t.data_ptr() for t in (*agent.model.parameters(), *agent.model.buffers())}
    assert not agent_tensors & {t.data_ptr() for t in (*policy.parameters(), *policy.buffers())}
    # Later training (parameters and statistics) leaves the policy as it was.
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(1.0)
    agent.update_obs_rms(torch.randn(10, 5))
    agent.train_mode(0)
    assert_close(policy(obs), before)


def test_asymmetric_policy_holds_the_actor_only():
    agent = make(FEED_FORWARD["asym_gaussian_ff"])
    names = [name for name, _ in agent.inference_policy().named_parameters()]
    assert names and not any("critic" in name or "log_std" in name for name in names)


def test_feed_forward_policy_is_traceable():
    agent = make(FEED_FORWARD["categorical_ff"])
    policy = agent.inference_policy()
    _, obs = observations(VECTOR_DISCRETE_SPACES, (B,), torch.Generator().manual_seed(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what tracing says about shapes read as Python ints
        traced = torch.jit.trace(policy, (obs,))
    assert torch.equal(traced(obs), policy(obs))


def test_exported_module_serves_its_batch_size_only(tmp_path):
    agent = make(FEED_FORWARD["mujoco_ff"])
    path = ra.export_policy(agent, tmp_path / "policy.pt")  # default: one zero observation
    loaded = torch.jit.load(str(path))
    observation = torch.randn(1, 5)
    expected = agent.step(observation, torch.zeros(1, 2), torch.zeros(1)).action
    assert_same_actions(loaded(observation), expected)
    with pytest.raises((RuntimeError, torch.jit.Error), match="batches of 1 observations, got 4"):
        loaded(torch.randn(4, 5))


def test_export_checks_its_arguments(tmp_path, monkeypatch):
    agent = make(FEED_FORWARD["mujoco_ff"])
    with pytest.raises(ValueError, match="format must be one of"):
        ra.export_policy(agent, tmp_path / "p", format="tflite")
    with pytest.raises(ValueError, match=r"example_observation must be a batch \[B, 5\]"):
        ra.export_policy(agent, tmp_path / "p", example_observation=torch.zeros(5))
    with pytest.raises(TypeError, match="inference_policy"):
        ra.export_policy(torch.nn.Linear(2, 2), tmp_path / "p")
    with pytest.raises(FileNotFoundError):
        ra.export_policy(agent, tmp_path / "missing" / "p.pt")
    unready = ra.MujocoFfAgent()
    with pytest.raises(RuntimeError, match="initialize"):
        unready.inference_policy()
    # Without the onnx extra: a clear ImportError naming it, before any work.
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"rl-agents\[onnx\]"):
        ra.export_policy(agent, tmp_path / "p.onnx", format="onnx")
    assert not list(tmp_path.iterdir())  # nothing written by any of these


# ---------------------------------------------------------------------- recurrent


def agent_rollout(agent, spaces, observations_, rewards, resets):
    """The agent's actions over a sequence, resetting as a sampler does: ``resets[t]`` is
    None, "all" or a [B] mask of the environments whose episode restarts before step t
    (their state, previous action and previous reward zeroed)."""
    agent.reset()
    prev_action, prev_reward = null_action(spaces, B), torch.zeros(B)
    actions = []
    for t, observation in enumerate(observations_):
        if resets[t] is not None:
            mask = torch.ones(B, dtype=torch.bool) if resets[t] == "all" else resets[t]
            if resets[t] == "all":
                agent.reset()
            else:
                for b in torch.nonzero(mask).flatten().tolist():
                    agent.reset_one(b)
            prev_action[mask], prev_reward[mask] = 0, 0.0
        action = agent.step(observation, prev_action, prev_reward).action
        actions.append(action)
        prev_action, prev_reward = action.clone(), rewards[t].clone()
    return actions


def policy_rollout(policy, observations_, rewards, resets):
    """The same with a policy that keeps the state itself; rewards as the caller sees them."""
    policy.reset()
    prev_reward = torch.zeros(B)
    actions = []
    for t, observation in enumerate(observations_):
        if resets[t] is not None:
            mask = torch.ones(B, dtype=torch.bool) if resets[t] == "all" else resets[t]
            policy.reset() if resets[t] == "all" else policy.reset(mask)
            prev_reward[mask] = 0.0
        actions.append(policy(observation, prev_reward))
        prev_reward = rewards[t].clone()
    return actions


def sequence(spaces, seed: int = 6):
    gen = torch.Generator().manual_seed(seed)
    pairs = [observations(spaces, (B,), gen) for _ in range(T)]
    rewards = [torch.randn(B, generator=gen) for _ in range(T)]
    resets: list = [None] * T
    resets[3] = torch.tensor([False, True, False])  # one environment restarts
    resets[5] = "all"
    return [p[0] for p in pairs], [p[1] for p in pairs], rewards, resets


@pytest.mark.parametrize("case", RECURRENT.values(), ids=RECURRENT.keys())
def test_recurrent_policy_and_torchscript_match_the_agent(case, tmp_path):
    agent = make(case)
    _, spaces, _ = case
    agent_obs, obs, rewards, resets = sequence(spaces)
    expected = agent_rollout(agent, spaces, agent_obs, rewards, resets)

    policy = agent.inference_policy()
    assert isinstance(policy, ra.RecurrentInferencePolicy)
    for actual, want in zip(policy_rollout(policy, obs, rewards, resets), expected, strict=True):
        assert_same_actions(actual, want)

    path = ra.export_policy(policy, tmp_path / "policy.pt", example_observation=obs[0])
    loaded = torch.jit.load(str(path))
    for actual, want in zip(policy_rollout(loaded, obs, rewards, resets), expected, strict=True):
        assert_same_actions(actual, want)


@needs_onnx
@pytest.mark.parametrize("case", RECURRENT.values(), ids=RECURRENT.keys())
def test_recurrent_onnx_matches_the_agent(case, tmp_path):
    """The ONNX graph takes and returns the state; the caller keeps it and zeroes it."""
    agent = make(case)
    _, spaces, _ = case
    agent_obs, obs, rewards, resets = sequence(spaces)
    expected = agent_rollout(agent, spaces, agent_obs, rewards, resets)

    policy = agent.inference_policy()
    path = ra.export_policy(policy, tmp_path / "policy.onnx", "onnx", example_observation=obs[0])
    session = onnx_session(path)
    names = [i.name for i in session.get_inputs()]
    assert names == ["observation", "h", "c", "prev_action", "prev_reward"]
    assert [o.name for o in session.get_outputs()] == ["action", "h_out", "c_out"]
    state = torch.zeros(policy.num_layers, B, policy.hidden_size)
    h, c = state.numpy(), state.numpy()
    prev_action, prev_reward = null_action(spaces, B).numpy(), torch.zeros(B).numpy()
    for t in range(T):
        if resets[t] is not None:
            mask = torch.ones(B, dtype=torch.bool) if resets[t] == "all" else resets[t]
            mask = mask.numpy()
            h, c = h.copy(), c.copy()
            h[:, mask], c[:, mask], prev_action[mask], prev_reward[mask] = 0, 0, 0, 0
        feed = dict(
            observation=obs[t].numpy(), h=h, c=c, prev_action=prev_action, prev_reward=prev_reward
        )
        action, h, c = session.run(None, feed)
        assert_same_actions(action, expected[t])
        prev_action, prev_reward = action.copy(), rewards[t].numpy().copy()


def test_recurrent_state_is_sized_lazily_and_reset_by_mask():
    agent = make(RECURRENT["mujoco_lstm"])
    policy = agent.inference_policy()
    assert policy.h.shape == (1, 0, 8)
    policy.reset(torch.tensor([1.0]))  # no state yet: nothing to do
    gen = torch.Generator().manual_seed(7)
    first = torch.randn(B, 5, generator=gen)
    second = torch.randn(B, 5, generator=gen)
    fresh_second = policy(second)
    policy.reset()
    policy(first)
    assert policy.h.shape == (1, B, 8) and policy.prev_action.shape == (B, 2)
    advanced = policy(second)
    assert not torch.allclose(advanced, fresh_second)
    # A numeric mask resets the environments where it is non-zero.
    policy.reset()
    policy(first)
    policy.reset(torch.tensor([0.0, 1.0, 0.0]))
    assert torch.equal(policy.h[:, 1], torch.zeros(1, 8))
    assert torch.equal(policy.prev_action[1], torch.zeros(2))
    assert_close(policy(second)[1], fresh_second[1])
    # Another batch size starts from zeros.
    fresh_two = agent.inference_policy()(second[:2])
    assert_close(policy(second[:2]), fresh_two)
    with pytest.raises(RuntimeError, match="env_mask has 3 entries for a state of 2"):
        policy.reset(torch.ones(3))


def test_recurrent_prev_reward_is_read():
    agent = make(RECURRENT["categorical_lstm"])
    policy = agent.inference_policy()
    gen = torch.Generator().manual_seed(8)
    observation = torch.randn(B, 5, generator=gen)
    policy(observation)
    h_before = policy.h.clone()
    policy.reset()
    policy(observation, torch.full((B,), 5.0))
    assert not torch.allclose(policy.h, h_before)
