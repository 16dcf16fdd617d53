"""Counts as rlpyt's scripts write them (floats such as ``51.0``): an integral float is stored as
an int, and 1.5 or -1 are still refused with the message naming the argument."""

import pytest

import rl_agents as ra


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda v: ra.VectorDqnAgent(eps_itr_min=v).eps_itr_min, "itr_min and itr_max"),
        (
            lambda v: ra.VectorDqnAgent(eps_itr_min=0, eps_itr_max=v).eps_itr_max,
            "itr_min and itr_max",
        ),
        (lambda v: ra.VectorCatDqnAgent(n_atoms=v).n_atoms, "n_atoms must be an int >= 2"),
        (lambda v: ra.Categorical(dim=v).dim, "dim must be a positive integer"),
        (lambda v: ra.MlpModel(v, [4]).model[0].in_features, "input_size must be a positive int"),
        (lambda v: ra.MlpModel(3, [v]).output_size, "hidden_sizes must be a positive int"),
        (lambda v: ra.MlpModel(3, [4], v).output_size, "output_size must be a positive int"),
        (
            lambda v: ra.AsymmetricLstmModel((3,), (5,), 2, lstm_size=v).actor.lstm.hidden_size,
            "lstm_size must be a positive int",
        ),
    ],
)
def test_counts_accept_integral_floats(call, match):
    count = call(8.0)
    assert count == 8 and type(count) is int
    for bad in (1.5, -1):
        with pytest.raises(ValueError, match=match):
            call(bad)
