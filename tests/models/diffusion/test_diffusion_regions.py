"""regional_denoiser: the blend, the hidden canvas, the plain case, bad owners."""

from __future__ import annotations

import pytest
import torch

from models.diffusion import Regions, get_schedule, regional_denoiser

ALPHA_BAR = get_schedule("cosine", 1000)


def recording_model(calls: list):
    """eps = x * 2 + the region's condition value; records every call's inputs."""

    def model(x, t, cond):
        calls.append((x.clone(), t.clone(), cond))
        return 2 * x + cond.view(-1, 1, 1, 1)

    return model


def whole_image_regions(n: int, cond: torch.Tensor) -> Regions:
    return Regions(
        cond=cond,
        owner=torch.arange(n),
        weight=torch.ones(n, 1, 4, 4),
        hide=torch.zeros(n, 1, 4, 4),
        noise=torch.randn(n, 3, 4, 4),
        background=-1.0,
    )


def test_one_whole_image_region_per_image_is_the_plain_prediction():
    calls: list = []
    x, t = torch.randn(3, 3, 4, 4), torch.tensor([10, 500, 990])
    cond = torch.tensor([0.5, -1.0, 2.0])
    out = regional_denoiser(recording_model(calls), ALPHA_BAR)(x, t, whole_image_regions(3, cond))
    torch.testing.assert_close(out, 2 * x + cond.view(-1, 1, 1, 1))
    assert len(calls) == 1 and torch.equal(calls[0][1], t)


def test_regions_blend_by_weight_and_see_an_empty_canvas_where_hidden():
    # image 0: two regions splitting the columns; image 1: one whole-image region
    x = torch.randn(2, 3, 4, 4)
    t = torch.tensor([300, 700])
    left = torch.zeros(1, 4, 4)
    left[..., :2] = 1
    weight = torch.stack([left, 1 - left, torch.ones(1, 4, 4)])
    hide = torch.stack([1 - left, left, torch.zeros(1, 4, 4)])
    noise = torch.randn(3, 3, 4, 4)
    regions = Regions(
        cond=torch.tensor([1.0, -2.0, 3.0]),
        owner=torch.tensor([0, 0, 1]),
        weight=weight,
        hide=hide,
        noise=noise,
        background=-1.0,
    )
    calls: list = []
    out = regional_denoiser(recording_model(calls), ALPHA_BAR)(x, t, regions)

    ((seen, seen_t, _),) = calls
    assert torch.equal(seen_t, torch.tensor([300, 300, 700]))
    a = ALPHA_BAR[300]
    canvas = a.sqrt() * -1.0 + (1 - a).sqrt() * noise[:2]
    # region 0 sees image 0 on the left and the noisy empty canvas on the right
    torch.testing.assert_close(seen[0][..., :2], x[0][..., :2])
    torch.testing.assert_close(seen[0][..., 2:], canvas[0][..., 2:])
    torch.testing.assert_close(seen[1][..., 2:], x[0][..., 2:])
    torch.testing.assert_close(seen[1][..., :2], canvas[1][..., :2])
    torch.testing.assert_close(seen[2], x[1])
    # each half of image 0 comes from the region that owns it
    expected = torch.stack(
        [torch.cat([2 * x[0][..., :2] + 1, 2 * x[0][..., 2:] - 2], -1), 2 * x[1] + 3]
    )
    torch.testing.assert_close(out, expected)


def test_weights_average_where_regions_share_pixels():
    x, t = torch.randn(1, 3, 4, 4), torch.tensor([50])
    regions = Regions(
        cond=torch.tensor([1.0, 3.0]),
        owner=torch.tensor([0, 0]),
        weight=torch.full((2, 1, 4, 4), 0.5),
        hide=torch.zeros(2, 1, 4, 4),
        noise=torch.zeros(2, 3, 4, 4),
    )
    out = regional_denoiser(recording_model([]), ALPHA_BAR)(x, t, regions)
    torch.testing.assert_close(out, 2 * x + 2.0)


def test_an_owner_outside_the_batch_is_rejected():
    regions = whole_image_regions(2, torch.zeros(2))
    with pytest.raises(ValueError, match="owner"):
        regional_denoiser(recording_model([]), ALPHA_BAR)(
            torch.zeros(1, 3, 4, 4), torch.tensor([5]), regions
        )


def test_each_region_may_hide_behind_its_own_empty_canvas():
    """A per-region background (M,) puts each region's own clean value under its hidden
    pixels; a constant one is the float; take_rows keeps each region's value."""
    x, t = torch.randn(2, 3, 4, 4), torch.tensor([400, 400])
    hide = torch.ones(2, 1, 4, 4)
    noise = torch.randn(2, 3, 4, 4)
    base = dict(
        cond=torch.tensor([0.0, 0.0]),
        owner=torch.arange(2),
        weight=torch.ones(2, 1, 4, 4),
        hide=hide,
        noise=noise,
    )
    calls: list = []
    denoise = regional_denoiser(recording_model(calls), ALPHA_BAR)
    denoise(x, t, Regions(**base, background=torch.tensor([-1.0, 1.0])))
    a = ALPHA_BAR[400]
    expected = a.sqrt() * torch.tensor([-1.0, 1.0]).view(2, 1, 1, 1) + (1 - a).sqrt() * noise
    torch.testing.assert_close(calls[-1][0], expected)
    denoise(x, t, Regions(**base, background=torch.tensor([1.0, 1.0])))
    tensor_seen = calls[-1][0]
    denoise(x, t, Regions(**base, background=1.0))
    torch.testing.assert_close(calls[-1][0], tensor_seen)
    kept = Regions(**base, background=torch.tensor([-1.0, 1.0])).take_rows(torch.tensor([1]))
    assert kept.background.tolist() == [1.0]
