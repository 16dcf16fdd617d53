import importlib.util
from collections import namedtuple

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_arrays import (
    NamedArrayTupleSchema,
    NamedTupleSchema,
    buffer_from_example,
    buffer_func,
    buffer_method,
    buffer_to,
    build_array,
    get_leading_dims,
    is_namedarraytuple,
    namedarraytuple,
    normalize_device,
    numpify_buffer,
    torchify_buffer,
)

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _cuda_available():
    import torch

    return torch.cuda.is_available()


Info = namedtuple("Info", ["timeout", "score"])
Step = namedtuple("Step", ["observation", "reward", "info", "missing"])
EXAMPLE = Step(np.zeros((4, 2), np.uint8), np.float32(1), Info(False, 0.0), None)


def test_buffer_from_example_allocates_matching_structure():
    buf = buffer_from_example(EXAMPLE, (5, 3))
    assert is_namedarraytuple(buf) and buf._fields == Step._fields
    assert is_namedarraytuple(buf.info) and buf.missing is None
    assert buf.observation.shape == (5, 3, 4, 2) and buf.observation.dtype == np.uint8
    assert buf.reward.shape == (5, 3) and buf.reward.dtype == np.float32
    assert buf.info.timeout.dtype == np.bool_ and buf.info.score.dtype == np.float64
    assert not buf.observation.any()
    buf[2, 1] = buf[0, 0]._replace(reward=7)  # the buffer indexes as one
    assert buf.reward[2, 1] == 7


def test_buffer_from_example_keeps_or_chooses_the_form():
    schema_example = NamedTupleSchema("S", "a b")(np.zeros(2), 1)
    kept = buffer_from_example(schema_example, 3)
    assert isinstance(kept, tuple) and kept._typename == "S" and kept[1:].a.shape == (2, 2)
    as_class = buffer_from_example(schema_example, 3, use_NatSchema=False)
    assert is_namedarraytuple(as_class) and type(as_class).__name__ == "S"
    as_schema = buffer_from_example(EXAMPLE, 2, use_NatSchema=True)
    assert not is_namedarraytuple(as_schema) and as_schema.info._typename == "Info"


def test_build_array_checks_its_input():
    assert build_array(3, 4).dtype == np.asarray(3).dtype
    with pytest.raises(ValueError, match="leading_dims"):
        build_array(0.0, (2, -1))
    with pytest.raises(TypeError, match="non-numeric"):
        build_array({"a": 1}, 2)


def test_get_leading_dims():
    buf = buffer_from_example(EXAMPLE, (5, 3))
    assert get_leading_dims(buf) == (5,)
    assert get_leading_dims(buf, n_dim=2) == (5, 3)
    bad = buf._replace(reward=np.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"buffer\.reward: \(5, 4\)"):
        get_leading_dims(bad, n_dim=2)
    with pytest.raises(ValueError, match="no arrays"):
        get_leading_dims(Info(None, None))


def test_buffer_method_and_func():
    buf = buffer_from_example(EXAMPLE, (2, 3))
    flat = buffer_method(buf, "reshape", 6, -1)
    assert flat.observation.shape == (6, 8) and flat.reward.shape == (6, 1)
    summed = buffer_func(buf, np.sum, axis=0)
    assert summed.observation.shape == (3, 4, 2) and summed.missing is None
    assert buffer_func((np.ones(2), None), np.sum) == (2.0, None)


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_torchify_and_numpify_share_memory():
    import torch

    buf = buffer_from_example(EXAMPLE, (5, 3))
    tensors = torchify_buffer(buf)
    assert isinstance(tensors.observation, torch.Tensor) and tensors.missing is None
    tensors.observation[0, 0] = 9  # zero-copy: the numpy buffer sees it
    assert buf.observation[0, 0, 0, 0] == 9
    arrays = numpify_buffer(tensors)
    arrays.reward[1] = 3
    assert tensors.reward[1, 0] == 3
    reversed_ = torchify_buffer(np.arange(4)[::-1])  # torch cannot view negative strides
    assert reversed_.tolist() == [3, 2, 1, 0]
    assert torchify_buffer((np.float32(2), 5)) == (torch.tensor(2.0), 5)
    grads = numpify_buffer(torch.ones(2, requires_grad=True))
    assert isinstance(grads, np.ndarray)


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_buffer_to_moves_tensors():
    import torch

    moved = buffer_to(torchify_buffer(buffer_from_example(EXAMPLE, 2)), torch.device("cpu"))
    assert moved.info.score.device.type == "cpu" and moved.missing is None
    with pytest.raises(TypeError, match="torch tensors"):
        buffer_to((np.zeros(2),), "cpu")


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_normalize_device_gives_the_device_tensors_report():
    import torch

    assert normalize_device("cpu") == torch.device("cpu")
    assert normalize_device(torch.device("cuda", 1)) == torch.device("cuda", 1)  # kept as given
    with pytest.raises(RuntimeError):
        normalize_device("no-such-device")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_TORCH or not _cuda_available(), reason="needs a GPU")
def test_normalize_device_gives_cuda_its_current_index():
    import torch

    assert normalize_device("cuda") == torch.zeros(0, device="cuda").device  # cuda:0 ...
    assert normalize_device("cuda") == torch.device("cuda", torch.cuda.current_device())


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_shared_memory_torchifies_without_copy():
    buf = buffer_from_example(EXAMPLE, (2, 2), share_memory=True)
    tensors = torchify_buffer(buf)
    tensors.reward.add_(1)
    assert (buf.reward == 1).all()


@pytest.mark.skipif(HAS_TORCH, reason="only meaningful without torch")
def test_torch_helpers_say_torch_is_needed():
    with pytest.raises(ImportError, match="torchify_buffer needs PyTorch"):
        torchify_buffer(np.zeros(2))
    with pytest.raises(ImportError, match="buffer_to needs PyTorch"):
        buffer_to(np.zeros(2), "cpu")
    assert numpify_buffer((np.zeros(1), None))[1] is None  # works: no tensors can exist


Pair = namedarraytuple("Pair", ["a", "b"])


@settings(max_examples=100, deadline=None)
@given(
    a=hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=3, max_side=3)),
    lead=st.lists(st.integers(0, 4), min_size=0, max_size=2),
    share=st.booleans(),
)
def test_buffer_round_trip(a, lead, share):
    """Allocate from an example, write it at every leading index, read it back."""
    example = Pair(a, NamedArrayTupleSchema("Sub", ["c"])(a))
    buf = buffer_from_example(example, tuple(lead), share_memory=share)
    assert buf.a.shape == (*lead, *a.shape) and buf.a.dtype == a.dtype
    for index in np.ndindex(*lead):
        buf[index] = example
    for index in np.ndindex(*lead):
        np.testing.assert_array_equal(buf[index].a, a)
        np.testing.assert_array_equal(buf[index].b.c, a)
    if HAS_TORCH and a.dtype.kind in "biuf" and a.dtype.byteorder in "=|":
        back = numpify_buffer(torchify_buffer(buf))
        np.testing.assert_array_equal(back.a, buf.a)


def test_check_memory_refuses_what_cannot_fit(monkeypatch):
    from rl_arrays import available_memory, check_memory

    assert available_memory() is None or available_memory() > 0
    monkeypatch.setattr("rl_arrays._memory.available_memory", lambda: 3 << 30)
    check_memory("replay_size", 1000, 3 << 20)  # 2.9 GiB: fits
    with pytest.raises(MemoryError) as e:
        check_memory("replay_size", 2000, 3 << 20, hint="try less")
    assert str(e.value) == (
        "replay_size=2000 needs 5.9 GiB (3,145,728 bytes each), but 3.0 GiB of memory is "
        "available: replay_size <= 1024 would fit; try less"
    )
    monkeypatch.setattr("rl_arrays._memory.available_memory", lambda: None)
    check_memory("replay_size", 10**12, 10**12)  # unknown: nothing is checked
