"""AdaIN, conditional instance norm, adaLN modulation and the adaLN / adaLN-Zero modules."""

import norms_reference as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import norms
from norms import F

TOL = {"rtol": 1e-5, "atol": 1e-5}

# ---------------------------------------------------------------------------- adain


@pytest.mark.parametrize(
    ("content_shape", "style_shape"),
    [
        ((2, 3, 5, 7), (2, 3, 5, 7)),
        ((4, 3, 6, 6), (1, 3, 4, 9)),  # style batch 1 broadcasts; spatial sizes differ
        ((2, 5, 11), (2, 5, 3)),  # 1-d signals
        ((2, 2, 3, 4, 5), (1, 2, 2, 2, 2)),  # volumes
    ],
)
def test_adain_matches_float64_reference(gen, content_shape, style_shape):
    content = torch.randn(content_shape, generator=gen) * 3 + 1
    style = torch.randn(style_shape, generator=gen) * 0.5 - 2
    out = F.adain(content, style)
    assert out.dtype == content.dtype and out.shape == content.shape
    torch.testing.assert_close(out.double(), ref.adain(content, style), rtol=1e-5, atol=1e-5)


@given(
    batch=st.integers(1, 3),
    channels=st.integers(1, 4),
    side=st.integers(2, 6),
    style_scale=st.floats(0.1, 10.0),
    style_shift=st.floats(-50.0, 50.0),
    seed=st.integers(0, 2**16),
)
def test_adain_output_carries_the_style_statistics(
    batch, channels, side, style_scale, style_shift, seed
):
    gen = torch.Generator().manual_seed(seed)
    content = torch.randn(batch, channels, side, side + 1, generator=gen, dtype=torch.float64)
    style = torch.randn(1, channels, side + 2, side, generator=gen, dtype=torch.float64)
    style = style * style_scale + style_shift
    eps = 1e-5
    out = F.adain(content, style, eps=eps)
    out_mean, out_std = F.channel_mean_std(out, eps=0.0)
    style_mean, style_std = F.channel_mean_std(style, eps=eps)
    # Output std is sigma_s * sqrt(var_c) / sqrt(var_c + eps): equal to sigma_s up to eps.
    _, content_var = ref.spatial_mean_var(content)
    shrink = torch.sqrt(content_var / (content_var + eps)).reshape(out_std.shape)
    torch.testing.assert_close(out_mean, style_mean.expand_as(out_mean))
    torch.testing.assert_close(out_std, style_std.expand_as(out_std) * shrink)


def test_channel_mean_std_matches_reference(gen):
    x = torch.randn(3, 4, 5, 6, generator=gen)
    mean, std = F.channel_mean_std(x, eps=1e-3)
    ref_mean, ref_var = ref.spatial_mean_var(x)
    assert mean.shape == std.shape == (3, 4, 1, 1)
    torch.testing.assert_close(mean.double().flatten(), ref_mean.flatten())
    torch.testing.assert_close(std.double().flatten(), torch.sqrt(ref_var + 1e-3).flatten())


def test_adain_keeps_low_precision_dtype(gen):
    content = torch.randn(2, 3, 8, 8, generator=gen).bfloat16()
    style = torch.randn(1, 3, 8, 8, generator=gen).bfloat16() * 4 + 3
    out = F.adain(content, style)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref.adain(content, style), rtol=2e-2, atol=5e-2)


def test_adain_gradcheck():
    gen = torch.Generator().manual_seed(1)
    content = torch.randn(2, 2, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    style = torch.randn(1, 2, 4, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda c, s: F.adain(c, s), (content, style))


@pytest.mark.parametrize(
    ("content_shape", "style_shape", "match"),
    [
        ((2, 3, 4, 4), (2, 4, 4, 4), "channel"),
        ((3, 3, 4, 4), (2, 3, 4, 4), "batch"),
        ((2, 3), (2, 3), "spatial"),
        ((2, 3, 4, 4), (2, 3, 16), "rank"),
    ],
)
def test_adain_rejects_mismatched_inputs(content_shape, style_shape, match):
    with pytest.raises(ValueError, match=match):
        F.adain(torch.zeros(content_shape), torch.zeros(style_shape))


# ------------------------------------------------------------- conditional instance norm


def _random_tables(gen, num_styles, channels):
    weight = torch.randn(num_styles, channels, generator=gen)
    bias = torch.randn(num_styles, channels, generator=gen)
    return weight, bias


def test_conditional_instance_norm_with_indices_matches_reference(gen):
    x = torch.randn(3, 4, 5, 5, generator=gen) * 2 + 5
    weight, bias = _random_tables(gen, 6, 4)
    style = torch.tensor([5, 0, 2])
    out = F.conditional_instance_norm(x, style, weight, bias)
    one_hot = torch.nn.functional.one_hot(style, 6).double()
    expected = ref.conditional_instance_norm(x, one_hot, weight, bias)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


@given(mix_logits=st.lists(st.floats(-3, 3), min_size=3, max_size=3))
def test_conditional_instance_norm_convex_mix_matches_reference(mix_logits):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 3, 4, generator=gen, dtype=torch.float64)
    weight, bias = (t.double() for t in _random_tables(gen, 3, 4))
    mix = torch.softmax(torch.tensor(mix_logits, dtype=torch.float64), 0).expand(2, 3)
    out = F.conditional_instance_norm(x, mix, weight, bias)
    torch.testing.assert_close(out, ref.conditional_instance_norm(x, mix, weight, bias))


def test_conditional_instance_norm_gradcheck():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    mix = torch.rand(2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(F.conditional_instance_norm, (x, mix, weight, bias))


def test_conditional_instance_norm_module_round_trip_and_errors(gen):
    module = norms.build("conditional_instance", 4, num_styles=3)
    assert isinstance(module, norms.ConditionalInstanceNorm)
    with torch.no_grad():
        module.weight.normal_(generator=gen)
        module.bias.normal_(generator=gen)
    clone = norms.ConditionalInstanceNorm(4, num_styles=3)
    clone.load_state_dict(module.state_dict())
    x = torch.randn(2, 4, 3, 3, generator=gen)
    style = torch.tensor([2, 1])
    torch.testing.assert_close(clone(x, style), module(x, style))
    with pytest.raises(ValueError, match="indices"):
        module(x, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="style weights"):
        module(x, torch.rand(2, 4))
    with pytest.raises(ValueError, match="features"):
        module(torch.randn(2, 5, 3, 3), style)
    with pytest.raises(ValueError, match="num_styles"):
        norms.ConditionalInstanceNorm(4, num_styles=0)


# --------------------------------------------------------------------- adaLN family


def test_modulate_and_ada_layer_norm_match_reference(gen):
    x = torch.randn(2, 5, 8, generator=gen) * 3 + 7
    shift, scale = torch.randn(2, 8, generator=gen), torch.randn(2, 8, generator=gen)
    torch.testing.assert_close(F.modulate(x, shift, scale).double(), ref.modulate(x, shift, scale))
    torch.testing.assert_close(
        F.ada_layer_norm(x, shift, scale).double(),
        ref.ada_layer_norm(x, shift, scale),
        rtol=1e-5,
        atol=1e-5,
    )


def test_modulate_broadcasts_batch_one_and_keeps_dtype(gen):
    x = torch.randn(3, 4, 6, generator=gen).bfloat16()
    shift, scale = torch.randn(1, 6, generator=gen), torch.randn(1, 6, generator=gen)
    out = F.modulate(x, shift, scale)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref.modulate(x, shift, scale), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    ("x_shape", "shift_shape"), [((2, 3), (2, 3)), ((2, 3, 4), (2, 5)), ((2, 3, 4), (3, 4))]
)
def test_modulate_rejects_bad_shapes(x_shape, shift_shape):
    with pytest.raises(ValueError):
        F.modulate(torch.zeros(x_shape), torch.zeros(shift_shape), torch.zeros(shift_shape))


def test_ada_layer_norm_gradcheck():
    gen = torch.Generator().manual_seed(4)
    args = [
        torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
        for shape in ((2, 3, 4), (2, 4), (2, 4))
    ]
    assert torch.autograd.gradcheck(F.ada_layer_norm, tuple(args))


def test_adaln_starts_as_plain_layer_norm_and_follows_its_projection(gen):
    module = norms.build("adaln", 8, cond_features=5)
    x, c = torch.randn(2, 3, 8, generator=gen), torch.randn(2, 5, generator=gen)
    torch.testing.assert_close(
        module(x, c).double(), ref.normalise_last(x, 1e-6), rtol=1e-5, atol=1e-5
    )
    with torch.no_grad():
        module.proj[1].weight.normal_(generator=gen)
        module.proj[1].bias.normal_(generator=gen)
    hidden = torch.nn.functional.silu(c.double()) @ module.proj[1].weight.double().T
    shift, scale = (hidden + module.proj[1].bias.double()).chunk(2, dim=1)
    torch.testing.assert_close(
        module(x, c).double(), ref.ada_layer_norm(x, shift, scale), rtol=1e-5, atol=1e-5
    )


def test_adaln_zero_chunks_are_ordered_shift_scale_gate_per_branch(gen):
    module = norms.AdaLNZero(4, 3, num_branches=2)
    with torch.no_grad():
        module.proj[1].bias.copy_(torch.arange(24.0))
    mods = module(torch.zeros(1, 3))
    assert len(mods) == 2 and all(isinstance(m, norms.Modulation) for m in mods)
    for branch, mod in enumerate(mods):
        for field, value in enumerate(mod):
            start = 4 * (3 * branch + field)
            torch.testing.assert_close(value, torch.arange(start, start + 4.0)[None])


@given(
    batch=st.integers(1, 3),
    tokens=st.integers(1, 5),
    width=st.integers(2, 8),
    num_branches=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_adaln_zero_residual_block_is_identity_at_init(batch, tokens, width, num_branches, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    adaln = norms.AdaLNZero(width, 6, num_branches=num_branches)
    branches = [torch.nn.Linear(width, width) for _ in range(num_branches)]
    x = torch.randn(batch, tokens, width, generator=gen) * 4
    c = torch.randn(batch, 6, generator=gen)
    y = x
    for mod, branch in zip(adaln(c), branches, strict=True):
        assert torch.count_nonzero(mod.gate) == 0
        y = y + mod.gate[:, None] * branch(adaln.normalize(y, mod))
    torch.testing.assert_close(y, x, rtol=0, atol=0)


def test_adaln_modules_round_trip_and_reject_bad_arguments(gen):
    module = norms.AdaLNZero(4, 3, num_branches=3)
    with torch.no_grad():
        module.proj[1].weight.normal_(generator=gen)
    clone = norms.build("adaln_zero", 4, cond_features=3, num_branches=3)
    clone.load_state_dict(module.state_dict())
    c = torch.randn(2, 3, generator=gen)
    for got, want in zip(clone(c), module(c), strict=True):
        torch.testing.assert_close(got, want)
    assert "num_branches=3" in repr(module)
    module.reset_parameters()
    assert torch.count_nonzero(module.proj[1].weight) == 0
    with pytest.raises(ValueError, match="condition"):
        module(torch.randn(2, 4))
    with pytest.raises(ValueError, match="num_branches"):
        norms.AdaLNZero(4, 3, num_branches=0)
    with pytest.raises(ValueError, match="cond_features"):
        norms.AdaLN(4, 0)
    with pytest.raises(ValueError, match="features"):
        norms.AdaLN(4, 3)(torch.randn(2, 3, 5), c)


def test_adain_module_matches_function_and_checks_channels(gen):
    module = norms.build("adain", 3)
    content, style = torch.randn(2, 3, 4, 4, generator=gen), torch.randn(1, 3, 5, 5, generator=gen)
    torch.testing.assert_close(module(content, style), F.adain(content, style))
    assert not list(module.parameters())
    with pytest.raises(ValueError, match="features"):
        module(torch.randn(2, 4, 4, 4), torch.randn(2, 4, 4, 4))
    with pytest.raises(ValueError, match="eps"):
        norms.AdaIN(3, eps=0)


def test_adain_and_cin_agree_across_memory_layouts(gen):
    # Contiguous inputs take the native group-norm path, channels_last the composite one.
    content = torch.randn(2, 3, 5, 6, generator=gen) * 2 + 3
    style = torch.randn(2, 3, 4, 4, generator=gen)
    strided = content.contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(F.adain(strided, style), F.adain(content, style), **TOL)
    torch.testing.assert_close(F.adain(strided, style).double(), ref.adain(content, style), **TOL)
    weight, bias = _random_tables(gen, 2, 3)
    style_ids = torch.tensor([1, 0])
    torch.testing.assert_close(
        F.conditional_instance_norm(strided, style_ids, weight, bias),
        F.conditional_instance_norm(content, style_ids, weight, bias),
        **TOL,
    )


@pytest.mark.parametrize("stats_batch", [1, 3])
def test_adain_with_stats_imposes_the_given_statistics(gen, stats_batch):
    content = torch.randn(3, 4, 6, 5, generator=gen, dtype=torch.float64)
    mean = torch.randn(stats_batch, 4, generator=gen, dtype=torch.float64)
    std = torch.rand(stats_batch, 4, generator=gen, dtype=torch.float64) + 0.5
    got = F.adain_with_stats(content, mean, std)
    mean_c, var_c = (stat[..., None, None] for stat in ref.spatial_mean_var(content))
    expected = std[..., None, None] * (content - mean_c) / (var_c + 1e-5).sqrt()
    torch.testing.assert_close(got, expected + mean[..., None, None])


def test_adain_with_stats_is_adain_given_the_style_statistics(gen):
    content = torch.randn(2, 3, 5, 5, generator=gen)
    style = torch.randn(1, 3, 7, 4, generator=gen) * 2 + 1
    mean, std = F.channel_mean_std(style)
    got = F.adain_with_stats(content, mean.flatten(1), std.flatten(1))
    torch.testing.assert_close(got, F.adain(content, style))


@pytest.mark.parametrize(
    ("mean_shape", "std_shape"), [((2, 3), (2, 4)), ((3, 4), (3, 4)), ((4,), (1, 4))]
)
def test_adain_with_stats_rejects_mismatched_statistics(mean_shape, std_shape):
    with pytest.raises(ValueError, match="mean|std"):
        F.adain_with_stats(torch.zeros(2, 4, 3, 3), torch.zeros(mean_shape), torch.ones(std_shape))
