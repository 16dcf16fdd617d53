import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rl_replay import discount_return_n_step


def by_hand(reward, done, n, discount, truncated):
    T = len(reward)
    length = T if truncated else T - n + 1
    returns, dones = (
        np.zeros((length, *reward.shape[1:])),
        np.zeros((length, *reward.shape[1:]), bool),
    )
    for t in range(length):
        for index in np.ndindex(*reward.shape[1:]):
            total, ended = 0.0, False
            for k in range(min(n, T - t)):
                total += discount**k * reward[(t + k, *index)]
                if done[(t + k, *index)]:
                    ended = True
                    break
            returns[(t, *index)], dones[(t, *index)] = total, ended
    return returns, dones


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 5),
    discount=st.floats(0, 1),
    truncated=st.booleans(),
)
def test_matches_a_loop_by_hand(data, n, discount, truncated):
    shape = data.draw(
        hnp.array_shapes(min_dims=1, max_dims=3, max_side=6).filter(lambda s: s[0] >= n)
    )
    reward = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-10, 10, width=32)))
    done = data.draw(hnp.arrays(bool, shape))
    return_, done_n = discount_return_n_step(reward, done, n, discount, do_truncated=truncated)
    expected_return, expected_done = by_hand(reward, done, n, discount, truncated)
    np.testing.assert_allclose(return_, expected_return, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(done_n, expected_done)


def test_writes_into_destinations_and_checks_input():
    reward, done = np.ones(5, np.float32), np.zeros(5, bool)
    return_dest, done_dest = np.zeros(4, np.float32), np.ones(4, bool)
    return_, done_n = discount_return_n_step(reward, done, 2, 0.5, return_dest, done_dest)
    assert return_ is return_dest and done_n is done_dest
    np.testing.assert_allclose(return_dest, 1.5)
    assert not done_dest.any()
    with pytest.raises(ValueError, match="n_step must be >= 1"):
        discount_return_n_step(reward, done, 0, 0.9)
    with pytest.raises(ValueError, match="at least n_step=6"):
        discount_return_n_step(reward, done, 6, 0.9)
    with pytest.raises(ValueError, match="shapes differ"):
        discount_return_n_step(reward, done[:4], 2, 0.9)
