"""Step control: rows dropped between steps stop there; the rest come out unchanged."""

from __future__ import annotations

import itertools
import threading

import pytest
import torch

from models.adain import StyleTransfer
from models.adain.presets import PRESETS
from models.control import converted_images, image_hook, pause_hook, pause_point, pausing
from models.diffusion import SAMPLERS, Regions, get_schedule, regional_denoiser
from models.dit.pipeline import TextToImage

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPTS = ["a red circle", "two blue squares left of a green triangle", "a white square"]


class DropAt:
    """Drops ``drop`` (original row numbers) before step ``at``; records every call and
    the rows each step ran on."""

    def __init__(self, at: int, drop: set[int], batch: int):
        self.at, self.drop = at, drop
        self.live = list(range(batch))
        self.calls: list[tuple[int, int, list[int]]] = []

    def __call__(self, done: int, total: int):
        if done == self.at:
            keep = [i for i, row in enumerate(self.live) if row not in self.drop]
            self.live = [self.live[i] for i in keep]
            self.calls.append((done, total, list(self.live)))
            return keep
        self.calls.append((done, total, list(self.live)))
        return None


@pytest.fixture(scope="module")
def pipe(tiny_dit_checkpoint) -> TextToImage:
    return TextToImage.from_checkpoint(tiny_dit_checkpoint, default_steps=5)


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_dropped_images_stop_and_their_batch_mates_are_unchanged(pipe, sampler):
    seeds = [3, 4, 5]
    full = pipe.generate(PROMPTS, seeds=seeds, sampler=sampler)
    calls = []
    model = pipe.denoiser

    def counting(x, t, cond):
        calls.append(x.shape[0])
        return model(x, t, cond)

    pipe.denoiser = counting
    try:
        control = DropAt(at=2, drop={1}, batch=3)
        kept = pipe.generate(PROMPTS, seeds=seeds, sampler=sampler, control=control)
    finally:
        pipe.denoiser = model
    assert control.live == [0, 2]
    assert kept.shape[0] == 2
    torch.testing.assert_close(kept, full[[0, 2]], rtol=1e-5, atol=1e-5)
    # progress: asked before each of the 5 steps and once after the last
    assert [(done, total) for done, total, _ in control.calls] == [(i, 5) for i in range(6)]
    # the dropped image (planned into 2 regions) stops at step 2: before it, each step's
    # one call (both guidance branches batched) sees all regions; after it, only the
    # kept images' regions
    assert len(calls) == 5
    assert len(set(calls[:2])) == 1 and max(calls[2:]) < calls[0]


def test_dropping_every_image_stops_sampling(pipe):
    calls = []
    model = pipe.denoiser
    pipe.denoiser = lambda x, t, cond: calls.append(x.shape[0]) or model(x, t, cond)
    try:
        out = pipe.generate(PROMPTS[:2], seeds=[1, 2], control=DropAt(1, {0, 1}, 2))
    finally:
        pipe.denoiser = model
    assert out.shape[0] == 0
    assert len(calls) == 1  # step 0 only: conditional and unconditional in one call


def test_regions_take_rows_renumbers_owners():
    regions = Regions(
        cond=torch.arange(5.0),
        owner=torch.tensor([0, 1, 1, 2, 2]),
        weight=torch.rand(5, 1, 2, 2),
        hide=torch.rand(5, 1, 2, 2),
        noise=torch.rand(5, 3, 2, 2),
    )
    taken = regions.take_rows(torch.tensor([0, 2]))
    assert taken.owner.tolist() == [0, 1, 1]
    assert taken.cond.tolist() == [0.0, 3.0, 4.0]
    torch.testing.assert_close(taken.noise, regions.noise[[0, 3, 4]])
    alpha_bar = get_schedule("cosine", 10)
    eps = regional_denoiser(lambda x, t, c: x * c.view(-1, 1, 1, 1), alpha_bar)
    x = torch.rand(3, 3, 2, 2)
    t = torch.full((3,), 4)
    torch.testing.assert_close(
        eps(x[[0, 2]], t[:2], taken), eps(x, t, regions)[[0, 2]], rtol=1e-6, atol=1e-6
    )


@pytest.fixture
def style_model(tiny_networks):
    encoder, decoders = tiny_networks
    return StyleTransfer(encoder, decoders, levels=("relu3_1", "relu2_1", "relu1_1"))


@pytest.mark.parametrize("per_image_style", [False, True])
def test_stylize_drops_images_between_passes(style_model, per_image_style):
    generator = torch.Generator().manual_seed(0)
    content = torch.rand(3, 3, 24, 32, generator=generator)
    style = torch.rand(3 if per_image_style else 1, 3, 24, 24, generator=generator)
    full = style_model.stylize(content, [style], alpha=0.7)
    control = DropAt(at=1, drop={0}, batch=3)
    kept = style_model.stylize(content, [style], alpha=0.7, control=control)
    assert [(done, total) for done, total, _ in control.calls] == [(i, 3) for i in range(4)]
    torch.testing.assert_close(kept, full[[1, 2]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("at", [1, 2])
@pytest.mark.parametrize("per_image_style", [False, True])
def test_realtime_stylize_drops_images_in_both_of_its_stages(style_model, at, per_image_style):
    """The realtime preset runs its passes over the stages of its pyramid (1/8 to full
    size): an image dropped before any of them stops there, and the others come out as
    without the control."""
    generator = torch.Generator().manual_seed(1)
    content = torch.rand(3, 3, 200, 256, generator=generator)
    style = torch.rand(3 if per_image_style else 1, 3, 64, 64, generator=generator)
    full = style_model.stylize(content, [style], alpha=0.7, preset="realtime")
    control = DropAt(at=at, drop={1}, batch=3)
    kept = style_model.stylize(content, [style], alpha=0.7, preset="realtime", control=control)
    passes = PRESETS["realtime"].passes
    assert [(done, total) for done, total, _ in control.calls] == [
        (i, passes) for i in range(passes + 1)
    ]
    assert control.calls[-1][2] == [0, 2]
    torch.testing.assert_close(kept, full[[0, 2]], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------- the show hook
class Watching(DropAt):
    """A :class:`DropAt` with a ``show`` hook: copies of the pictures it is shown."""

    def __init__(self, at: int, drop: set[int], batch: int):
        super().__init__(at, drop, batch)
        self.shown: list[tuple[int, int, torch.Tensor]] = []

    def show(self, done: int, total: int, images) -> None:
        self.shown.append((done, total, images().clone()))


@pytest.mark.parametrize("preserve_color", [False, True])
def test_stylize_shows_each_stage_and_gives_the_same_images(style_model, preserve_color):
    """The hook sees each stage's picture of the rows still wanted, in [0, 1], at the
    stage's size; the output is the same as without it (and as with a hookless control)."""
    generator = torch.Generator().manual_seed(2)
    content = torch.rand(3, 3, 200, 256, generator=generator)
    style = torch.rand(1, 3, 64, 64, generator=generator)
    options = {"alpha": 0.7, "preset": "quality", "preserve_color": preserve_color}
    full = style_model.stylize(content, [style], **options)
    control = Watching(at=2, drop={1}, batch=3)
    kept = style_model.stylize(content, [style], **options, control=control)
    torch.testing.assert_close(kept, full[[0, 2]], rtol=1e-5, atol=1e-5)
    stages = PRESETS["quality"].stages
    assert [(done, total) for done, total, _ in control.shown] == [(i + 1, 4) for i in range(4)]
    for (done, _, picture), stage in zip(control.shown, stages, strict=True):
        rows = 3 if done <= 2 else 2  # the second image left before pass 2
        assert picture.shape[:2] == (rows, 3)
        assert abs(picture.shape[-1] - 256 * stage.factor) <= 1
        assert picture.min() >= 0.0 and picture.max() <= 1.0
    torch.testing.assert_close(control.shown[-1][2], kept, rtol=1e-5, atol=1e-5)


def test_a_control_without_a_hook_is_shown_nothing(style_model):
    control = DropAt(at=-1, drop=set(), batch=1)
    assert image_hook(control) is None and image_hook(None) is None
    control.show = None  # a hook switched off
    assert image_hook(control) is None
    assert converted_images(control, lambda x: x) is control


def test_pause_points_call_the_pause_of_their_own_thread_and_block_only():
    """``pause_point`` calls the ``pause`` of the innermost ``pausing`` block of the
    calling thread; the outer one comes back after it; other threads and code outside
    any block are not paused."""
    calls: list[str] = []
    pause_point()  # outside any block: nothing
    with pausing(lambda: calls.append("outer")):
        pause_point()
        with pausing(lambda: calls.append("inner")):
            pause_point()
            other = threading.Thread(target=pause_point)
            other.start()
            other.join()
        pause_point()
        with pausing(None):
            pause_point()
    pause_point()
    assert calls == ["outer", "inner", "outer"]


def test_stylize_waits_at_pause_points_between_layers_and_gives_the_same_images(style_model):
    """Each pass of a pyramid stops between the layers of its encoder and decoder (a
    forward that yields there holds the device one layer at a time), and pausing changes
    no pixel."""
    generator = torch.Generator().manual_seed(3)
    content = torch.rand(2, 3, 96, 128, generator=generator)
    style = torch.rand(1, 3, 64, 64, generator=generator)
    passes = []

    def count(done: int, total: int) -> None:
        passes.append(len(pauses))

    pauses: list[int] = []
    with pausing(lambda: pauses.append(1)):
        paused = style_model.stylize(content, [style], preset="quality", control=count)
    torch.testing.assert_close(paused, style_model.stylize(content, [style], preset="quality"))
    between = [later - earlier for earlier, later in itertools.pairwise(passes)]
    assert len(between) == PRESETS["quality"].passes and min(between) > 2


def test_a_control_without_a_pause_hook_has_none():
    control = DropAt(at=-1, drop=set(), batch=1)
    assert pause_hook(control) is None and pause_hook(None) is None
    control.pause = lambda: None
    assert pause_hook(control) is control.pause


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_samplers_show_the_estimate_after_each_step_but_the_last(pipe, sampler):
    seeds = [3, 4]
    full = pipe.generate(PROMPTS[:2], seeds=seeds, sampler=sampler)
    control = Watching(at=-1, drop=set(), batch=2)
    shown = pipe.generate(PROMPTS[:2], seeds=seeds, sampler=sampler, control=control)
    torch.testing.assert_close(shown, full, rtol=1e-5, atol=1e-5)
    assert [(done, total) for done, total, _ in control.shown] == [(i, 5) for i in range(1, 5)]
    for _, _, picture in control.shown:
        assert picture.shape == (2, 3, 32, 32)
        assert picture.min() >= 0.0 and picture.max() <= 1.0  # a picture, not [-1, 1]
