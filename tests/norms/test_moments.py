"""``norms.functional._stats.moments``: both of its paths against a float64 reference.

The chunked shifted two-pass path runs for large tensors without autograd; shrinking
``CHUNK_ELEMENTS`` sends small tensors through it, so hypothesis can draw shapes,
layouts and reduced dims with chunks that split reduced and kept dims, and ragged last
chunks.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import norms.functional._stats as stats_module
from norms.functional._stats import CHUNK_ELEMENTS, moments

#: float32 moments: within a few ulps (2^-23 ~ 1.2e-7) of the float64 truth.
FLOAT32_RTOL = 4e-7


def _reference(x: torch.Tensor, dims, correction: int = 0, keepdim: bool = True):
    var, mean = torch.var_mean(x.double(), dim=dims, correction=correction, keepdim=keepdim)
    return mean, var


def _assert_close_to_reference(x, dims, *, correction=0, keepdim=True, rtol=FLOAT32_RTOL):
    with torch.no_grad():
        mean, var = moments(x, dims, correction=correction, keepdim=keepdim)
    ref_mean, ref_var = _reference(x, dims, correction, keepdim)
    assert mean.shape == ref_mean.shape and var.shape == ref_var.shape
    scale = ref_var.sqrt()  # the mean's error is measured against the spread
    assert ((mean.double() - ref_mean).abs() <= rtol * (ref_mean.abs() + scale)).all()
    assert ((var.double() - ref_var).abs() <= rtol * ref_var).all()


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("shape", [(1, 64, 96, 64), (3, 32, 48, 64)])
def test_large_feature_maps_take_the_chunked_path_and_match_float64(shape, channels_last):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=gen) * 3.0 + 5.0
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    assert x.numel() > CHUNK_ELEMENTS
    _assert_close_to_reference(x, (2, 3))
    _assert_close_to_reference(x, (0, 2, 3), correction=1)  # batch-norm dims
    _assert_close_to_reference(x, (1,), keepdim=False)  # layer-norm over channels


def test_a_mean_far_larger_than_the_spread_keeps_the_variance():
    """The shift removes the offset before squaring: no E[x^2] - E[x]^2 cancellation."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(1, 8, 256, 256, generator=gen) * 0.01 + 1.0e4
    _assert_close_to_reference(x, (2, 3), rtol=1e-5)  # float32 keeps 1e4 to ~1e-3 absolute


def test_bfloat16_and_float64_inputs_return_their_accumulation_dtype():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 16, 128, 160, generator=gen, dtype=torch.float64) + 2.0
    with torch.no_grad():
        mean, var = moments(x, (2, 3))
    assert mean.dtype == var.dtype == torch.float64
    torch.testing.assert_close(var, _reference(x, (2, 3))[1], rtol=1e-12, atol=0)
    half = x.to(torch.bfloat16)
    with torch.no_grad():
        mean, var = moments(half, (2, 3))
    assert mean.dtype == var.dtype == torch.float32
    _assert_close_to_reference(half, (2, 3))


@given(
    shape=st.lists(st.integers(1, 7), min_size=2, max_size=4),
    data=st.data(),
    chunk=st.sampled_from([1, 5, 16, 64]),
    correction=st.sampled_from([0, 1]),
)
def test_any_layout_and_chunking_matches_float64(shape, data, chunk, correction):
    rank = len(shape)
    dims = data.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    order = data.draw(st.permutations(range(rank)))
    gen = torch.Generator().manual_seed(len(shape) * 101 + chunk)
    base = torch.randn(*[shape[axis] for axis in order], generator=gen) * 2.0 + 3.0
    x = base.permute(*[order.index(axis) for axis in range(rank)])  # a strided view
    count = 1
    for dim in dims:
        count *= shape[dim]
    if count <= correction:
        return
    previous = stats_module.CHUNK_ELEMENTS
    stats_module.CHUNK_ELEMENTS = chunk
    try:
        _assert_close_to_reference(x, dims, correction=correction)
    finally:
        stats_module.CHUNK_ELEMENTS = previous


def test_autograd_gets_exact_gradients_whatever_the_size():
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(1, 8, 256, 160, generator=gen, dtype=torch.float64) + 1.0).requires_grad_()
    assert x.numel() > CHUNK_ELEMENTS
    mean, var = moments(x, (2, 3))
    (mean.sum() + var.sum()).backward()
    n = 256 * 160
    expected = 1.0 / n + 2.0 * (x - x.mean((2, 3), keepdim=True)) / n
    torch.testing.assert_close(x.grad, expected.detach(), rtol=1e-10, atol=1e-12)


def test_no_reduced_dimension_is_an_error():
    with pytest.raises(ValueError, match="at least one reduced dimension"):
        moments(torch.ones(2, 3), ())
