"""load_weights: a chosen part of one model's weights, renamed, into another model or an
agent; from state dicts, modules and runner checkpoints; every problem listed at once and
nothing loaded on error."""

from __future__ import annotations

import pickle
from fractions import Fraction

import pytest
import torch
from rl_agents_testkit import MUJOCO_SPACES, VECTOR_DISCRETE_SPACES

import rl_agents as ra


class Pretrained(torch.nn.Module):
    """A model trained elsewhere: its encoder is what we want."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.encoder = ra.MlpModel(5, [hidden, hidden])
        self.head = torch.nn.Linear(hidden, 3)


class Actor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = ra.MlpModel(5, [16, 16])
        self.head = torch.nn.Linear(16, 2)


class Policy(torch.nn.Module):
    """A fresh model with the same encoder under another prefix."""

    def __init__(self):
        super().__init__()
        self.actor = Actor()
        self.critic = torch.nn.Linear(5, 1)


def snapshot(module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def flat_agent_state(agent) -> dict[str, torch.Tensor]:
    out = {}
    for name, value in agent.state_dict().items():
        if isinstance(value, dict):
            out.update({f"{name}.{k}": v for k, v in value.items() if torch.is_tensor(v)})
        elif torch.is_tensor(value):
            out[name] = value.clone()
    return {k: v.clone() for k, v in out.items()}


def save_runner_checkpoint(agent, path) -> None:
    """What a runner's get_itr_snapshot writes (the parts that matter here)."""
    torch.save(
        {
            "format": 1,
            "itr": 3,
            "agent_state_dict": agent.state_dict(),
            "optimizer_state_dict": {"state": {}, "param_groups": []},
        },
        path,
    )


def test_pretrained_encoder_goes_into_a_fresh_model_under_another_prefix():
    torch.manual_seed(0)
    source, target = Pretrained(), Policy()
    before = snapshot(target)
    loaded = ra.load_weights(
        target, source.state_dict(), rename={"encoder.": "actor.encoder."}, prefixes="encoder."
    )
    expected = [f"actor.encoder.model.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")]
    assert loaded == expected
    after = target.state_dict()
    for key in expected:
        assert torch.equal(after[key], source.state_dict()[key.removeprefix("actor.")])
    for key in before.keys() - set(expected):  # the rest keeps its own weights
        assert torch.equal(after[key], before[key])


def test_source_may_be_a_module_and_rename_takes_the_longest_prefix():
    torch.manual_seed(1)
    source, target = Pretrained(), Policy()
    rename = {"encoder.": "critic.", "encoder.model.": "actor.encoder.model."}
    loaded = ra.load_weights(target, source, rename=rename, prefixes=["encoder.model.0."])
    assert loaded == ["actor.encoder.model.0.weight", "actor.encoder.model.0.bias"]


def test_from_a_runner_checkpoint_into_an_agent(tmp_path):
    torch.manual_seed(2)
    kwargs = dict(model_kwargs=dict(hidden_sizes=[16], normalize_observation=True))
    trained = ra.MujocoFfAgent(**kwargs)
    trained.initialize(MUJOCO_SPACES)
    trained.update_obs_rms(torch.randn(50, 5) * 3 + 1)
    path = tmp_path / "itr_3.pt"
    save_runner_checkpoint(trained, path)

    fresh = ra.MujocoFfAgent(**kwargs)
    fresh.initialize(MUJOCO_SPACES)
    before = snapshot(fresh.model)
    loaded = ra.load_weights(fresh, path, prefixes="obs_rms.")
    assert loaded == ["obs_rms.mean", "obs_rms.var", "obs_rms.count"]
    for key, value in fresh.state_dict().items():
        want = trained.state_dict()[key] if key in loaded else before[key]
        assert torch.equal(value, want), key


def test_nested_agent_state_dicts_use_dotted_keys(tmp_path):
    """DQN agents' state dicts nest the model's and the target's: load the trained model
    into a fresh agent's target network only."""
    kwargs = dict(model_kwargs=dict(hidden_sizes=[16]))
    torch.manual_seed(3)
    trained = ra.VectorDqnAgent(**kwargs)
    trained.initialize(VECTOR_DISCRETE_SPACES)
    trained.set_epsilon_itr_min_max(7, 70)
    path = tmp_path / "params.pt"
    save_runner_checkpoint(trained, path)

    torch.manual_seed(4)
    fresh = ra.VectorDqnAgent(**kwargs)
    fresh.initialize(VECTOR_DISCRETE_SPACES)
    before = flat_agent_state(fresh)
    loaded = ra.load_weights(fresh, path, rename={"model.": "target."}, prefixes="model.")
    assert loaded and all(key.startswith("target.") for key in loaded)
    after, source = flat_agent_state(fresh), flat_agent_state(trained)
    for key in after:
        if key.startswith("target."):
            assert torch.equal(after[key], source["model." + key.removeprefix("target.")])
        else:
            assert torch.equal(after[key], before[key])
    assert fresh.state_dict()["epsilon"] == {"itr_min": 50, "itr_max": 1000}  # not selected
    ra.load_weights(fresh, path, prefixes="epsilon.")  # non-tensor entries load as they are
    assert fresh.state_dict()["epsilon"] == {"itr_min": 7, "itr_max": 70}


def test_strict_lists_every_problem_and_loads_nothing():
    torch.manual_seed(5)
    source, target = Pretrained(hidden=8), Policy()
    before = snapshot(target)
    with pytest.raises(ValueError) as info:
        ra.load_weights(
            target,
            source.state_dict(),
            rename={"encoder.": "actor.encoder."},
            prefixes=["encoder.", "head.", "decoder."],
        )
    message = str(info.value)
    assert "nothing was loaded" in message
    assert "prefixes that select no source key: ['decoder.']" in message
    assert "'head.weight', 'head.bias'" in message  # no such keys in the target
    for i, p in ((0, "weight"), (0, "bias"), (2, "weight"), (2, "bias")):
        assert f"encoder.model.{i}.{p} -> actor.encoder.model.{i}.{p}" in message
    assert "shape (8, 5) for shape (16, 5)" in message
    after = target.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_non_strict_skips_missing_keys_but_not_shape_mismatches():
    torch.manual_seed(6)
    source, target = Pretrained(), Policy()
    state = source.state_dict()
    loaded = ra.load_weights(
        target,
        state,
        rename={"encoder.": "actor.encoder."},
        prefixes=["encoder.", "nope."],
        strict=False,
    )
    assert len(loaded) == 4 and all(k.startswith("actor.encoder.") for k in loaded)
    state["encoder.model.0.bias"] = torch.zeros(3)
    with pytest.raises(ValueError, match=r"shape \(3,\) for shape \(16,\)"):
        ra.load_weights(target, state, rename={"encoder.": "actor.encoder."}, strict=False)


def test_two_keys_renamed_to_one_is_an_error():
    source = {"a.weight": torch.zeros(2), "b.weight": torch.ones(2)}
    target = torch.nn.Module()
    target.c = torch.nn.Linear(1, 2)
    with pytest.raises(
        ValueError, match=r"'a\.weight' and 'b\.weight' would both load into 'c\.weight'"
    ):
        ra.load_weights(target, source, rename={"a.": "c.", "b.": "c."}, prefixes=["a.", "b."])


def test_bad_arguments():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match="target must be"):
        ra.load_weights(object(), {})
    with pytest.raises(TypeError, match="source must be"):
        ra.load_weights(model, 3)
    with pytest.raises(ValueError, match="rename must map"):
        ra.load_weights(model, {}, rename={"a.": 1})
    with pytest.raises(ValueError, match="prefixes must be"):
        ra.load_weights(model, {}, prefixes=[""])


def test_checkpoints_are_read_weights_only(tmp_path):
    model = torch.nn.Linear(2, 2)
    path = tmp_path / "odd.pt"
    torch.save({"agent_state_dict": model.state_dict(), "note": Fraction(1, 3)}, path)
    with pytest.raises(pickle.UnpicklingError):
        ra.load_weights(torch.nn.Linear(2, 2), path)
    target = torch.nn.Linear(2, 2)
    assert ra.load_weights(target, path, weights_only=False) == ["weight", "bias"]
    assert torch.equal(target.weight, model.weight)
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    with pytest.raises(TypeError, match="not a state dict"):
        ra.load_weights(target, tmp_path / "tensor.pt")
