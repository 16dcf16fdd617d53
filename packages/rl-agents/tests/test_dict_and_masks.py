"""Dict (composite) observations and action masks: the models' layouts, and that a masked
agent never picks a forbidden action, sampling, evaluating or exploring."""

import pytest
import torch
from rl_agents_testkit import Box, Discrete
from torch.testing import assert_close

import rl_agents as ra
from rl_agents._action_mask import masked_probs
from rl_arrays import EnvSpaces, namedarraytuple

N = 5  # actions
Obs = namedarraytuple("Obs", ["action_mask", "camera", "state"])
MaskedVector = namedarraytuple("MaskedVector", ["action_mask", "observation"])


class Composite:
    """Stands in for rl-samplers' Composite: field names, child spaces, shapes."""

    def __init__(self, cls, **spaces):
        self.names = cls._fields
        self.spaces = tuple(spaces[name] for name in self.names)
        self.shape = cls(*(s.shape for s in self.spaces))


MASK = Box((N,), 0, 1)
DICT_SPACES = EnvSpaces(
    Composite(Obs, action_mask=MASK, camera=Box((6, 6, 3), 0, 255), state=Box((4,))),
    Discrete(N),
)
MASKED_VECTOR_SPACES = EnvSpaces(
    Composite(MaskedVector, action_mask=MASK, observation=Box((4,))), Discrete(N)
)
SMALL = dict(hidden_sizes=[8], vector_hidden_sizes=[8], image_kwargs=dict(channels=[4, 4]))


def random_mask(lead, seed=0):
    """Random masks with at least one allowed action per row."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand((*lead, N), generator=gen) < 0.4
    mask[..., 0] |= ~mask.any(-1)
    return mask.to(torch.int8)


def dict_observation(lead, seed=1):
    gen = torch.Generator().manual_seed(seed)
    camera = torch.randint(0, 256, (*lead, 6, 6, 3), generator=gen).to(torch.uint8)
    return Obs(random_mask(lead, seed), camera, torch.randn((*lead, 4), generator=gen))


def inputs(observation, lead):
    return observation, torch.zeros(lead, dtype=torch.long), torch.zeros(lead)


def allowed(action, mask):
    return bool(torch.gather(mask, -1, action.unsqueeze(-1)).all())


@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
def test_a_dict_model_keeps_the_leading_dims_and_encodes_each_field(lead):
    model = ra.DictFfModel({"camera": (6, 6, 3), "state": (4,)}, output_size=N, **SMALL)
    pi, value = model(*inputs(dict_observation(lead), lead))
    assert pi.shape == (*lead, N) and value.shape == lead
    assert set(model.pi_encoder.encoders) == {"camera", "state"}
    assert isinstance(model.pi_encoder.encoders["camera"], ra.Conv2dHeadModel)
    q = ra.DictDqnModel({"camera": (6, 6, 3), "state": (4,)}, N, hidden_sizes=[8])
    assert q(*inputs(dict_observation(lead), lead)).shape == (*lead, N)


def test_a_dict_model_reads_every_field_and_not_the_mask():
    torch.manual_seed(0)
    model = ra.DictFfModel({"camera": (6, 6, 3), "state": (4,)}, output_size=N, **SMALL)
    obs = dict_observation((3,))
    features = model.pi_encoder(obs)[0]
    for other in (obs.state + 1, 255 - obs.camera):
        changed = obs._replace(**{"state" if other.dtype == obs.state.dtype else "camera": other})
        assert not torch.allclose(features, model.pi_encoder(changed)[0])
    assert_close(features, model.pi_encoder(obs._replace(action_mask=1 - obs.action_mask))[0])


def test_masked_probabilities_are_the_softmax_of_the_allowed_logits():
    logits = torch.randn(4, N, requires_grad=True)
    mask = random_mask((4,)) != 0
    masked = masked_probs(torch.softmax(logits, -1), mask)
    assert_close(masked, torch.softmax(logits.masked_fill(~mask, float("-inf")), -1))
    masked[:, 0].sum().backward()
    assert torch.isfinite(logits.grad).all()
    forbidden = logits.grad[~mask]  # a forbidden action's logit learns nothing (up to rounding)
    assert_close(forbidden, torch.zeros_like(forbidden), atol=1e-7, rtol=0)


def test_an_underflowed_or_empty_mask_row_stays_a_distribution():
    prob = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[False, True, True], [False, False, False]])
    assert_close(masked_probs(prob, mask), torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize(
    ("cls", "spaces", "kwargs"),
    [
        (ra.DictCategoricalFfAgent, DICT_SPACES, SMALL),
        (ra.CategoricalFfAgent, MASKED_VECTOR_SPACES, dict(hidden_sizes=[8])),
        (ra.CategoricalLstmAgent, MASKED_VECTOR_SPACES, dict(hidden_sizes=[8], lstm_size=8)),
    ],
)
def test_a_masked_policy_gradient_agent_never_picks_a_forbidden_action(cls, spaces, kwargs):
    torch.manual_seed(0)
    agent = cls(model_kwargs=kwargs)
    agent.initialize(spaces)
    assert isinstance(agent.model, ra.ActionMaskedModel)
    lead = (200,)
    if spaces is DICT_SPACES:
        observation = dict_observation(lead)
    else:
        observation = MaskedVector(random_mask(lead), torch.randn(200, 4))
    for mode in ("sample", "eval"):
        getattr(agent, f"{mode}_mode")(0)
        agent.reset()
        step = agent.step(*inputs(observation, lead))
        assert allowed(step.action, observation.action_mask.long())
        prob = step.agent_info.dist_info.prob
        assert bool((prob[observation.action_mask == 0] == 0).all())
    # Training sees the same masked distribution as sampling did.
    agent.train_mode(0)
    if agent.recurrent:
        return
    dist_info, _ = agent(*inputs(observation, lead))
    assert_close(dist_info.prob, prob)


def test_a_masked_dqn_agent_explores_and_bootstraps_among_allowed_actions_only():
    torch.manual_seed(0)
    agent = ra.DictDqnAgent(model_kwargs=dict(hidden_sizes=[8], vector_hidden_sizes=[8]))
    agent.initialize(DICT_SPACES)
    agent.set_sample_epsilon_greedy(1.0)  # every action drawn at random
    lead = (500,)
    observation = dict_observation(lead)
    mask = observation.action_mask.long()
    step = agent.step(*inputs(observation, lead))
    assert allowed(step.action, mask)
    agent.set_sample_epsilon_greedy(0.0)
    assert allowed(agent.step(*inputs(observation, lead)).action, mask)
    target = agent.target(*inputs(observation, lead))
    best = target.max(-1).values
    assert torch.isfinite(best).all()
    assert_close(best, target.masked_fill(mask == 0, float("-inf")).max(-1).values)


def test_the_inference_policy_of_a_masked_agent_acts_only_as_allowed():
    torch.manual_seed(0)
    agent = ra.CategoricalFfAgent(model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(MASKED_VECTOR_SPACES)
    observation = MaskedVector(random_mask((100,)), torch.randn(100, 4))
    policy = agent.inference_policy()
    assert allowed(policy(observation), observation.action_mask.long())


@pytest.mark.parametrize("cls", [ra.VectorCatDqnAgent, ra.VectorR2d1Agent])
def test_agents_that_cannot_mask_say_so(cls):
    agent = cls()
    with pytest.raises(ValueError, match="cannot mask actions"):
        agent.initialize(MASKED_VECTOR_SPACES)


def test_a_mask_of_the_wrong_size_is_refused():
    spaces = EnvSpaces(MASKED_VECTOR_SPACES.observation, Discrete(N + 1))
    with pytest.raises(ValueError, match="one flag per discrete action"):
        ra.CategoricalFfAgent().initialize(spaces)


def test_a_gaussian_dict_agent_acts():
    torch.manual_seed(0)
    ImageState = namedarraytuple("ImageState", ["image", "state"])
    spaces = EnvSpaces(Composite(ImageState, image=Box((3, 4, 4)), state=Box((4,))), Box((2,)))
    agent = ra.DictGaussianFfAgent(model_kwargs=SMALL)
    agent.initialize(spaces)
    assert not isinstance(agent.model, ra.ActionMaskedModel)
    obs = ImageState(torch.rand(7, 3, 4, 4), torch.randn(7, 4))
    assert agent.step(*inputs(obs, (7,))).action.shape == (7, 2)
    _, log_std, value = agent.model(*inputs(obs, (7,)))
    assert log_std.shape == (7, 2) and value.shape == (7,)
