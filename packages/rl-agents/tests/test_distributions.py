"""Distributions against torch.distributions, and their sampling statistics."""

import math

import pytest
import torch
import torch.distributions as td
from torch.testing import assert_close

from rl_agents import (
    Categorical,
    CategoricalEpsilonGreedy,
    DistInfo,
    DistInfoStd,
    EpsilonGreedy,
    Gaussian,
)

LEADS = [(), (5,), (3, 4)]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _probs(*shape):
    return torch.softmax(torch.randn(shape), dim=-1)


# ------------------------------------------------------------------- Categorical


@pytest.mark.parametrize("lead", LEADS)
def test_categorical_matches_torch(lead):
    p, q = _probs(*lead, 6), _probs(*lead, 6)
    x = torch.randint(0, 6, lead)
    dist = Categorical(dim=6)
    ref_p, ref_q = td.Categorical(probs=p), td.Categorical(probs=q)
    old, new = DistInfo(prob=p), DistInfo(prob=q)

    assert_close(dist.log_likelihood(x, old), ref_p.log_prob(x), atol=1e-5, rtol=1e-5)
    assert_close(dist.entropy(old), ref_p.entropy(), atol=1e-5, rtol=1e-5)
    assert_close(dist.perplexity(old), ref_p.entropy().exp(), atol=1e-5, rtol=1e-5)
    assert_close(dist.kl(old, new), td.kl_divergence(ref_p, ref_q), atol=1e-5, rtol=1e-5)
    ratio = (ref_q.log_prob(x) - ref_p.log_prob(x)).exp()
    assert_close(dist.likelihood_ratio(x, old, new), ratio, atol=1e-5, rtol=1e-5)
    assert dist.kl(old, new).shape == lead


def test_categorical_means_respect_valid():
    p, q = _probs(3, 4, 5), _probs(3, 4, 5)
    valid = torch.rand(3, 4) > 0.5
    valid[0, 0] = True
    dist = Categorical(dim=5)
    old, new = DistInfo(p), DistInfo(q)
    assert_close(dist.mean_kl(old, new, valid), dist.kl(old, new)[valid].mean())
    assert_close(dist.mean_entropy(old, valid), dist.entropy(old)[valid].mean())
    assert_close(dist.mean_perplexity(old, valid), dist.perplexity(old)[valid].mean())
    assert_close(dist.mean_entropy(old), dist.entropy(old).mean())


def test_categorical_sample_frequencies_and_shape():
    prob = torch.tensor([0.1, 0.2, 0.7]).expand(200, 100, 3)
    sample = Categorical(dim=3).sample(DistInfo(prob=prob))
    assert sample.shape == (200, 100) and sample.dtype == torch.long
    frequencies = torch.bincount(sample.flatten(), minlength=3).float() / sample.numel()
    assert_close(frequencies, torch.tensor([0.1, 0.2, 0.7]), atol=0.01, rtol=0)
    assert Categorical(dim=3).sample(DistInfo(prob=prob[0, 0])).shape == ()


def test_onehot_round_trip():
    dist = Categorical(dim=4)
    x = torch.randint(0, 4, (3, 5))
    onehot = dist.to_onehot(x)
    assert onehot.shape == (3, 5, 4) and onehot.dtype == torch.float32
    assert onehot.sum(-1).eq(1).all()
    back = dist.from_onehot(onehot)
    assert back.dtype == torch.long and torch.equal(back, x)


# ---------------------------------------------------------------------- Gaussian


def _normal(mean, std):
    return td.Independent(td.Normal(mean, std), 1)


@pytest.mark.parametrize("lead", LEADS)
def test_gaussian_learned_std_matches_torch(lead):
    mean, log_std = torch.randn(*lead, 3), 0.5 * torch.randn(*lead, 3)
    mean2, log_std2 = torch.randn(*lead, 3), 0.5 * torch.randn(*lead, 3)
    x = torch.randn(*lead, 3)
    dist = Gaussian(dim=3)
    old, new = DistInfoStd(mean, log_std), DistInfoStd(mean2, log_std2)
    ref_old, ref_new = _normal(mean, log_std.exp()), _normal(mean2, log_std2.exp())

    assert_close(dist.log_likelihood(x, old), ref_old.log_prob(x), atol=1e-5, rtol=1e-5)
    assert_close(dist.entropy(old), ref_old.entropy(), atol=1e-5, rtol=1e-5)
    assert_close(dist.kl(old, new), td.kl_divergence(ref_old, ref_new), atol=1e-4, rtol=1e-5)
    ratio = (ref_new.log_prob(x) - ref_old.log_prob(x)).exp()
    assert_close(dist.likelihood_ratio(x, old, new), ratio, atol=1e-5, rtol=1e-4)
    assert dist.kl(old, new).shape == lead
    assert_close(dist.kl(old, old), torch.zeros(lead), atol=1e-6, rtol=0)


@pytest.mark.parametrize("std", [0.5, [0.1, 0.2, 0.3]])
def test_gaussian_fixed_std_ignores_dist_info_log_std(std):
    mean, mean2, x = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)
    dist = Gaussian(dim=3, std=std)
    std_t = torch.as_tensor(std).expand(3)
    ref, ref2 = _normal(mean, std_t), _normal(mean2, std_t)
    info = DistInfoStd(mean=mean, log_std=None)
    info2 = DistInfoStd(mean=mean2, log_std=torch.full((4, 3), 5.0))  # not read
    assert_close(dist.log_likelihood(x, info), ref.log_prob(x), atol=1e-5, rtol=1e-5)
    assert_close(dist.entropy(info), ref.entropy(), atol=1e-5, rtol=1e-5)
    assert_close(dist.kl(info, info2), td.kl_divergence(ref, ref2), atol=1e-4, rtol=1e-5)


def test_gaussian_std_limits_are_part_of_the_formulas():
    mean = torch.zeros(2, 2)
    log_std = torch.tensor([[-10.0, 0.0], [10.0, 0.2]])
    x = torch.randn(2, 2)
    dist = Gaussian(dim=2, min_std=0.5, max_std=2.0)
    clamped = log_std.exp().clamp(0.5, 2.0)
    info = DistInfoStd(mean, log_std)
    assert_close(dist.log_likelihood(x, info), _normal(mean, clamped).log_prob(x))
    assert_close(dist.entropy(info), _normal(mean, clamped).entropy())


def test_gaussian_squash_log_likelihood_is_the_density_of_the_squashed_action():
    mean, log_std = 0.5 * torch.randn(6, 2), 0.3 * torch.randn(6, 2)
    u = mean + log_std.exp() * torch.randn(6, 2)
    dist = Gaussian(dim=2, squash=2.0)
    squashed = td.TransformedDistribution(
        td.Normal(mean, log_std.exp()),
        [td.TanhTransform(cache_size=1), td.AffineTransform(0.0, 2.0)],
    )
    reference = td.Independent(squashed, 1).log_prob(2.0 * torch.tanh(u))
    assert_close(
        dist.log_likelihood(u, DistInfoStd(mean, log_std)), reference, atol=1e-4, rtol=1e-4
    )
    # Stable far into the tails, where 1 - tanh(u)^2 underflows.
    far = dist.log_likelihood(
        torch.full((1, 2), 30.0), DistInfoStd(torch.zeros(1, 2), torch.zeros(1, 2))
    )
    assert torch.isfinite(far).all()
    with pytest.raises(NotImplementedError):
        dist.entropy(DistInfoStd(mean, log_std))


def test_gaussian_sample_loglikelihood_is_consistent_and_differentiable():
    mean = torch.zeros(1000, 2, requires_grad=True)
    log_std = torch.full((1000, 2), -0.5, requires_grad=True)
    dist = Gaussian(dim=2, squash=1.5)
    action, logli = dist.sample_loglikelihood(DistInfoStd(mean, log_std))
    assert action.abs().max() < 1.5 and logli.shape == (1000,)
    pre_squash = torch.atanh(action.detach() / 1.5)
    expected = dist.log_likelihood(pre_squash, DistInfoStd(mean.detach(), log_std.detach()))
    assert_close(logli.detach(), expected, atol=1e-3, rtol=1e-3)
    (action.sum() + logli.sum()).backward()
    assert mean.grad is not None and log_std.grad is not None
    assert dist.squash == 1.5  # setting restored


def test_gaussian_sample_statistics():
    mean = torch.tensor([1.0, -2.0]).expand(40000, 2)
    log_std = torch.log(torch.tensor([0.5, 2.0])).expand(40000, 2)
    sample = Gaussian(dim=2).sample(DistInfoStd(mean, log_std))
    assert sample.shape == (40000, 2)
    assert_close(sample.mean(0), torch.tensor([1.0, -2.0]), atol=0.04, rtol=0)
    assert_close(sample.std(0), torch.tensor([0.5, 2.0]), atol=0.04, rtol=0)


def test_gaussian_clips_and_std_zero():
    mean = torch.randn(500, 3)
    info = DistInfoStd(mean, torch.zeros(500, 3))
    assert Gaussian(dim=3, clip=0.3).sample(info).abs().max() <= 0.3
    noise = Gaussian(dim=3, noise_clip=0.1).sample(info) - mean
    assert noise.abs().max() <= 0.1 + 1e-6
    dist = Gaussian(dim=3)
    dist.set_std(0.0)
    assert torch.equal(dist.sample(info), mean)
    dist.set_std(None)
    assert not torch.equal(dist.sample(info), mean)


def test_gaussian_settings_are_checked():
    with pytest.raises(ValueError, match="exclude"):
        Gaussian(dim=2, clip=1.0, squash=1.0)
    with pytest.raises(ValueError, match="std"):
        Gaussian(dim=2, std=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="non-negative"):
        Gaussian(dim=2, std=-1.0)
    with pytest.raises(ValueError, match="dim"):
        Gaussian(dim=0)
    with pytest.raises(ValueError, match="log_std"):
        Gaussian(dim=2).entropy(DistInfoStd(torch.zeros(2), None))


def test_gaussian_entropy_value():
    dist = Gaussian(dim=2, std=1.0)
    expected = 2 * 0.5 * math.log(2 * math.pi * math.e)
    assert math.isclose(
        float(dist.entropy(DistInfoStd(torch.zeros(2), None))), expected, rel_tol=1e-6
    )


# --------------------------------------------------------------- epsilon-greedy


def test_epsilon_zero_is_greedy():
    q = torch.randn(4, 6, 5)
    dist = EpsilonGreedy(epsilon=0, dim=5)
    assert torch.equal(dist.sample(q), q.argmax(-1))


def test_epsilon_one_is_uniform():
    q = torch.randn(20000, 4)
    sample = EpsilonGreedy(epsilon=1.0, dim=4).sample(q)
    frequencies = torch.bincount(sample, minlength=4).float() / sample.numel()
    assert_close(frequencies, torch.full((4,), 0.25), atol=0.015, rtol=0)


def test_vector_epsilon_applies_per_environment():
    q = torch.zeros(4000, 3, 4)
    q[..., 2] = 1.0  # greedy action 2 everywhere
    dist = EpsilonGreedy(epsilon=[0.0, 1.0, 0.5], dim=4)
    sample = dist.sample(q)  # [T, B]: epsilon along B, the same for every T
    greedy_fraction = (sample == 2).float().mean(0)
    assert_close(greedy_fraction, torch.tensor([1.0, 0.25, 0.625]), atol=0.03, rtol=0)
    assert dist.sample(q[0]).shape == (3,)
    with pytest.raises(ValueError, match="vector epsilon"):
        dist.sample(torch.zeros(10, 2, 4))
    with pytest.raises(ValueError, match="epsilon"):
        dist.set_epsilon(1.5)


def test_categorical_epsilon_greedy_uses_expected_value():
    z = torch.linspace(-1, 1, 5)
    p = torch.softmax(3 * torch.randn(6, 3, 5), dim=-1)  # [B, A, atoms]
    dist = CategoricalEpsilonGreedy(z=z, epsilon=0.0, dim=3)
    assert torch.equal(dist.sample(p), (p * z).sum(-1).argmax(-1))
    other = torch.linspace(1, -1, 5)
    assert torch.equal(dist.sample(p, z=other), (p * other).sum(-1).argmax(-1))
    with pytest.raises(ValueError, match="z"):
        CategoricalEpsilonGreedy(dim=3, epsilon=0.0).sample(p)


def test_gaussian_keeps_its_fixed_std_on_the_device_it_is_moved_to():
    """A fixed std follows ``to(device)``, also when set again afterwards (the agents' mode
    switches), so sampling never copies it from the host (``meta`` stands in for a GPU)."""
    dist = Gaussian(dim=2, std=0.3, noise_clip=0.5)
    assert dist.std.device.type == "cpu"
    assert dist.to("meta") is dist and dist.std.device.type == "meta"
    dist.set_std(0.1)
    assert dist.std.device.type == "meta"
    mean = torch.zeros(4, 2, device="meta")
    assert dist.sample(DistInfoStd(mean=mean, log_std=None)).device.type == "meta"
    assert Gaussian(dim=2).to("meta").std is None  # (std read from dist_info)
