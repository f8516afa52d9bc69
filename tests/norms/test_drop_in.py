"""``norms`` as a drop-in for the norm layers of real torchvision and timm architectures.

Each case builds a stock model (torch / timm / torchvision layers, ``pretrained=False``,
nothing downloaded) and the same model with ``norms`` layers, either through the
model's own ``norm_layer=`` hook (the calls users make) or by :func:`swap_norms`. Every
case checks that the stock state dict loads strictly into the swapped model and back,
and that outputs, gradients and the state after a training step (running statistics)
agree in train and eval, in float32 and, for eval, in bfloat16 (no less accurate than
torch's own layers against the float32 result). Inputs are tiny (2 images of 32 px) and
each model is built once per module.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import pytest
import timm
import timm.layers
import torch
import torchvision
from timm.layers.grn import GlobalResponseNorm as TimmGRN
from torch import Tensor, nn
from torch.nn.utils import parametrizations
from torchvision.models.convnext import CNBlock, CNBlockConfig, ConvNeXt

import norms

# --------------------------------------------------------------------------- swapping


def _equivalent(module: nn.Module) -> nn.Module | None:
    """The ``norms`` layer computing what ``module`` computes, or ``None`` for others."""
    param = next(module.parameters(), None)
    factory = {"device": None, "dtype": None if param is None else param.dtype}
    if isinstance(module, TimmGRN):
        return norms.GlobalResponseNorm(
            module.weight.numel(),
            eps=module.eps,
            channels_last=module.channel_dim == -1,
            **factory,
        )
    if isinstance(module, timm.layers.LayerNorm2d | torchvision.models.convnext.LayerNorm2d):
        return norms.LayerNorm(
            module.normalized_shape[0],
            eps=module.eps,
            elementwise_affine=module.elementwise_affine,
            bias=module.bias is not None,
            channels_first=True,
            **factory,
        )
    if isinstance(module, nn.LayerNorm):
        return norms.LayerNorm(
            module.normalized_shape,
            eps=module.eps,
            elementwise_affine=module.elementwise_affine,
            bias=module.bias is not None,
            **factory,
        )
    if isinstance(module, nn.RMSNorm):
        return norms.RMSNorm(
            module.normalized_shape,
            eps=module.eps,
            elementwise_affine=module.elementwise_affine,
            **factory,
        )
    if isinstance(module, nn.GroupNorm):
        return norms.GroupNorm(
            module.num_channels,
            num_groups=module.num_groups,
            eps=module.eps,
            affine=module.affine,
            **factory,
        )
    if isinstance(module, nn.modules.batchnorm._NormBase):  # BatchNorm*d, InstanceNorm*d
        is_instance = isinstance(module, nn.modules.instancenorm._InstanceNorm)
        return (norms.InstanceNorm if is_instance else norms.BatchNorm)(
            module.num_features,
            eps=module.eps,
            momentum=module.momentum,
            affine=module.affine,
            track_running_stats=module.track_running_stats,
            **factory,
        )
    if isinstance(module, nn.LocalResponseNorm):
        assert module.size % 2 == 1, "torch's even-size window differs from the AlexNet one"
        # torch divides alpha by size (a mean of squares); norms uses AlexNet's sum.
        return norms.LocalResponseNorm(
            size=module.size, alpha=module.alpha / module.size, beta=module.beta, k=module.k
        )
    return None


def swap_norms(model: nn.Module) -> nn.Module:
    """Replace, in place, every torch / timm / torchvision norm layer by its ``norms`` twin."""
    for name, child in model.named_children():
        replacement = _equivalent(child)
        if replacement is None:
            swap_norms(child)
        else:
            setattr(model, name, replacement)
    return model


def _norm_types(model: nn.Module) -> set[str]:
    """``package.Class`` of every norm layer (``...Norm``, ``...Norm2d``) in ``model``."""
    return {
        type(m).__module__.split(".")[0] + "." + type(m).__name__
        for m in model.modules()
        if re.search(r"Norm(\dd)?$", type(m).__name__)
    }


# --------------------------------------------------------------------------- the cases


@dataclass
class Case:
    stock: nn.Module
    swapped: nn.Module
    x: Tensor


def _images() -> Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _tv_resnet18() -> Case:
    stock = torchvision.models.resnet18(num_classes=10)
    swapped = torchvision.models.resnet18(num_classes=10, norm_layer=norms.BatchNorm)
    return Case(stock, swapped, _images())


def _tv_convnext() -> Case:
    # convnext_tiny's code paths (LayerNorm2d in stem / downsampling / head, nn.LayerNorm
    # in the blocks) at a fraction of its 28M parameters.
    setting = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]
    stock = ConvNeXt(setting, num_classes=10)
    swapped = ConvNeXt(
        setting,
        num_classes=10,
        block=partial(CNBlock, norm_layer=partial(norms.LayerNorm, eps=1e-6)),
        norm_layer=partial(norms.LayerNorm, eps=1e-6, channels_first=True),
    )
    return Case(stock, swapped, _images())


def _timm_vit_tiny() -> Case:
    build = partial(timm.create_model, "vit_tiny_patch16_224", pretrained=False)
    stock = build(img_size=32, num_classes=10, norm_layer=nn.LayerNorm)
    swapped = build(img_size=32, num_classes=10, norm_layer=norms.LayerNorm)
    return Case(stock, swapped, _images())


def _timm_resnet18_group() -> Case:
    build = partial(timm.create_model, "resnet18", pretrained=False, num_classes=10)
    stock = build(norm_layer="groupnorm")  # timm.layers.GroupNorm(C, num_groups=32)
    swapped = build(norm_layer=partial(norms.GroupNorm, num_groups=32))
    return Case(stock, swapped, _images())


def _timm_convnextv2_atto() -> Case:
    # conv_mlp=True: LayerNorm2d everywhere, GRN on (B, C, H, W).
    build = partial(timm.create_model, "convnextv2_atto", pretrained=False, num_classes=10)
    stock = build()
    swapped = swap_norms(build(norm_layer=partial(norms.LayerNorm, eps=1e-6, channels_first=True)))
    return Case(stock, swapped, _images())


def _timm_convnextv2_atto_channels_last() -> Case:
    # conv_mlp=False: channels-last LayerNorm and GRN on (B, H, W, C) inside the blocks.
    stock = timm.create_model("convnextv2_atto", pretrained=False, num_classes=10, conv_mlp=False)
    return Case(stock, swap_norms(copy.deepcopy(stock)), _images())


def _tokens() -> Tensor:
    return torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(2))


def _torch_prenorm_transformer() -> Case:
    def layer() -> nn.TransformerEncoderLayer:
        return nn.TransformerEncoderLayer(
            32, 4, dim_feedforward=64, dropout=0.0, batch_first=True, norm_first=True
        )

    stock = nn.Sequential(layer(), layer(), nn.LayerNorm(32))
    return Case(stock, swap_norms(copy.deepcopy(stock)), _tokens())


class _PreNormBlock(nn.Module):
    """``x + attn(norm1(x))``, then ``x + mlp(norm2(x))`` with any norm factory."""

    def __init__(self, width: int, norm: Callable[[int], nn.Module]) -> None:
        super().__init__()
        self.norm1, self.norm2 = norm(width), norm(width)
        self.attn = nn.MultiheadAttention(width, 4, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )

    def forward(self, x: Tensor) -> Tensor:  # (B, T, D)
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def _rms_prenorm_transformer() -> Case:
    # torch's TransformerEncoderLayer reads norm1.bias in eval, so it cannot hold an
    # RMSNorm; this block is the LLaMA-style layout. nn.RMSNorm's eps is None.
    stock = nn.Sequential(_PreNormBlock(32, nn.RMSNorm), _PreNormBlock(32, nn.RMSNorm))
    return Case(stock, swap_norms(copy.deepcopy(stock)), _tokens())


def _alexnet_lrn() -> Case:
    stock = nn.Sequential(
        nn.Conv2d(3, 16, 5, padding=2),
        nn.ReLU(),
        nn.LocalResponseNorm(5, alpha=0.5, beta=0.75, k=2.0),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 24, 3, padding=1),
        nn.ReLU(),
        nn.LocalResponseNorm(3, alpha=0.3, beta=0.6, k=1.0),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(24, 10),
    )
    return Case(stock, swap_norms(copy.deepcopy(stock)), _images())


def _instance_norm_net() -> Case:
    stock = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.InstanceNorm2d(16, affine=True),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1),
        nn.InstanceNorm2d(16, affine=True, track_running_stats=True),
        nn.ReLU(),
        nn.Conv2d(16, 8, 3, padding=1),
        nn.InstanceNorm2d(8, track_running_stats=True, momentum=0.3),
    )
    return Case(stock, swap_norms(copy.deepcopy(stock)), _images())


def _weight_normed_convs() -> Case:
    def build(weight_norm: Callable[..., nn.Module]) -> nn.Module:
        torch.manual_seed(3)
        return nn.Sequential(
            weight_norm(nn.Conv2d(3, 8, 3, padding=1)),  # dim=0: per output channel
            nn.ReLU(),
            weight_norm(nn.ConvTranspose2d(8, 8, 3, stride=2), dim=1),
            nn.ReLU(),
            weight_norm(nn.Conv2d(8, 8, 3), dim=-1),  # torch: the whole tensor
            nn.ReLU(),
            weight_norm(nn.Conv2d(8, 4, 3), dim=None),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            weight_norm(nn.Linear(4, 10), dim=-2),
        )

    return Case(build(parametrizations.weight_norm), build(norms.weight_norm), _images())


CASES: dict[str, Callable[[], Case]] = {
    "torchvision_resnet18": _tv_resnet18,
    "torchvision_convnext": _tv_convnext,
    "timm_vit_tiny": _timm_vit_tiny,
    "timm_resnet18_groupnorm": _timm_resnet18_group,
    "timm_convnextv2_atto": _timm_convnextv2_atto,
    "timm_convnextv2_atto_channels_last": _timm_convnextv2_atto_channels_last,
    "prenorm_transformer_layernorm": _torch_prenorm_transformer,
    "prenorm_transformer_rmsnorm": _rms_prenorm_transformer,
    "alexnet_lrn": _alexnet_lrn,
    "instance_norm_net": _instance_norm_net,
    "weight_normed_convs": _weight_normed_convs,
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One intra-op thread: these tiny forwards are many times faster on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request) -> Case:
    torch.manual_seed(0)
    built = CASES[request.param]()
    _perturb(built.stock, torch.Generator().manual_seed(4))
    return built


def _perturb(model: nn.Module, gen: torch.Generator) -> None:
    """Move every parameter and running statistic off its initial value.

    Norm weights of ones, zero biases, zero GRN and layer-scale parameters would hide
    a wrong affine; positive running variances stay positive.
    """
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not tensor.is_floating_point():
                continue
            if name.endswith("running_var"):
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            else:
                tensor.add_(0.1 * torch.randn(tensor.shape, generator=gen))


# --------------------------------------------------------------------------- checks


def _assert_close(
    actual: Tensor, expected: Tensor, tol: float, what: str, scale: float | None = None
) -> None:
    """Max error within ``tol`` times ``scale`` (default: the expected tensor's largest
    magnitude), plus a floor of 1e-6."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    error = (actual.double() - expected.double()).abs().max().item()
    if scale is None:
        scale = expected.double().abs().max().item()
    assert error <= tol * scale + 1e-6, f"{what}: max error {error:.3g} at scale {scale:.3g}"


def _loaded_pair(case: Case) -> tuple[nn.Module, nn.Module]:
    stock, swapped = copy.deepcopy(case.stock), copy.deepcopy(case.swapped)
    swapped.load_state_dict(stock.state_dict(), strict=True)
    return stock, swapped


def test_every_norm_layer_was_swapped(case):
    stock_types, swapped_types = _norm_types(case.stock), _norm_types(case.swapped)
    assert stock_types and not any(t.startswith("norms.") for t in stock_types)
    assert all(t.startswith("norms.") for t in swapped_types), swapped_types
    assert set(case.stock.state_dict()) == set(case.swapped.state_dict())


def test_train_step_matches_outputs_gradients_and_running_stats(case):
    stock, swapped = _loaded_pair(case)
    stock.train(), swapped.train()
    out_stock, out_swapped = stock(case.x), swapped(case.x)
    _assert_close(out_swapped, out_stock, 1e-4, "train output")
    probe = torch.randn(out_stock.shape, generator=torch.Generator().manual_seed(5))
    (out_stock * probe).sum().backward()
    (out_swapped * probe).sum().backward()
    swapped_params = dict(swapped.named_parameters())
    # Relative to the largest gradient of the model: some true gradients are zero (a
    # conv bias before instance norm) and only their rounding noise is left to compare.
    grad_scale = max(p.grad.abs().max().item() for p in stock.parameters())
    for name, param in stock.named_parameters():
        _assert_close(
            swapped_params[name].grad, param.grad, 1e-4, f"grad of {name}", scale=grad_scale
        )
    swapped_state = swapped.state_dict()
    for name, tensor in stock.state_dict().items():
        if name.endswith("num_batches_tracked") and isinstance(
            _owner(stock, name), nn.modules.instancenorm._InstanceNorm
        ):
            # torch's instance norm never advances its counter; norms' counts batches.
            assert tensor.item() == 0 and swapped_state[name].item() == 1
        elif tensor.is_floating_point():
            _assert_close(swapped_state[name], tensor, 1e-5, f"state {name}")
        else:
            assert torch.equal(swapped_state[name], tensor), name


def _owner(model: nn.Module, state_name: str) -> nn.Module:
    return model.get_submodule(state_name.rpartition(".")[0])


def test_eval_matches_and_state_dicts_load_both_ways(case):
    stock, swapped = _loaded_pair(case)
    stock.eval(), swapped.eval()
    expected = stock(case.x)
    _assert_close(swapped(case.x), expected, 1e-4, "eval output")
    # Back: a differently perturbed stock model takes the swapped model's state strictly.
    other = copy.deepcopy(case.stock)
    _perturb(other, torch.Generator().manual_seed(6))
    assert not torch.allclose(other.eval()(case.x), expected)
    other.load_state_dict(swapped.state_dict(), strict=True)
    _assert_close(other(case.x), expected, 1e-6, "eval output after loading back")


def test_bfloat16_eval_is_as_accurate_as_the_stock_layers(case):
    stock, swapped = _loaded_pair(case)
    stock.eval(), swapped.eval()
    reference = stock(case.x).double()
    scale = reference.abs().max().item()
    x = case.x.to(torch.bfloat16)
    out = swapped.to(torch.bfloat16)(x)
    assert out.dtype == torch.bfloat16
    error = (out.double() - reference).abs().max().item()
    if any(isinstance(m, nn.LocalResponseNorm) for m in stock.modules()):
        # torch's LRN has no bfloat16 CPU kernel (avg_pool3d); norms' has.
        with pytest.raises(NotImplementedError, match="BFloat16"):
            stock.to(torch.bfloat16)(x)
        assert error <= 2**-6 * scale, error
        return
    stock_error = (stock.to(torch.bfloat16)(x).double() - reference).abs().max().item()
    # bfloat16 keeps 8 significant bits (2^-8 relative); both models round their convs
    # and matmuls alike, so the norms may add at most a fraction of torch's own error.
    assert error <= 1.5 * stock_error + 2**-8 * scale, (error, stock_error, scale)
