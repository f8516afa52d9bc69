"""Layer, RMS, Lp, group and instance norm: references, torch parity, equivalences, modules."""

import norms_reference as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import norms
from norms import F

TOL32 = {"rtol": 1e-5, "atol": 1e-5}


def _affine(gen, shape):
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


# ----------------------------------------------------------- functions vs references


@pytest.mark.parametrize("shape", [(2, 3, 8), (2, 3, 4, 5)])
@pytest.mark.parametrize("dims", [1, 2])
def test_layer_norm_matches_reference(gen, shape, dims):
    x = torch.randn(shape, generator=gen) * 3 + 2
    normalized = shape[-dims:]
    weight, bias = _affine(gen, normalized)
    got = F.layer_norm(x, normalized, weight, bias)
    torch.testing.assert_close(got.double(), ref.layer_norm(x, dims, weight, bias), **TOL32)
    torch.testing.assert_close(got, torch.nn.functional.layer_norm(x, normalized, weight, bias))


def test_rms_norm_matches_reference_and_torch(gen):
    x = torch.randn(3, 5, 16, generator=gen) * 2 + 1
    weight = torch.randn(16, generator=gen)
    got = F.rms_norm(x, 16, weight)
    torch.testing.assert_close(got.double(), ref.rms_norm(x, 1, weight), **TOL32)
    torch.testing.assert_close(got, torch.nn.RMSNorm(16, eps=1e-6).to(x)(x) * weight)


@pytest.mark.parametrize("p", [0.5, 1.0, 2.0, 3.0, 7.5])
def test_lp_norm_matches_reference(gen, p):
    x = torch.randn(2, 4, 6, generator=gen) * 2
    weight, bias = _affine(gen, (4, 6))
    got = F.lp_norm(x, p, (4, 6), weight, bias)
    torch.testing.assert_close(got.double(), ref.lp_norm(x, p, 2, weight, bias), **TOL32)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("num_groups", [1, 2, 6])
def test_group_norm_matches_reference_and_torch(gen, channels_last, num_groups):
    x = torch.randn(2, 6, 5, 4, generator=gen) * 3 - 1
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    weight, bias = _affine(gen, 6)
    got = F.group_norm(x, num_groups, weight, bias)
    torch.testing.assert_close(got.double(), ref.group_norm(x, num_groups, weight, bias), **TOL32)
    want = torch.nn.functional.group_norm(x.contiguous(), num_groups, weight, bias)
    torch.testing.assert_close(got, want, **TOL32)


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 2, 4)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_instance_norm_matches_reference_and_torch(gen, shape, channels_last):
    x = torch.randn(shape, generator=gen) * 2 + 5
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    weight, bias = _affine(gen, shape[1])
    got = F.instance_norm(x, weight, bias)
    torch.testing.assert_close(got.double(), ref.instance_norm(x, weight, bias), **TOL32)
    want = torch.nn.functional.instance_norm(x, weight=weight, bias=bias)
    torch.testing.assert_close(got, want, **TOL32)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.layer_norm(x, (4, 5)),
        lambda x: F.group_norm(x, 2),
        lambda x: F.instance_norm(x),
        lambda x: F.rms_norm(x, 5),
        lambda x: F.lp_norm(x, 3.0, 5),
    ],
    ids=["layer", "group", "instance", "rms", "lp"],
)
def test_low_precision_keeps_dtype_and_matches_reference(gen, fn):
    x = torch.randn(2, 4, 4, 5, generator=gen).to(torch.bfloat16)
    got = fn(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), fn(x.double()), rtol=1e-2, atol=2e-2)


# ------------------------------------------------------------------ equivalences


@given(
    batch=st.integers(1, 3),
    channels=st.integers(1, 6),
    height=st.integers(2, 5),
    width=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_group_norm_equivalences(batch, channels, height, width, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, channels, height, width, generator=gen, dtype=torch.float64) * 4 + 1
    weight, bias = (t.double() for t in _affine(gen, channels))
    # One group per channel is instance norm.
    torch.testing.assert_close(
        F.group_norm(x, channels, weight, bias), F.instance_norm(x, weight, bias)
    )
    # One group is layer norm over (C, H, W), with a per-channel affine.
    per_element = (channels, height, width)
    torch.testing.assert_close(
        F.group_norm(x, 1, weight, bias),
        F.layer_norm(
            x,
            per_element,
            weight[:, None, None].expand(per_element),
            bias[:, None, None].expand(per_element),
        ),
    )


@given(width=st.integers(1, 9), scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
def test_lp_norm_with_p2_is_rms_norm(width, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 2, width, generator=gen, dtype=torch.float64) * scale
    weight = torch.randn(width, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(F.lp_norm(x, 2, width, weight), F.rms_norm(x, width, weight))


# ------------------------------------------------------------------- gradients


def test_gradcheck_composite_paths():
    gen = torch.Generator().manual_seed(5)

    def leaf(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)

    x, w, b = leaf(2, 3, 4), leaf(3, 4), leaf(3, 4)
    assert torch.autograd.gradcheck(lambda x, w, b: F.lp_norm(x, 3.0, (3, 4), w, b), (x, w, b))
    # channels_last inputs take the composite (non-native) group-norm path.
    image = leaf(2, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    cw, cb = leaf(4), leaf(4)
    assert torch.autograd.gradcheck(lambda x, w, b: F.group_norm(x, 2, w, b), (image, cw, cb))
    # Instance norm with running statistics is composite too.
    running_mean, running_var = (
        torch.zeros(4, dtype=torch.float64),
        torch.ones(4, dtype=torch.float64),
    )
    assert torch.autograd.gradcheck(
        lambda x, w, b: F.instance_norm(
            x, w, b, running_mean=running_mean.clone(), running_var=running_var.clone()
        ),
        (image, cw, cb),
    )


# ---------------------------------------------------------------------- modules


def _randomise(module, gen):
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen))
    return module


@pytest.mark.parametrize(
    ("ours", "theirs", "shape"),
    [
        (lambda: norms.LayerNorm(8), lambda: torch.nn.LayerNorm(8), (2, 3, 8)),
        (lambda: norms.LayerNorm((3, 8)), lambda: torch.nn.LayerNorm((3, 8)), (2, 3, 8)),
        (lambda: norms.RMSNorm(8), lambda: torch.nn.RMSNorm(8, eps=1e-6), (2, 3, 8)),
        (lambda: norms.GroupNorm(6, num_groups=3), lambda: torch.nn.GroupNorm(3, 6), (2, 6, 4, 4)),
        (
            lambda: norms.InstanceNorm(6, affine=True),
            lambda: torch.nn.InstanceNorm2d(6, affine=True),
            (2, 6, 4, 4),
        ),
    ],
    ids=["layer", "layer2d", "rms", "group", "instance"],
)
def test_modules_match_torch_modules(gen, ours, theirs, shape):
    mine, torchs = ours(), theirs()
    torchs.load_state_dict(_randomise(mine, gen).state_dict())
    x = torch.randn(shape, generator=gen)
    torch.testing.assert_close(mine(x), torchs(x), **TOL32)


def test_instance_norm_running_stats_follow_torch_through_train_and_eval(gen):
    mine = norms.InstanceNorm(3, affine=True, track_running_stats=True, momentum=0.3)
    torchs = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3)
    torchs.load_state_dict(_randomise(mine, gen).state_dict())
    for step in range(4):
        x = torch.randn(2, 3, 5, 4, generator=gen) * (step + 1) + step
        torch.testing.assert_close(mine(x), torchs(x), **TOL32)
    torch.testing.assert_close(mine.running_mean, torchs.running_mean, **TOL32)
    torch.testing.assert_close(mine.running_var, torchs.running_var, **TOL32)
    mine.eval(), torchs.eval()
    x = torch.randn(2, 3, 5, 4, generator=gen)
    eval_out = mine(x)
    torch.testing.assert_close(eval_out, torchs(x), **TOL32)
    # In eval the running statistics, not the input's, normalise: a per-channel affine.
    rm, rv = mine.running_mean, mine.running_var
    want = (x - rm[:, None, None]) / torch.sqrt(rv[:, None, None] + 1e-5)
    want = want * mine.weight[:, None, None] + mine.bias[:, None, None]
    torch.testing.assert_close(eval_out, want, **TOL32)
    before = rm.clone()
    mine(x)
    torch.testing.assert_close(mine.running_mean, before, rtol=0, atol=0)


def test_instance_norm_without_tracking_uses_input_stats_in_eval(gen):
    module = norms.InstanceNorm(3).eval()
    x = torch.randn(2, 3, 4, 4, generator=gen)
    torch.testing.assert_close(module(x).double(), ref.instance_norm(x), **TOL32)
    assert module.running_mean is None and not list(module.buffers())


@pytest.mark.parametrize(
    "factory",
    [
        lambda: norms.LayerNorm(6),
        lambda: norms.RMSNorm(6),
        lambda: norms.LpNorm(6, p=3.0),
        lambda: norms.GroupNorm(6, num_groups=2),
        lambda: norms.InstanceNorm(6, affine=True, track_running_stats=True),
    ],
    ids=["layer", "rms", "lp", "group", "instance"],
)
def test_state_dict_round_trip(gen, factory):
    source = _randomise(factory(), gen)
    x = torch.randn(2, 6, 3, 6, generator=gen)
    source.train()(x)  # moves running statistics where there are any
    target = factory()
    target.load_state_dict(source.state_dict())
    source.eval(), target.eval()
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)
    target.reset_parameters()
    for name, tensor in target.state_dict().items():
        fill = 0.0 if name in ("bias", "running_mean", "num_batches_tracked") else 1.0
        torch.testing.assert_close(tensor, torch.full_like(tensor, fill))


def test_lp_module_p2_without_bias_is_rms_module(gen):
    x = torch.randn(2, 3, 8, generator=gen)
    torch.testing.assert_close(norms.LpNorm(8, p=2, bias=False)(x), norms.RMSNorm(8)(x))


def test_extra_repr_names_the_options():
    assert "num_groups=4" in repr(norms.GroupNorm(8, num_groups=4))
    assert "p=3.0" in repr(norms.LpNorm(8, p=3.0))
    assert "track_running_stats=True" in repr(norms.InstanceNorm(8, track_running_stats=True))


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: F.layer_norm(torch.zeros(2, 3), (4,)), "normalized_shape"),
        (lambda: F.layer_norm(torch.zeros(2, 3), 3, torch.ones(4)), "weight"),
        (lambda: F.layer_norm(torch.zeros(2, 3), 3, eps=-1.0), "eps"),
        (lambda: F.rms_norm(torch.zeros(2, 3), ()), "normalized_shape"),
        (lambda: F.lp_norm(torch.zeros(2, 3), 0.0, 3), "p must"),
        (lambda: F.lp_norm(torch.zeros(2, 3), float("inf"), 3), "p must"),
        (lambda: F.group_norm(torch.zeros(2, 6, 3), 4), "num_groups"),
        (lambda: F.group_norm(torch.zeros(6), 2), r"\(B, C"),
        (lambda: F.group_norm(torch.zeros(2, 6, 3), 3, bias=torch.zeros(3)), "bias"),
        (lambda: F.instance_norm(torch.zeros(2, 6)), "spatial"),
        (lambda: F.instance_norm(torch.zeros(2, 6, 1, 1)), "more than one"),
        (lambda: F.instance_norm(torch.zeros(2, 6, 3), use_input_stats=False), "running"),
        (
            lambda: F.instance_norm(torch.zeros(2, 6, 3), running_mean=torch.zeros(6)),
            "together",
        ),
        (lambda: norms.GroupNorm(6, num_groups=4), "num_groups"),
        (lambda: norms.GroupNorm(6, num_groups=3)(torch.zeros(2, 5, 3)), "expected"),
        (lambda: norms.InstanceNorm(6, momentum=1.5), "momentum"),
        (lambda: norms.LayerNorm(0), "num_features"),
        (lambda: norms.LpNorm(4, p=-1), "p must"),
        (lambda: norms.RMSNorm(4, eps=-1e-6), "eps"),
    ],
)
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_non_contiguous_inputs_match_reference(gen):
    tokens = torch.randn(3, 8, 5, generator=gen).transpose(1, 2)  # (3, 5, 8), strided
    weight, bias = _affine(gen, 8)
    torch.testing.assert_close(
        F.layer_norm(tokens, 8, weight, bias).double(),
        ref.layer_norm(tokens, 1, weight, bias),
        **TOL32,
    )
    image = torch.randn(2, 5, 6, 4, generator=gen).transpose(2, 3)  # (2, 5, 4, 6), strided
    torch.testing.assert_close(F.group_norm(image, 5).double(), ref.group_norm(image, 5), **TOL32)
    torch.testing.assert_close(F.instance_norm(image).double(), ref.instance_norm(image), **TOL32)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.group_norm(x, 2),
        lambda x: F.instance_norm(x),
        lambda x: F.adain(x, x[:1] * 2),
        lambda x: F.local_response_norm(x, 3),
        lambda x: F.global_response_norm(x, torch.ones(8), torch.ones(8)),
    ],
    ids=["group", "instance", "adain", "lrn", "grn"],
)
def test_image_members_keep_channels_last(gen, fn):
    x = torch.randn(2, 8, 5, 5, generator=gen).contiguous(memory_format=torch.channels_last)
    got = fn(x)
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got, fn(x.contiguous()), **TOL32)
