"""torch's conventions, layer by layer: factory kwargs and meta construction, ``None``
defaults, state-dict layouts (instance norm's ``num_batches_tracked``, weight norm's legacy
keys), weight-norm ``dim``, LRN without a channel count, GRN and layer norm layouts."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision
from timm.layers import LayerNorm2d, RmsNorm2d
from timm.layers.grn import GlobalResponseNorm as TimmGRN
from torch import nn
from torch.nn.utils import parametrizations

import norms

EXTRA_KWARGS = {
    "conditional_instance": {"num_styles": 3},
    "adaln": {"cond_features": 5},
    "adaln_zero": {"cond_features": 5},
    "group": {"num_groups": 4},
}


def _build(name: str, **factory) -> nn.Module:
    return norms.build(name, 8, **EXTRA_KWARGS.get(name, {}), **factory)


# ------------------------------------------------------------------ factory kwargs, meta


@pytest.mark.parametrize("name", norms.available())
def test_every_module_takes_device_and_dtype(name):
    module = _build(name, device="meta", dtype=torch.float64)
    for key, tensor in module.state_dict().items():
        assert tensor.device.type == "meta", key
        assert tensor.dtype == (torch.float64 if tensor.is_floating_point() else torch.long), key


def _meta_then_materialised(build, form: str) -> nn.Module:
    if form == "context":
        with torch.device("meta"):
            module = build()
    else:
        module = build(device="meta")
    module.to_empty(device="cpu")
    module.reset_parameters()
    return module


@pytest.mark.parametrize("form", ["context", "kwarg"])
@pytest.mark.parametrize("name", norms.available())
def test_meta_construction_then_to_empty_and_reset_equals_eager(name, form):
    eager = _build(name).state_dict()
    materialised = _meta_then_materialised(lambda **kw: _build(name, **kw), form).state_dict()
    assert materialised.keys() == eager.keys()
    for key, tensor in eager.items():
        assert torch.equal(materialised[key], tensor), key


TORCH_TWINS = [
    (lambda **kw: norms.LayerNorm(8, **kw), lambda **kw: nn.LayerNorm(8, **kw)),
    (lambda **kw: norms.RMSNorm(8, **kw), lambda **kw: nn.RMSNorm(8, **kw)),
    (lambda **kw: norms.GroupNorm(8, num_groups=4, **kw), lambda **kw: nn.GroupNorm(4, 8, **kw)),
    (lambda **kw: norms.BatchNorm(8, **kw), lambda **kw: nn.BatchNorm2d(8, **kw)),
    (
        lambda **kw: norms.InstanceNorm(8, affine=True, track_running_stats=True, **kw),
        lambda **kw: nn.InstanceNorm2d(8, affine=True, track_running_stats=True, **kw),
    ),
]


@pytest.mark.parametrize(
    ("ours", "theirs"), TORCH_TWINS, ids=["layer", "rms", "group", "batch", "instance"]
)
def test_meta_materialised_state_equals_torchs(ours, theirs):
    mine = _meta_then_materialised(ours, "context").state_dict()
    torchs = _meta_then_materialised(theirs, "context").state_dict()
    assert mine.keys() == torchs.keys()
    for key, tensor in torchs.items():
        assert torch.equal(mine[key], tensor) and mine[key].dtype == tensor.dtype, key


def test_batch_norm_rnn_takes_factory_kwargs():
    rnn = norms.BatchNormRNN(4, 6, device="meta", dtype=torch.float64)
    assert {t.device.type for t in rnn.state_dict().values()} == {"meta"}
    assert rnn.input_proj.weight.dtype == torch.float64


# ---------------------------------------------------------------- None means torch's None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_rms_norm_eps_none_is_torchs_machine_epsilon(dtype):
    gen = torch.Generator().manual_seed(0)
    # Tiny values: the mean of squares (~1e-8) is comparable to float32's eps (1.2e-7).
    x = (torch.randn(3, 8, generator=gen) * 1e-4).to(dtype)
    torchs = nn.RMSNorm(8, dtype=dtype)
    assert torchs.eps is None
    mine = norms.RMSNorm(8, eps=None, dtype=dtype)
    torch.testing.assert_close(mine(x), torchs(x), rtol=0, atol=0)
    torch.testing.assert_close(norms.F.rms_norm(x, 8, eps=None), torchs(x), rtol=0, atol=0)
    # torch's None is finfo of the computation dtype: float32 for half types.
    eps = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    wide = x.double()
    want = wide / (wide.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    torch.testing.assert_close(mine(x).double(), want, rtol=1e-2, atol=0)


def test_batch_norm_momentum_none_is_torchs_cumulative_average():
    gen = torch.Generator().manual_seed(1)
    mine, torchs = norms.BatchNorm(3, momentum=None), nn.BatchNorm2d(3, momentum=None)
    for step in range(3):
        x = torch.randn(4, 3, 2, 2, generator=gen) * (step + 1) + step
        torch.testing.assert_close(mine(x), torchs(x))
    for key, tensor in torchs.state_dict().items():
        torch.testing.assert_close(mine.state_dict()[key], tensor)


def test_instance_norm_momentum_none_is_the_cumulative_average():
    gen = torch.Generator().manual_seed(2)
    module = norms.InstanceNorm(3, momentum=None, track_running_stats=True)
    batches = [torch.randn(2, 3, 4, 5, generator=gen) * (i + 1) + i for i in range(3)]
    for x in batches:
        module(x)
    # Each step's statistic: the batch average of the per-instance mean / unbiased var.
    means = torch.stack([x.mean((0, 2, 3)) for x in batches])
    variances = torch.stack([x.var((2, 3), correction=1).mean(0) for x in batches])
    torch.testing.assert_close(module.running_mean, means.mean(0))
    torch.testing.assert_close(module.running_var, variances.mean(0))
    assert module.num_batches_tracked.item() == 3


# ----------------------------------------------------------------- instance norm state


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_instance_norm_state_dicts_load_torchs_strictly_both_ways(rank, affine):
    gen = torch.Generator().manual_seed(3)
    torch_class = {1: nn.InstanceNorm1d, 2: nn.InstanceNorm2d, 3: nn.InstanceNorm3d}[rank]
    shape = (2, 4) + (5, 3, 2)[:rank]
    for tracking in (True, False):
        kwargs = {"affine": affine, "track_running_stats": tracking, "momentum": 0.3}
        torchs, mine = torch_class(4, **kwargs), norms.InstanceNorm(4, **kwargs)
        with torch.no_grad():
            for tensor in torchs.parameters():
                tensor.add_(torch.randn(tensor.shape, generator=gen))
        for _ in range(2):  # moves torch's running statistics
            torchs(torch.randn(shape, generator=gen) + 1.0)
        mine.load_state_dict(torchs.state_dict(), strict=True)
        x = torch.randn(shape, generator=gen)
        torch.testing.assert_close(mine.eval()(x), torchs.eval()(x))
        mine.train()(torch.randn(shape, generator=gen) * 2.0)  # moves ours
        back = torch_class(4, **kwargs)
        back.load_state_dict(mine.state_dict(), strict=True)
        torch.testing.assert_close(back.eval()(x), mine.eval()(x))


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: norms.LayerNorm(8, eps=None), "eps"),
        (lambda: norms.LayerNorm(8, eps="1e-5"), "eps"),
        (lambda: norms.LayerNorm(8.0), "num_features"),
        (lambda: norms.LayerNorm((8, 4), channels_first=True), "channels_first"),
        (lambda: norms.LpNorm(8, p=None), "p must"),
        (lambda: norms.GroupNorm(8, num_groups=None), "num_groups"),
        (lambda: norms.GroupNorm(8, num_groups="4"), "num_groups"),
        (lambda: norms.GroupNorm(None), "num_features"),
        (lambda: norms.BatchNorm(8, momentum="0.1"), "momentum"),
        (lambda: norms.BatchNorm(8, eval_mix=None), "eval_mix"),
        (lambda: norms.InstanceNorm(8, momentum=1.5), "momentum"),
        (lambda: norms.InstanceNorm(8, eps=None), "eps"),
        (lambda: norms.GhostBatchNorm(8, virtual_batch_size=None), "virtual_batch_size"),
        (lambda: norms.BatchRenorm(8, r_max=None), "r_max"),
        (lambda: norms.AdaIN(8, eps=None), "eps"),
        (lambda: norms.AdaLNZero(8, None), "cond_features"),
        (lambda: norms.ConditionalInstanceNorm(8, num_styles=None), "num_styles"),
        (lambda: norms.LocalResponseNorm(size=None), "size"),
        (lambda: norms.LocalResponseNorm(alpha=None), "alpha"),
        (lambda: norms.LocalContrastNorm(kernel_size=None), "kernel_size"),
        (lambda: norms.GlobalResponseNorm(8, eps=None), "eps"),
        (lambda: norms.DynamicTanh(8, alpha_init=None), "alpha_init"),
        (lambda: norms.BatchNormRNN(4, None), "hidden_size"),
        (lambda: norms.F.layer_norm(torch.zeros(2, 3), 3, eps=None), "eps"),
        (lambda: norms.F.batch_norm(torch.zeros(4, 3), momentum=None), "momentum"),
        (lambda: norms.F.local_response_norm(torch.zeros(2, 3), 3, beta=None), "beta"),
        (lambda: norms.weight_norm(nn.Linear(3, 2), dim="0"), "dim"),
        (lambda: norms.weight_norm(nn.Linear(3, 2), dim=-3), "out of range"),
    ],
)
def test_bad_arguments_raise_value_error_never_type_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------------- weight norm


def _conv() -> nn.Conv2d:
    torch.manual_seed(4)
    return nn.Conv2d(3, 4, (2, 5))


@pytest.mark.parametrize("dim", [0, 1, 2, 3, -1, -2, -3, -4, None])
def test_weight_norm_dim_means_what_torch_means(dim):
    mine, torchs = (
        norms.weight_norm(_conv(), dim=dim),
        parametrizations.weight_norm(_conv(), dim=dim),
    )
    g_mine = mine.parametrizations.weight.original0
    g_torch = torchs.parametrizations.weight.original0
    assert g_mine.shape == g_torch.shape  # -1 and None: one g, shape ()
    with torch.no_grad():
        g_torch.mul_(torch.linspace(0.5, 2.0, g_torch.numel()).view(g_torch.shape))
    mine.load_state_dict(torchs.state_dict(), strict=True)
    torch.testing.assert_close(mine.weight, torchs.weight)
    back = parametrizations.weight_norm(_conv(), dim=dim)
    back.load_state_dict(mine.state_dict(), strict=True)
    torch.testing.assert_close(back.weight, mine.weight)


@pytest.mark.parametrize("dim", [0, 1, -2, None])
def test_legacy_weight_g_weight_v_state_dicts_load_as_into_torchs_parametrization(dim):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.nn.utils.weight_norm is deprecated
        legacy = nn.Sequential(nn.ReLU(), torch.nn.utils.weight_norm(_conv(), dim=dim))
    with torch.no_grad():
        legacy[1].weight_g.mul_(1.5)
    state = legacy.state_dict()
    assert {"1.weight_g", "1.weight_v"} <= state.keys()
    want = (
        legacy[1].weight_g
        * legacy[1].weight_v
        / torch.norm_except_dim(legacy[1].weight_v, 2, -1 if dim is None else dim)
    )
    for weight_norm in (norms.weight_norm, parametrizations.weight_norm):
        model = nn.Sequential(nn.ReLU(), weight_norm(_conv(), dim=dim))
        model.load_state_dict(dict(state), strict=True)
        torch.testing.assert_close(model[1].weight, want)


# ----------------------------------------------------------------------- layouts


@pytest.mark.parametrize("size", [1, 3, 5])
@pytest.mark.parametrize("channels", [2, 7])
def test_local_response_norm_without_num_features_is_torchs_with_alpha_times_size(size, channels):
    x = torch.randn(2, channels, 4, 3, generator=torch.Generator().manual_seed(5))
    theirs = nn.LocalResponseNorm(size, alpha=0.4, beta=0.7, k=1.5)
    mine = norms.LocalResponseNorm(size=size, alpha=0.4 / size, beta=0.7, k=1.5)
    torch.testing.assert_close(mine(x), theirs(x))
    assert repr(mine).startswith("LocalResponseNorm(size=")


@pytest.mark.parametrize("channels_last", [True, False])
def test_global_response_norm_layouts_match_timm_and_load_its_state(channels_last):
    gen = torch.Generator().manual_seed(6)
    theirs = TimmGRN(8, channels_last=channels_last)
    with torch.no_grad():
        for tensor in theirs.parameters():
            tensor.copy_(torch.randn(tensor.shape, generator=gen))
    mine = norms.GlobalResponseNorm(8, channels_last=channels_last)
    mine.load_state_dict(theirs.state_dict(), strict=True)
    shape = (2, 5, 4, 8) if channels_last else (2, 8, 5, 4)
    x = torch.randn(shape, generator=gen)
    torch.testing.assert_close(mine(x), theirs(x))
    # The two layouts are one map: channels-last input is the permuted channels-first one.
    other = norms.GlobalResponseNorm(8, channels_last=not channels_last)
    other.load_state_dict(mine.state_dict())
    moved = x.movedim(-1, 1) if channels_last else x.movedim(1, -1)
    back = other(moved)
    torch.testing.assert_close(
        back.movedim(1, -1) if channels_last else back.movedim(-1, 1), mine(x)
    )
    with pytest.raises(ValueError, match="expected"):
        mine(moved)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda: norms.LayerNorm(8, eps=1e-6, channels_first=True), lambda: LayerNorm2d(8)),
        (
            lambda: norms.LayerNorm(8, eps=1e-6, channels_first=True),
            lambda: torchvision.models.convnext.LayerNorm2d(8, eps=1e-6),
        ),
        (lambda: norms.RMSNorm(8, channels_first=True), lambda: RmsNorm2d(8, eps=1e-6)),
    ],
    ids=["timm_layernorm2d", "torchvision_layernorm2d", "timm_rmsnorm2d"],
)
def test_channels_first_trailing_norms_match_the_2d_layers(ours, theirs):
    gen = torch.Generator().manual_seed(7)
    mine, torchs = ours(), theirs()
    with torch.no_grad():
        for tensor in torchs.parameters():
            tensor.add_(torch.randn(tensor.shape, generator=gen))
    mine.load_state_dict(torchs.state_dict(), strict=True)
    x = torch.randn(2, 8, 3, 5, generator=gen) + 2.0
    torch.testing.assert_close(mine(x), torchs(x))
