"""DQN-family models: dueling and distributional heads, and the complete Atari and vector
models for every leading-dims case, with the recurrent ones stepped against sequences."""

import pytest
import torch
from torch.testing import assert_close

from rl_agents import (
    AtariCatDqnModel,
    AtariDqnModel,
    AtariR2d1Model,
    CatDqnMlpModel,
    DistributionalDuelingHeadModel,
    DistributionalHeadModel,
    DqnMlpModel,
    DuelingHeadModel,
    MlpModel,
    R2d1MlpModel,
    RnnState,
)

LEADS = [(), (5,), (3, 4)]
IMAGE = (2, 24, 24)
OBS = (5,)
A = 3
N_ATOMS = 7
H = 8
SMALL_CONV = dict(channels=[4, 8, 8])


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _batch(lead):
    return lead[-1] if lead else 1


def _images(lead):
    return torch.randint(0, 256, lead + IMAGE).to(torch.uint8)


def _observation(model, lead):
    image = isinstance(model, AtariDqnModel | AtariCatDqnModel | AtariR2d1Model)
    return _images(lead) if image else torch.randn(lead + OBS)


def _inputs(model, lead):
    return _observation(model, lead), torch.randint(0, A, lead), torch.randn(lead)


FF_MODELS = {
    "atari": lambda dueling: AtariDqnModel(IMAGE, A, fc_sizes=16, dueling=dueling, **SMALL_CONV),
    "mlp": lambda dueling: DqnMlpModel(OBS, A, hidden_sizes=[16], dueling=dueling),
}
CAT_MODELS = {
    "atari": lambda dueling: AtariCatDqnModel(
        IMAGE, A, n_atoms=N_ATOMS, fc_sizes=16, dueling=dueling, **SMALL_CONV
    ),
    "mlp": lambda dueling: CatDqnMlpModel(
        OBS, A, n_atoms=N_ATOMS, hidden_sizes=[16], dueling=dueling
    ),
}
R2D1_MODELS = {
    "atari": lambda dueling: AtariR2d1Model(
        IMAGE, A, fc_size=16, lstm_size=H, head_size=16, dueling=dueling, **SMALL_CONV
    ),
    "mlp": lambda dueling: R2d1MlpModel(
        OBS, A, hidden_sizes=[16], lstm_size=H, head_size=16, dueling=dueling
    ),
}


# ------------------------------------------------------------------------- heads


def test_dueling_head_is_value_plus_centred_advantage():
    head = DuelingHeadModel(6, [10], A)
    x = torch.randn(4, 6)
    advantage = head.advantage(x)
    expected = head.value(x) + advantage - advantage.mean(-1, keepdim=True)
    assert_close(head(x), expected)
    assert head(x).shape == (4, A)
    linear = DuelingHeadModel(6, [], A)  # no hidden layers: linear streams
    assert linear(x).shape == (4, A)


def test_dueling_heads_scale_the_gradient_into_their_input():
    for make in (
        lambda scale: DuelingHeadModel(6, [10], A, grad_scale=scale),
        lambda scale: DistributionalDuelingHeadModel(6, [10], A, N_ATOMS, grad_scale=scale),
    ):
        torch.manual_seed(1)
        scaled = make(2 ** (-1 / 2))
        torch.manual_seed(1)
        plain = make(1.0)
        grads = []
        for head in (scaled, plain):
            x = torch.randn(4, 6, generator=torch.Generator().manual_seed(2), requires_grad=True)
            head(x).sum().backward()
            grads.append(x.grad)
        assert_close(grads[0], grads[1] * 2 ** (-1 / 2))
    assert DuelingHeadModel(6, [10], A).grad_scale == 2 ** (-1 / 2)


def test_distributional_heads_shapes_and_dueling_form():
    x = torch.randn(4, 6)
    head = DistributionalHeadModel(6, [10], A, N_ATOMS)
    assert head(x).shape == (4, A, N_ATOMS)
    dueling = DistributionalDuelingHeadModel(6, [10], A, N_ATOMS)
    advantage = dueling.advantage(x)
    assert advantage.shape == (4, A, N_ATOMS)
    expected = dueling.value(x).unsqueeze(1) + advantage - advantage.mean(1, keepdim=True)
    assert_close(dueling(x), expected)


# -------------------------------------------------------------- complete models


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("kind", sorted(FF_MODELS))
def test_dqn_models_leading_dims(kind, dueling, lead):
    model = FF_MODELS[kind](dueling)
    assert isinstance(model.head, DuelingHeadModel if dueling else MlpModel)
    q = model(*_inputs(model, lead))
    assert q.shape == (*lead, A) and q.dtype == torch.float32


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("kind", sorted(CAT_MODELS))
def test_categorical_dqn_models_return_logits_per_action_and_atom(kind, dueling, lead):
    model = CAT_MODELS[kind](dueling)
    head_cls = DistributionalDuelingHeadModel if dueling else DistributionalHeadModel
    assert isinstance(model.head, head_cls)
    logits = model(*_inputs(model, lead))
    assert logits.shape == (*lead, A, N_ATOMS)
    assert not torch.allclose(logits.exp().sum(-1), torch.ones(*lead, A))  # not yet softmaxed


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("kind", sorted(R2D1_MODELS))
def test_r2d1_models_leading_dims_and_state(kind, dueling, lead):
    model = R2D1_MODELS[kind](dueling)
    q, state = model(*_inputs(model, lead), None)
    assert q.shape == (*lead, A)
    assert isinstance(state, RnnState)
    assert state.h.shape == state.c.shape == (1, _batch(lead), H)


def test_atari_models_scale_images_by_1_over_255_and_keep_the_input():
    model = FF_MODELS["atari"](False)
    image = _images((4,))
    before = image.clone()
    q = model(image, None, None)
    assert_close(q, model.head(model.conv(image.float() / 255)))
    assert torch.equal(image, before)


def test_atari_default_conv_is_the_nature_torso():
    model = AtariDqnModel((4, 84, 84), 6)
    convs = [m for m in model.conv.conv.conv if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64, 64]
    assert [c.kernel_size for c in convs] == [(8, 8), (4, 4), (3, 3)]
    assert [c.stride for c in convs] == [(4, 4), (2, 2), (1, 1)]
    assert model.head.model[0].out_features == 512
    r2d1 = AtariR2d1Model((4, 84, 84), 6)
    assert r2d1.lstm.hidden_size == 512 and r2d1.lstm.input_size == 512 + 6 + 1


@pytest.mark.parametrize("kind", sorted(R2D1_MODELS))
def test_r2d1_sequence_equals_stepping_and_takes_onehot_actions(kind):
    model = R2D1_MODELS[kind](True)
    T, B = 4, 3
    inputs = _inputs(model, (T, B))
    init = RnnState(h=torch.randn(1, B, H), c=torch.randn(1, B, H))
    q, final = model(*inputs, init)
    state = init
    for t in range(T):
        q_t, state = model(*(x[t] for x in inputs), state)
        assert_close(q[t], q_t, atol=1e-5, rtol=1e-5)
    assert_close(final.h, state.h, atol=1e-5, rtol=1e-5)
    onehot = torch.nn.functional.one_hot(inputs[1], A).float()
    assert_close(model(inputs[0], onehot, inputs[2], init)[0], q)


def test_bad_n_atoms_is_refused():
    with pytest.raises(ValueError, match="n_atoms"):
        CatDqnMlpModel(OBS, A, n_atoms=1)
