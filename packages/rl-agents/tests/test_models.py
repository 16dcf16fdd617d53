"""Model components and complete models: shapes for every leading-dim case, recurrence,
observation normalisation, and the state-dict helpers."""

import copy

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

from rl_agents import (
    AtariFfModel,
    AtariLstmModel,
    CategoricalFfModel,
    CategoricalLstmModel,
    Conv2dHeadModel,
    Conv2dModel,
    MlpModel,
    MujocoFfModel,
    MujocoLstmModel,
    RnnState,
    RunningMeanStdModel,
    ScaleGrad,
    _pg_models,
    conv2d_output_shape,
    scale_grad,
    strip_ddp_state_dict,
    update_state_dict,
)
from rl_agents._model_utils import polyak_update, set_training_mode

LEADS = [(), (5,), (3, 4)]
IMAGE = (2, 24, 24)
A = 3
OBS = (5,)
H = 8


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _batch(lead):
    """B as the LSTM sees it: 1 without leading dims."""
    return lead[-1] if lead else 1


def _images(lead):
    return torch.randint(0, 256, lead + IMAGE).to(torch.uint8)


def _atari_ff():
    return AtariFfModel(IMAGE, A, fc_sizes=16, channels=[4, 8])


def _atari_lstm():
    return AtariLstmModel(IMAGE, A, fc_sizes=16, lstm_size=H, channels=[4, 8])


def _mujoco_ff(**kwargs):
    return MujocoFfModel(OBS, A, hidden_sizes=[16], **kwargs)


def _mujoco_lstm(**kwargs):
    return MujocoLstmModel(OBS, A, hidden_sizes=[16], lstm_size=H, **kwargs)


def _categorical_ff(**kwargs):
    return CategoricalFfModel(OBS, A, hidden_sizes=[16], **kwargs)


def _categorical_lstm(**kwargs):
    return CategoricalLstmModel(OBS, A, hidden_sizes=[16], lstm_size=H, **kwargs)


# -------------------------------------------------------------------- components


def test_mlp_sizes():
    assert MlpModel(4, [8, 6], output_size=3)(torch.randn(2, 4)).shape == (2, 3)
    last_hidden = MlpModel(4, [8, 6])
    assert last_hidden.output_size == 6 and last_hidden(torch.randn(2, 4)).min() >= 0  # ReLU
    linear = MlpModel(4, [], output_size=2)
    assert len(linear.model) == 1 and linear.output_size == 2
    assert MlpModel(4, 7).output_size == 7
    with pytest.raises(ValueError, match="hidden_sizes or an output_size"):
        MlpModel(4, [])


@pytest.mark.parametrize("use_maxpool", [False, True])
def test_conv_out_size_matches_a_forward_pass(use_maxpool):
    conv = Conv2dModel(3, [4, 8], [5, 3], [2, 2], paddings=[1, 0], use_maxpool=use_maxpool)
    out = conv(torch.randn(2, 3, 30, 26))
    assert conv.conv_out_size(30, 26) == out[0].numel()
    assert any(isinstance(m, torch.nn.MaxPool2d) for m in conv.conv) == use_maxpool


def test_conv2d_head_model_and_output_shape():
    head = Conv2dHeadModel((3, 20, 20), [4], [4], [2], hidden_sizes=[10], output_size=6)
    assert head(torch.randn(5, 3, 20, 20)).shape == (5, 6) and head.output_size == 6
    bare = Conv2dHeadModel((3, 20, 20), [4], [4], [2], hidden_sizes=None)
    assert bare.output_size == 4 * 9 * 9 == bare(torch.randn(1, 3, 20, 20)).shape[1]
    assert conv2d_output_shape(104, 80, kernel_size=8, stride=4) == (25, 19)
    assert conv2d_output_shape(25, 19, kernel_size=4, stride=2, padding=1) == (12, 9)
    with pytest.raises(ValueError, match="too small"):
        Conv2dHeadModel((3, 4, 4), [4], [8], [1], hidden_sizes=None)


def test_scale_grad():
    x = torch.randn(3, requires_grad=True)
    y = scale_grad(x, 0.5)
    assert torch.equal(y, x.detach())
    y.sum().backward()
    assert_close(x.grad, torch.full((3,), 0.5))
    z = torch.randn(2, requires_grad=True)
    ScaleGrad.apply(z, -2.0).sum().backward()
    assert_close(z.grad, torch.full((2,), -2.0))


def test_update_state_dict_hard_and_soft():
    target, source = _mujoco_ff(normalize_observation=True), _mujoco_ff(normalize_observation=True)
    source.obs_rms.count.fill_(7)
    old = {k: v.clone() for k, v in target.state_dict().items()}
    new = source.state_dict()
    update_state_dict(target, new, tau=0.25)
    for key, value in target.state_dict().items():
        if key.endswith("count"):
            continue
        assert_close(value, 0.25 * new[key] + 0.75 * old[key])
    assert float(target.obs_rms.count) == 7 * 0.25 + 0  # float buffers blend as well
    update_state_dict(target, {"module." + k: v for k, v in new.items()}, tau=1)
    for key, value in target.state_dict().items():
        assert torch.equal(value, new[key])
    with pytest.raises(ValueError, match="tau"):
        update_state_dict(target, new, tau=1.5)
    with pytest.raises(KeyError, match="missing"):
        update_state_dict(target, {"log_std": new["log_std"]}, tau=0.5)


class _WithBuffers(torch.nn.Module):
    """A linear layer with a float buffer (moved like a parameter) and a counter (copied)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.register_buffer("mean", torch.randn(2))
        self.register_buffer("count", torch.randint(0, 100, ()))


@pytest.mark.parametrize("tau", [0.005, 0.3, 1.0, 0.0])
def test_polyak_update_equals_update_state_dict_entry_by_entry(tau):
    torch.manual_seed(0)
    pairs = [(_WithBuffers(), _WithBuffers()) for _ in range(2)]
    expected = [(copy.deepcopy(target), online) for target, online in pairs]
    polyak_update(pairs, tau)
    for target, online in expected:
        update_state_dict(target, online.state_dict(), tau)
    for (got, _), (want, _) in zip(pairs, expected, strict=True):
        for a, b in zip(got.state_dict().values(), want.state_dict().values(), strict=True):
            assert torch.equal(a, b)
    with pytest.raises(ValueError, match="tau"):
        polyak_update(pairs, 1.5)


def test_set_training_mode_is_train_and_keeps_a_submodule_s_own_train():
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Sequential(torch.nn.BatchNorm1d(4))
    )
    x = torch.randn(8, 4)
    for mode in (False, True, False):
        set_training_mode(net, mode)
        assert [m.training for m in net.modules()] == [mode] * 5
    assert_close(net(x), net(x))  # eval: no dropout, running statistics

    class FrozenNorm(torch.nn.Module):  # keeps its normalisation in eval mode whatever the mode
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(4)

        def train(self, mode: bool = True):
            super().train(mode)
            self.norm.eval()
            return self

    wrapped = torch.nn.Sequential(torch.nn.Linear(4, 4), FrozenNorm())
    set_training_mode(wrapped, True)
    assert wrapped.training and wrapped[1].training and not wrapped[1].norm.training


def test_strip_ddp_state_dict():
    stripped = strip_ddp_state_dict({"module.a.weight": 1, "b": 2})
    assert list(stripped.items()) == [("a.weight", 1), ("b", 2)]


def test_running_mean_std_combines_batches():
    rms = RunningMeanStdModel((3,))
    first, second = torch.randn(4, 5, 3) * 2 + 1, torch.randn(7, 3) - 3
    rms.update(first)
    rms.update(second)
    data = torch.cat([first.reshape(-1, 3), second])
    assert_close(rms.mean, data.mean(0))
    assert_close(rms.var, data.var(0, unbiased=False))
    assert float(rms.count) == 27
    assert set(rms.state_dict()) == {"mean", "var", "count"}


# -------------------------------------------------------------- complete models


@pytest.mark.parametrize("lead", LEADS)
def test_atari_ff_model_leading_dims(lead):
    model = _atari_ff()
    image = _images(lead)
    before = image.clone()
    pi, value = model(image, torch.zeros(lead, dtype=torch.long), torch.zeros(lead))
    assert pi.shape == (*lead, A) and value.shape == lead
    assert_close(pi.sum(-1), torch.ones(lead))
    assert torch.equal(image, before)  # the input is not scaled in place


def test_atari_ff_model_scales_images_by_1_over_255():
    model = _atari_ff()
    image = _images((4,))
    features = model.conv(image.float() / 255)
    pi, value = model(image, None, None)
    assert_close(pi, torch.softmax(model.pi(features), -1))
    assert_close(value, model.value(features).squeeze(-1))


@pytest.mark.parametrize("lead", LEADS)
def test_atari_lstm_model_leading_dims_and_state(lead):
    model = _atari_lstm()
    prev_action = torch.nn.functional.one_hot(torch.randint(0, A, lead), A).float()
    pi, value, state = model(_images(lead), prev_action, torch.zeros(lead), None)
    assert pi.shape == (*lead, A) and value.shape == lead
    assert isinstance(state, RnnState)
    assert state.h.shape == state.c.shape == (1, _batch(lead), H)


@pytest.mark.parametrize("lead", LEADS)
def test_mujoco_ff_model_leading_dims(lead):
    model = _mujoco_ff(init_log_std=-0.5)
    mu, log_std, value = model(torch.randn(lead + OBS), torch.zeros((*lead, A)), torch.zeros(lead))
    assert mu.shape == log_std.shape == (*lead, A) and value.shape == lead
    assert_close(log_std, torch.full((*lead, A), -0.5))
    assert mu.abs().max() <= 1  # tanh on the means by default


@pytest.mark.parametrize("lead", LEADS)
def test_mujoco_lstm_model_leading_dims(lead):
    model = _mujoco_lstm()
    obs, prev_action, prev_reward = (
        torch.randn(lead + OBS),
        torch.randn((*lead, A)),
        torch.randn(lead),
    )
    mu, log_std, value, state = model(obs, prev_action, prev_reward, None)
    assert mu.shape == log_std.shape == (*lead, A) and value.shape == lead
    assert state.h.shape == state.c.shape == (1, _batch(lead), H)


@pytest.mark.parametrize("lead", LEADS)
def test_categorical_models_leading_dims(lead):
    obs, prev_action = torch.randn(lead + OBS), torch.randint(0, A, lead)
    pi, value = _categorical_ff()(obs, prev_action, torch.zeros(lead))
    assert pi.shape == (*lead, A) and value.shape == lead
    assert_close(pi.sum(-1), torch.ones(lead))
    pi, value, state = _categorical_lstm()(obs, prev_action, torch.zeros(lead), None)
    assert pi.shape == (*lead, A) and value.shape == lead
    assert state.h.shape == state.c.shape == (1, _batch(lead), H)


def test_feed_forward_vector_models_hold_two_independent_mlps():
    """Policy and value MLPs evaluated as one batched MLP: each is the MLP of its own
    parameters, and the value's loss reaches none of the policy's parameters."""
    model = _categorical_ff()
    weights, biases = model.mlps.weights, model.mlps.biases
    x = torch.randn(5, *OBS)

    def member(k, size):
        hidden = torch.tanh(x @ weights[0][k] + biases[0][k])
        return (hidden @ weights[1][k] + biases[1][k])[:, :size]

    pi, value = model(x, None, None)
    assert_close(pi, torch.softmax(member(0, A), -1))
    assert_close(value, member(1, 1).squeeze(-1))
    value.sum().backward()
    assert not weights[0].grad[0].any() and not weights[1].grad[0].any()
    assert not weights[1].grad[1][:, 1:].any()  # the padding of the 1-wide value output
    assert weights[0].abs().max() <= 1 / OBS[0] ** 0.5  # torch.nn.Linear's bound
    mu, _, v = _mujoco_ff(mu_nonlinearity=None)(x, None, None)
    assert mu.shape == (5, A) and v.shape == (5,)


@pytest.mark.parametrize("make", [_categorical_ff, _mujoco_ff])
def test_large_cpu_batches_run_member_by_member_in_chunks_without_changing_anything(
    make, monkeypatch
):
    """From _CPU_PER_MEMBER_ROWS rows the pair runs as two MLPs, chunk by chunk: the outputs
    and the gradients are those of the batched pair on the whole batch at once (and the
    padding of the 1-wide value output gets no gradient on any path)."""
    model = make()
    observation = torch.randn(4, 5, *OBS)  # 20 rows: chunks of 6, 6, 6, 2
    results = []
    for per_member_rows, chunk_rows in ((10**6, 10**6), (1, 10**6), (20, 6)):
        monkeypatch.setattr(_pg_models, "_CPU_PER_MEMBER_ROWS", per_member_rows)
        model.mlps.chunk_rows = chunk_rows
        model.zero_grad()
        *outputs, value = model(observation, None, None)
        (outputs[0].pow(2).sum() + value.pow(3).sum()).backward()
        results.append([*outputs, value, *(p.grad.clone() for p in model.mlps.parameters())])
        last_weight, last_bias = model.mlps.weights[-1], model.mlps.biases[-1]
        assert not last_weight.grad[1][:, 1:].any() and not last_bias.grad[1][:, 1:].any()
    for tensors in results[1:]:
        for a, b in zip(results[0], tensors, strict=True):
            assert a.shape == b.shape
            assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [_categorical_ff, _mujoco_ff])
def test_off_the_cpu_every_batch_runs_as_one_batched_pair(make):
    """The chunks are a CPU trick: on another device (here "meta") a batch of any size is
    the same few operations (a GPU launches one kernel per operation)."""

    def operations(rows):
        with _OperationCount() as count:
            model(torch.zeros(rows, *OBS, device="meta"), None, None)
        return count.n

    model = make().to("meta")
    assert operations(8) == operations(2**17) < 30


class _OperationCount(TorchDispatchMode):
    def __enter__(self):
        self.n = 0
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("make", [_categorical_ff, _mujoco_ff])
def test_gradient_groups_are_the_policys_and_the_values_own(make):
    """Two groups of views that hold every gradient entry once: zeroing one leaves the
    gradients that the other's outputs alone send (MuJoCo's policy: mu and log_std)."""
    model = make()
    x = torch.randn(7, *OBS)

    def backward(policy=True, value=True):
        model.zero_grad()
        *policy_outputs, value_output = model(x, None, None)
        loss = sum(o.pow(2).sum() for o in policy_outputs) * policy
        (loss + value_output.pow(2).sum() * value).backward()
        return [p.grad.clone() for p in model.parameters()]

    expected = {"policy": backward(value=False), "value": backward(policy=False)}
    for kept, zeroed in (("value", 0), ("policy", 1)):
        both = backward()
        groups = model.gradient_groups()
        assert_close(
            sum(g.pow(2).sum() for g in groups[0] + groups[1]), sum(g.pow(2).sum() for g in both)
        )
        for view in groups[zeroed]:
            view.zero_()
        for param, grad in zip(model.parameters(), expected[kept], strict=True):
            assert_close(param.grad, grad)


def test_twin_mlp_chunk_rows_follow_the_widest_layer():
    """Chunks hold about _CPU_CHUNK_FLOATS floats of the pair's widest activations."""
    for hidden in ([64, 64], [256, 128, 64], [4096]):
        rows = _pg_models._TwinMlp(4, hidden, (2, 1), torch.nn.Tanh).chunk_rows
        widest = 2 * max(hidden)
        assert rows * widest <= _pg_models._CPU_CHUNK_FLOATS < (rows + 1) * widest


def _lstm_inputs(model, T, B):
    if isinstance(model, AtariLstmModel):
        return _images((T, B)), torch.randint(0, A, (T, B)), torch.randn(T, B)
    if isinstance(model, CategoricalLstmModel):
        return torch.randn(T, B, *OBS), torch.randint(0, A, (T, B)), torch.randn(T, B)
    return torch.randn(T, B, *OBS), torch.randn(T, B, A), torch.randn(T, B)


@pytest.mark.parametrize("make", [_atari_lstm, _mujoco_lstm, _categorical_lstm])
def test_lstm_sequence_equals_stepping(make):
    model = make()
    T, B = 4, 3
    inputs = _lstm_inputs(model, T, B)
    init = RnnState(h=torch.randn(1, B, H), c=torch.randn(1, B, H))
    *outputs, final = model(*inputs, init)
    state = init
    for t in range(T):
        *step_outputs, state = model(*(x[t] for x in inputs), state)
        for whole, one in zip(outputs, step_outputs, strict=True):
            assert_close(whole[t], one, atol=1e-5, rtol=1e-5)
    assert_close(final.h, state.h, atol=1e-5, rtol=1e-5)
    zeros = RnnState(h=torch.zeros(1, B, H), c=torch.zeros(1, B, H))
    for a, b in zip(model(*inputs, None), model(*inputs, zeros), strict=True):
        assert_close(
            tuple(a) if isinstance(a, RnnState) else a, tuple(b) if isinstance(b, RnnState) else b
        )


@pytest.mark.parametrize("make", [_atari_lstm, _categorical_lstm])
def test_lstm_takes_integer_or_onehot_prev_action(make):
    model = make()
    image, prev_action, prev_reward = _lstm_inputs(model, 2, 3)
    onehot = torch.nn.functional.one_hot(prev_action, A).float()
    assert_close(
        model(image, prev_action, prev_reward, None)[0], model(image, onehot, prev_reward, None)[0]
    )


@pytest.mark.parametrize("make", [_mujoco_ff, _mujoco_lstm, _categorical_ff, _categorical_lstm])
def test_observation_normalisation(make):
    model = make(normalize_observation=True, norm_obs_clip=3.0)
    assert model.normalize_observation
    extra = (None,) if isinstance(model, MujocoLstmModel | CategoricalLstmModel) else ()
    obs = torch.randn(6, 4, *OBS) * 5 + 2
    prev = (torch.zeros(6, 4, A), torch.zeros(6, 4))
    before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("obs_rms")}
    model(obs, *prev, *extra)
    for key, value in before.items():
        assert torch.equal(model.state_dict()[key], value)  # forward never updates them
    model.update_obs_rms(obs)
    flat = obs.reshape(-1, *OBS)
    assert_close(model.obs_rms.mean, flat.mean(0))
    assert_close(model.obs_rms.var, flat.var(0, unbiased=False))
    # Far-off observations are clipped to +-norm_obs_clip standard deviations: same output.
    far, farther = torch.full((2, *OBS), 1e3), torch.full((2, *OBS), 1e6)
    small = (torch.zeros(2, A), torch.zeros(2))
    assert_close(model(far, *small, *extra)[0], model(farther, *small, *extra)[0])
    plain = make()
    assert not plain.normalize_observation and "obs_rms.mean" not in plain.state_dict()
    plain.update_obs_rms(obs)  # a no-op


def test_constant_observations_keep_outputs_finite():
    model = _mujoco_ff(normalize_observation=True)
    obs = torch.ones(10, *OBS)
    model.update_obs_rms(obs)  # variance 0, floored by norm_obs_var_clip
    mu, _, value = model(obs, None, None)
    assert torch.isfinite(mu).all() and torch.isfinite(value).all()


def _gram(weight, gain):
    """``W^T W / gain^2`` over the shorter side of ``weight``: the identity when orthogonal."""
    w = weight if weight.shape[0] >= weight.shape[1] else weight.T
    return w.T @ w / gain**2


@pytest.mark.parametrize("make", [_categorical_ff, _mujoco_ff])
def test_orthogonal_init_gives_sb3s_gains_per_layer(make):
    model = make(orthogonal_init=True)
    weights, biases = model.mlps.weights, model.mlps.biases
    for layer, gains in ((0, (2**0.5, 2**0.5)), (1, (0.01, 1.0))):
        for member, gain in enumerate(gains):
            w = weights[layer][member]
            if layer == 1 and member == 1:
                w = w[:, :1]  # the value's one output (the rest is padding)
            assert_close(_gram(w, gain), torch.eye(min(w.shape)), atol=1e-5, rtol=0)
        assert not biases[layer].any()
    default = make()
    assert default.mlps.biases[0].any()  # torch's default: uniform biases


def test_atari_orthogonal_init_covers_the_conv_torso_and_both_heads():
    model = AtariFfModel((4, 84, 84), 6, orthogonal_init=True)
    layers = [m for m in model.conv.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
    assert len(layers) == 3  # two convolutions and the fully connected layer
    for layer, gain in [*((m, 2**0.5) for m in layers), (model.pi, 0.01), (model.value, 1.0)]:
        weight = layer.weight.flatten(1)
        assert_close(_gram(weight, gain), torch.eye(min(weight.shape)), atol=1e-4, rtol=0)
        assert not layer.bias.any()
