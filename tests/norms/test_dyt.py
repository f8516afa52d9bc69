"""Dynamic tanh: reference, gradients, the module's layouts and errors."""

import norms_reference as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import norms
from norms import F


@given(alpha=st.floats(0.01, 10.0), seed=st.integers(0, 2**16))
def test_dynamic_tanh_matches_reference(alpha, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 8, generator=gen) * 5
    weight, bias = torch.randn(8, generator=gen), torch.randn(8, generator=gen)
    got = F.dynamic_tanh(x, torch.tensor([alpha]), weight, bias)
    torch.testing.assert_close(got.double(), ref.dynamic_tanh(x, alpha, weight, bias))
    torch.testing.assert_close(
        F.dynamic_tanh(x, alpha).double(), ref.dynamic_tanh(x, alpha), rtol=1e-5, atol=1e-6
    )


def test_dynamic_tanh_gradcheck_including_alpha():
    gen = torch.Generator().manual_seed(8)

    def leaf(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)

    assert torch.autograd.gradcheck(F.dynamic_tanh, (leaf(2, 3, 4), leaf(1), leaf(4), leaf(4)))


def test_module_token_and_channels_first_layouts(gen):
    tokens = norms.build("dyt", 6, alpha_init=0.8)
    images = norms.DynamicTanh(6, alpha_init=0.8, channels_first=True)
    with torch.no_grad():
        tokens.weight.normal_(generator=gen)
        tokens.bias.normal_(generator=gen)
    images.load_state_dict(tokens.state_dict())
    x = torch.randn(2, 6, 3, 4, generator=gen)
    want = ref.dynamic_tanh(x, 0.8, tokens.weight[:, None, None], tokens.bias[:, None, None])
    torch.testing.assert_close(images(x).double(), want)
    seq = torch.randn(2, 5, 6, generator=gen)
    torch.testing.assert_close(
        tokens(seq).double(), ref.dynamic_tanh(seq, 0.8, tokens.weight, tokens.bias)
    )
    assert tokens(seq.bfloat16()).dtype == torch.bfloat16
    tokens.reset_parameters()
    torch.testing.assert_close(tokens.alpha, torch.tensor([0.8]))
    assert "channels_first=True" in repr(images)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: F.dynamic_tanh(torch.zeros(2, 3), torch.ones(2)), "scalar"),
        (lambda: F.dynamic_tanh(torch.zeros(2, 3), 1.0, torch.ones(4)), "broadcast"),
        (lambda: norms.DynamicTanh(0), "num_features"),
        (lambda: norms.DynamicTanh(4, alpha_init=0.0), "alpha_init"),
        (lambda: norms.DynamicTanh(4)(torch.zeros(2, 4, 3)), "features"),
    ],
)
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
