"""The Triton kernels of ``norms.kernels`` against their float64 references.

On a machine without CUDA they run in Triton's interpreter (``tests/conftest.py`` sets
``TRITON_INTERPRET=1``), on small shapes. The interpreter casts float32 to bfloat16 by
truncation where a GPU rounds to nearest, so bfloat16 outputs are compared within one
bfloat16 ulp of the reference. Shapes are chosen to cover the edges: widths that are not
powers of two, several tiles and several chunks per channel (forced by small blocks),
partial channel blocks, batch-1 broadcasting, NCHW and channels_last.
"""

from __future__ import annotations

import math

import norms_reference as ref
import pytest
import torch

import norms
from norms.kernels import dispatch

triton = pytest.importorskip("triton")
from norms.kernels import groups, rows  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OFFSET = 1e4


def _randn(*shape, seed=0, offset=0.0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return offset + scale * torch.randn(*shape, generator=gen, dtype=torch.float64)


def _on(x: torch.Tensor, dtype=torch.float32, channels_last=False) -> torch.Tensor:
    x = x.to(DEVICE, dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _bf16_ulp(reference: torch.Tensor) -> torch.Tensor:
    """One bfloat16 ulp at each value: 2^(exponent - 7) (8 significant bits)."""
    exponent = torch.floor(torch.log2(reference.abs().clamp_min(2.0**-126)))
    return torch.exp2(exponent - 7)


def assert_matches(got: torch.Tensor, reference: torch.Tensor, *, atol=1e-5, rtol=1e-5):
    """fp32: close to the float64 reference; bf16: within one bf16 ulp plus fp32 slack."""
    got64 = got.detach().cpu().double()
    if got.dtype == torch.bfloat16:
        bound = _bf16_ulp(reference) + atol + rtol * reference.abs()
        excess = (got64 - reference).abs() - bound
        assert excess.max() <= 0, f"off by {excess.max():.3g} beyond one bf16 ulp"
    else:
        torch.testing.assert_close(got64, reference, atol=atol, rtol=rtol)


# ------------------------------------------------------------------------ rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("modulation_batch", [1, 3])
def test_triton_ada_layer_norm_matches_the_reference(dtype, modulation_batch):
    x = _on(_randn(3, 5, 48), dtype)
    shift = _on(_randn(modulation_batch, 48, seed=1))
    scale = _on(_randn(modulation_batch, 48, seed=2, scale=0.3))
    got = rows.ada_layer_norm(x, shift, scale, 1e-6)
    assert got.dtype == dtype and got.shape == x.shape
    expected = ref.ada_layer_norm(x.cpu(), shift.cpu(), scale.cpu(), 1e-6)
    assert_matches(got, expected)


def test_triton_ada_layer_norm_keeps_a_large_offset():
    x = _on(_randn(2, 4, 40, offset=OFFSET))
    shift, scale = _on(torch.zeros(2, 40)), _on(torch.zeros(2, 40))
    expected = ref.ada_layer_norm(x.cpu(), shift.cpu(), scale.cpu(), 1e-6)
    assert_matches(rows.ada_layer_norm(x, shift, scale, 1e-6), expected, atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_weight", [False, True])
def test_triton_rms_norm_matches_the_reference(dtype, with_weight):
    x = _on(_randn(2, 3, 37, offset=0.5), dtype)
    weight = _on(_randn(37, seed=3)) if with_weight else None
    expected = ref.rms_norm(x.cpu(), 1, None if weight is None else weight.cpu(), 1e-6)
    assert_matches(rows.rms_norm(x, weight, 1e-6), expected)


# ---------------------------------------------------------------------- groups

GROUP_CASES = [(1, "layer"), (2, "group"), (8, "instance")]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("num_groups", [1, 2, 8])
@pytest.mark.parametrize("tiles", ["one", "many"])
def test_triton_group_norm_matches_the_reference(channels_last, num_groups, tiles):
    x = _on(_randn(2, 8, 5, 7, offset=0.3), channels_last=channels_last)
    weight, bias = _on(torch.linspace(0.5, 2.0, 8)), _on(torch.linspace(-1.0, 1.0, 8))
    blocks = {"one": {}, "many": {"block_s": 4, "chunk_length": 12}}[tiles]
    got = groups._run(
        x, num_groups, 1e-5, scale=weight[None], shift=bias[None], apply=True, **blocks
    )[0]
    assert got.is_contiguous(memory_format=torch.channels_last) == channels_last
    expected = ref.group_norm(x.cpu(), num_groups, weight.cpu(), bias.cpu())
    assert_matches(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_triton_instance_norm_keeps_a_large_offset(dtype, channels_last):
    x = _on(_randn(2, 4, 6, 6, offset=OFFSET), dtype, channels_last)
    got = groups.group_norm(x, 4, None, None, 1e-5)
    assert got.dtype == dtype
    tolerance = {"atol": 1e-2, "rtol": 1e-3}
    assert_matches(got, ref.instance_norm(x.cpu()), **tolerance)


def test_triton_group_norm_with_a_partial_channel_block_in_channels_last():
    # 80 channels: one full block of 64 and a masked one
    x = _on(_randn(1, 80, 3, 3), channels_last=True)
    assert_matches(groups.group_norm(x, 20), ref.group_norm(x.cpu(), 20))


@pytest.mark.parametrize("style_batch", [1, 2])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_triton_adain_matches_the_reference(style_batch, channels_last):
    content = _on(_randn(2, 6, 5, 4), channels_last=channels_last)
    style = _on(_randn(style_batch, 6, 7, 3, seed=1, offset=2.0, scale=3.0), channels_last=False)
    expected = ref.adain(content.cpu(), style.cpu())
    assert_matches(groups.adain(content, style, 1e-5), expected)


def test_triton_channel_mean_std_matches_the_reference():
    x = _on(_randn(2, 5, 9, 4, offset=OFFSET))
    _, mean, std = groups._run(
        x, 5, 1e-5, scale=None, shift=None, apply=False, block_s=4, chunk_length=8
    )
    ref_mean, ref_var = ref.spatial_mean_var(x.cpu())
    torch.testing.assert_close(mean.cpu().double(), ref_mean.flatten(1), atol=1e-3, rtol=0)
    torch.testing.assert_close(
        std.cpu().double(), (ref_var + 1e-5).sqrt().flatten(1), atol=2e-4, rtol=1e-4
    )


def test_triton_kernels_refuse_what_they_do_not_take():
    x = torch.zeros(2, 8, 4, 4)
    assert groups.supports(x, 2) and groups.supports(x, 8)
    assert not groups.supports(torch.zeros(2, 12, 4, 4), 4)  # groups of 3 channels
    assert not groups.supports(x, 3)  # 3 does not divide 8
    assert not groups.supports(x.double(), 8)
    assert not groups.supports(x[:, :, ::2, :], 6)  # spatial dims do not flatten
    assert not rows.supports(torch.zeros(2, rows.MAX_WIDTH + 1))
    assert not rows.supports(torch.zeros(4, 8)[:, ::2])
    assert not rows.supports(torch.zeros(2, 8, dtype=torch.float64))


# -------------------------------------------------------------------- dispatch


def test_triton_dispatch_never_picks_a_kernel_off_cuda(monkeypatch):
    monkeypatch.setattr(dispatch, "MEASURED_WINS", {name: "x.json" for name in dispatch.KERNELS})
    assert not dispatch.chosen("adain/nchw", torch.zeros(1, 2, 3, 3))


def test_triton_dispatch_layout_names():
    x = torch.zeros(2, 4, 3, 3)
    assert dispatch.layout(x) == "nchw"
    assert dispatch.layout(x.contiguous(memory_format=torch.channels_last)) == "channels_last"


HOOKS = [
    ("ada_layer_norm/rows", rows, "ada_layer_norm"),
    ("rms_norm/rows", rows, "rms_norm"),
    ("adain/nchw", groups, "adain"),
    ("adain/channels_last", groups, "adain_with_stats"),
    ("instance_norm/channels_last", groups, "group_norm"),
    ("group_norm/channels_last", groups, "group_norm"),
]


@pytest.mark.parametrize(("name", "module", "kernel"), HOOKS, ids=[h[0] for h in HOOKS])
def test_triton_kernels_serve_norms_functions_where_chosen(monkeypatch, name, module, kernel):
    # the wiring of every hook: force the choice for this kernel name alone (as a
    # MEASURED_WINS entry would on CUDA) and check the call lands in the kernel and agrees
    monkeypatch.setattr(dispatch, "chosen", lambda wanted, x: wanted == name)
    calls = []
    original = getattr(module, kernel)

    def spy(*args, **kwargs):
        calls.append(kernel)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, kernel, spy)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randn(2, 3, 16, generator=gen)
    image = torch.randn(2, 4, 5, 5, generator=gen)
    if name.endswith("channels_last"):
        image = image.contiguous(memory_format=torch.channels_last)
    shift, scale, weight = torch.randn(3, 2, 16, generator=gen).unbind(0)
    style = torch.randn(1, 4, 6, 6, generator=gen)
    if name.startswith("ada_layer_norm"):
        got, expected = (
            norms.F.ada_layer_norm(tokens, shift, scale),
            ref.ada_layer_norm(tokens, shift, scale),
        )
    elif name.startswith("rms_norm"):
        got, expected = norms.F.rms_norm(tokens, 16, weight[0]), ref.rms_norm(tokens, 1, weight[0])
    elif name.startswith("adain"):
        got, expected = norms.F.adain(image, style), ref.adain(image, style)
    elif name.startswith("instance_norm"):
        got, expected = norms.F.instance_norm(image), ref.instance_norm(image)
    else:
        got, expected = norms.F.group_norm(image, 2), ref.group_norm(image, 2)
    assert calls, f"{name} did not reach its kernel"
    assert_matches(got, expected, atol=1e-5, rtol=1e-5)


def test_triton_tolerance_helper_is_one_bf16_ulp():
    one = torch.tensor([1.0, 3.0, 1000.0], dtype=torch.float64)
    assert _bf16_ulp(one).tolist() == [2**-7, 2**-6, 2 ** (math.floor(math.log2(1000)) - 7)]
