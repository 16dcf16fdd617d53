"""compress_normalized_image / decompress_image: [0, 1] floats as uint8 and back, for numpy
arrays and torch tensors (torch tests skip where torch is not installed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rl_arrays import compress_normalized_image, decompress_image

HALF_STEP = 1 / 510  # half of the 1/255 spacing of the uint8 levels


@pytest.fixture(scope="module", params=["numpy", "torch"])
def xp(request):
    """Converter to the backend under test: numpy, or torch (skipped without torch)."""
    if request.param == "numpy":
        return np.asarray
    torch = pytest.importorskip("torch")
    return torch.as_tensor


def to_numpy(x):
    return x if isinstance(x, np.ndarray) else x.numpy()


def is_uint8(x) -> bool:
    return str(x.dtype).endswith("uint8")


@settings(max_examples=50, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64]),
        hnp.array_shapes(min_dims=0, max_dims=5, max_side=6),
        elements=st.floats(0, 1, width=32),
    )
)
def test_round_trip_is_within_half_a_level(xp, x):
    compressed = compress_normalized_image(xp(x))
    assert is_uint8(compressed) and tuple(compressed.shape) == x.shape
    restored = to_numpy(decompress_image(compressed, dtype=np.float64))
    # Float32 scaling may land a value within about 1e-5 of a level midpoint on either side.
    slack = 1e-12 if x.dtype == np.float64 else 1e-7
    assert np.all(np.abs(restored - x) <= HALF_STEP + slack)


def test_rounds_to_the_nearest_level(xp):
    x = np.array([0.0, 0.4 / 255, 0.6 / 255, 1.4 / 255, 254.6 / 255, 1.0], np.float64)
    assert to_numpy(compress_normalized_image(xp(x))).tolist() == [0, 0, 1, 1, 255, 255]
    levels = np.arange(256, dtype=np.uint8)
    assert np.array_equal(
        to_numpy(compress_normalized_image(decompress_image(xp(levels)))), levels
    )  # every level survives a round trip exactly


def test_out_of_range_values_are_clipped_and_nan_becomes_zero(xp):
    x = np.array([-0.5, -np.inf, 1.5, np.inf, np.nan, 0.5], np.float32)
    assert to_numpy(compress_normalized_image(xp(x))).tolist() == [0, 0, 255, 255, 0, 128]


def test_time_batch_image_layout_and_dtypes(xp):
    rng = np.random.default_rng(0)
    frames = rng.random((4, 3, 2, 8, 8)).astype(np.float32)  # [T, B, C, H, W]
    compressed = compress_normalized_image(xp(frames))
    assert tuple(compressed.shape) == frames.shape and is_uint8(compressed)
    restored = decompress_image(compressed)
    assert str(restored.dtype).endswith("float32") and tuple(restored.shape) == frames.shape
    assert np.abs(to_numpy(restored) - frames).max() <= HALF_STEP + 1e-7
    assert str(decompress_image(compressed, dtype="float64").dtype).endswith("float64")
    half = compress_normalized_image(xp(frames.astype(np.float16)))
    assert is_uint8(half)
    assert np.abs(to_numpy(decompress_image(half)) - frames).max() <= HALF_STEP + 1e-3
    assert to_numpy(frames).sum() == to_numpy(xp(frames)).sum()  # the input is not changed


def test_wrong_dtypes_are_refused(xp):
    with pytest.raises(TypeError, match="floating-point"):
        compress_normalized_image(xp(np.zeros(3, np.uint8)))
    with pytest.raises(TypeError, match="uint8"):
        decompress_image(xp(np.zeros(3, np.float32)))
    with pytest.raises(TypeError, match="returns floats"):
        decompress_image(xp(np.zeros(3, np.uint8)), dtype="int32")


def test_torch_tensors_keep_their_kind():
    torch = pytest.importorskip("torch")
    x = torch.rand(2, 3, 4, requires_grad=True)
    compressed = compress_normalized_image(x)
    assert compressed.dtype == torch.uint8 and compressed.device == x.device
    restored = decompress_image(compressed, dtype=torch.float64)
    assert restored.dtype == torch.float64 and not restored.requires_grad
    assert (restored - x.detach().double()).abs().max() <= HALF_STEP + 1e-7
    assert decompress_image(compressed, dtype="bfloat16").dtype == torch.bfloat16
    assert decompress_image(compressed, dtype=np.float16).dtype == torch.float16
