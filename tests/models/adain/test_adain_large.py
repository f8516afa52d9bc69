"""Print-size style transfer (models.adain.large): the plan, the resampling of regions,
tiles against the whole map, and the pipeline's entry for large photos."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import models.disk_picture as disk_picture_module
from models.adain import large
from models.adain.large import (
    MIN_TILE_SIDE,
    HalfPhoto,
    PrintStylization,
    bicubic_taps,
    bilinear_taps,
    group_tiles,
    halve,
    halved,
    pixels_at,
    reflect_index,
    resample_region,
    spans,
    tiles_of,
)
from models.adain.options import StyleOptions
from models.adain.pipeline import StyleTransfer
from models.adain.presets import MIN_STYLE_SIDE, octave_sizes, style_at
from models.adain.whitening import CovarianceStats, wct_affine
from models.control import pausing
from models.disk_picture import DiskPicture

pytestmark = pytest.mark.usefixtures("single_thread")


def _photo(height, width, seed=0):
    """A smooth 8-bit photo with some detail: a blurred noise field."""
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, max(2, height // 8), max(2, width // 8), generator=gen)
    smooth = F.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
    detail = 0.1 * torch.rand(1, 3, height, width, generator=gen)
    return ((smooth + detail).clamp(0, 1)[0] * 255).round().to(torch.uint8)


def _style(seed=1, size=(40, 52)):
    return torch.rand(1, 3, *size, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def model(tiny_networks):
    encoder, decoders = tiny_networks
    return StyleTransfer(encoder, decoders)


# ----------------------------------------------------------------------- the plan
def test_octaves_halve_down_to_the_base():
    assert octave_sizes((768, 1024)) == []
    assert octave_sizes((6144, 8192)) == [(1536, 2048), (3072, 4096), (6144, 8192)]
    assert octave_sizes((3000, 4001)) == [(1500, 2001), (3000, 4001)]
    assert octave_sizes((700, 1500)) == [(700, 1500)]


@pytest.mark.parametrize(
    ("size", "base"), [((6144, 8192), (768, 1024)), ((700, 1500), (478, 1024))]
)
def test_the_base_is_the_photo_scaled_to_the_base_side(size, base):
    photo = torch.zeros(3, *size, dtype=torch.uint8)
    assert PrintStylization(photo, [_style()]).base_photo.shape == (1, 3, *base)


@pytest.mark.parametrize("length", [1, 3, 5, 511, 512, 513, 514, 515, 1030])
@pytest.mark.parametrize("side", [3, 4, 512])
def test_spans_cover_the_length_once_with_no_sliver(length, side):
    pieces = spans(length, side)
    assert pieces[0][0] == 0 and pieces[-1][1] == length
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
    if length >= MIN_TILE_SIDE:
        assert all(stop - start >= MIN_TILE_SIDE for start, stop in pieces)


def test_tiles_cover_the_picture_and_groups_keep_one_shape():
    tiles = tiles_of((70, 101), 32)
    covered = torch.zeros(70, 101, dtype=torch.int32)
    for tile in tiles:
        covered[tile.top : tile.bottom, tile.left : tile.right] += 1
    assert bool((covered == 1).all())
    groups = group_tiles(tiles, 4)
    assert sorted(tuple(vars(t).values()) for group in groups for t in group) == sorted(
        tuple(vars(t).values()) for t in tiles
    )
    assert all(len({tile.shape for tile in group}) == 1 and len(group) <= 4 for group in groups)
    assert group_tiles(tiles, 4) == groups  # the plan alone decides


# ----------------------------------------------------------- resampling regions
@pytest.mark.parametrize(("taps", "mode"), [(bicubic_taps, "bicubic"), (bilinear_taps, "bilinear")])
@pytest.mark.parametrize(("source", "target"), [((37, 53), (90, 111)), ((20, 20), (41, 77))])
def test_regions_are_torchs_resize_read_at_those_positions(taps, mode, source, target):
    gen = torch.Generator().manual_seed(3)
    image = torch.rand(3, *source, generator=gen)
    whole = F.interpolate(image[None], size=target, mode=mode, align_corners=False)[0]
    rows = torch.randint(0, target[0], (17,), generator=gen)
    columns = torch.arange(5, target[1] - 3)
    region = resample_region(image, target, rows, columns, taps)
    torch.testing.assert_close(region, whole[:, rows][:, :, columns], atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(3, 64, 48), (3, 65, 47), (1, 3, 3)])
def test_halving_in_strips_is_the_whole_2x2_mean(shape):
    photo = (torch.rand(*shape, generator=torch.Generator().manual_seed(4)) * 255).to(torch.uint8)
    whole = F.avg_pool2d(photo[None].double() / 255, 2, ceil_mode=True)[0]
    torch.testing.assert_close(halve(photo, rows_per_strip=4).double(), whole, atol=1e-6, rtol=0)
    # bit for bit the float32 pass over the whole photo, from 8-bit or float pixels
    at_once = F.avg_pool2d(photo[None].float(), 2, ceil_mode=True)[0].div_(255.0)
    assert torch.equal(halve(photo, rows_per_strip=4), at_once)
    floats = photo.float() / 255
    assert torch.equal(
        halve(floats, rows_per_strip=2), F.avg_pool2d(floats[None], 2, ceil_mode=True)[0]
    )
    with pytest.raises(ValueError, match="even"):
        halve(photo, rows_per_strip=3)


@pytest.mark.parametrize("shape", [(3, 64, 48), (3, 65, 47), (1, 33, 9)])
def test_a_half_photo_reads_what_halving_it_whole_gives_bit_for_bit(shape):
    photo = (torch.rand(*shape, generator=torch.Generator().manual_seed(5)) * 255).to(torch.uint8)
    whole, half = halve(photo), HalfPhoto(photo)
    assert half.shape == whole.shape
    height, width = whole.shape[-2:]
    rows = reflect_index(torch.arange(-2, height + 2), height)  # every row, a halo reflected
    columns = reflect_index(torch.arange(width - 7, width + 2), width)
    assert torch.equal(half.at(rows, columns), whole[:, rows][:, :, columns])
    assert torch.equal(half.rows(3, height), whole[:, 3:])
    assert torch.equal(pixels_at(half, rows, columns), pixels_at(whole, rows, columns))


@pytest.mark.parametrize(("times", "strip"), [(1, 5), (2, 3), (3, 2)])
def test_halving_several_times_in_strips_is_halving_the_whole_each_time(times, strip):
    photo = _photo(83, 61)
    expected = photo
    for _ in range(times):
        expected = halve(expected, rows_per_strip=1000)
    assert torch.equal(halved(photo, times, out_rows_per_strip=strip), expected)


def _held_whole(photo, times, *, coarsest):
    """The octaves' photos as they were held: each halved whole from the one above."""
    for _ in range(times):
        photo = halve(photo, rows_per_strip=10**6)
    return photo


@pytest.mark.parametrize("options", [{}, {"preserve_color": True}, {"alpha": 0.6}])
def test_octave_photos_read_where_needed_paint_the_prints_bit_for_bit(model, options, monkeypatch):
    """Three octaves (the middle one a HalfPhoto): the print is bit for bit the one
    painted from octave photos held whole, as they were before."""
    content, chosen = _photo(333, 301), StyleOptions(**options)
    assert len(octave_sizes((333, 301), 64)) == 3

    def paint():
        return PrintStylization(content, [_style()], chosen, base_side=64, tile_side=50).run(model)

    read_where_needed = paint()
    monkeypatch.setattr(large, "octave_photo", _held_whole)
    assert torch.equal(read_where_needed, paint())


@pytest.mark.parametrize(
    ("size", "options"),
    [((333, 301), {}), ((333, 301), {"preserve_color": True}), ((333, 301), {"alpha": 0.6}),
     ((100, 90), {})],
)  # fmt: skip
def test_a_photo_kept_on_disk_paints_the_print_bit_for_bit(model, size, options, monkeypatch):
    """The photo as a DiskPicture (a served print's): the same pixels as from the tensor,
    with three octaves (the middle one a HalfPhoto of the file; luma on disk too) and
    with one (the base read from the file whole), and the photo never read whole when
    there is more than one octave (reads of at most a few rows' bytes, as an 8 MB box is
    at 8192 px)."""
    monkeypatch.setattr(disk_picture_module, "READ_BOX_BYTES", 3 * size[1] * 16)
    content, chosen = _photo(*size), StyleOptions(**options)
    on_disk = DiskPicture(tuple(content.shape), torch.uint8)
    on_disk.write(0, 0, content)
    expected = PrintStylization(content, [_style()], chosen, base_side=64, tile_side=50).run(model)
    reads = []
    read = DiskPicture.read

    def counted(picture, top=0, bottom=None, left=0, right=None):
        region = read(picture, top, bottom, left, right)
        reads.append(region.shape[-2:] == picture.shape[-2:] and picture is on_disk)
        return region

    monkeypatch.setattr(DiskPicture, "read", counted)
    session = PrintStylization(on_disk, [_style()], chosen, base_side=64, tile_side=50)
    assert torch.equal(session.run(model), expected)
    one_octave = len(octave_sizes(size, 64)) == 1
    assert any(reads) == one_octave


# ------------------------------------------------------------ tiles and the map
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"alpha": 0.6},
        {"preserve_color": True},
        {"preset": "realtime"},
        {"style_weights": [3.0, 1.0]},
        {"style_scale": 2.0},
    ],
)
def test_tiled_octaves_equal_one_tile_for_the_whole_map(model, options):
    """Small tiles (every kind of edge, groups of tiles) give the one-tile result to the
    8-bit rounding: the tiles share the octave's statistics and read their halo."""
    content = _photo(150, 230)
    styles = [_style(1), _style(2)] if "style_weights" in options else [_style(1)]
    chosen = StyleOptions(**options)
    whole = PrintStylization(content, styles, chosen, base_side=64, tile_side=1000).run(model)
    tiled = PrintStylization(
        content, styles, chosen, base_side=64, tile_side=17, tiles_per_step=3
    ).run(model)
    assert whole.shape == tiled.shape == (3, 150, 230) and whole.dtype == torch.uint8
    assert int((whole.int() - tiled.int()).abs().max()) <= 1


def test_an_octave_is_the_pipelines_whole_map_relu1_1_pass(model):
    """One octave's output equals decode(WCT(encode(start))) on the whole start image, with
    the style resized as the pyramid resizes it (maps small enough to be read whole)."""
    content, style = _photo(120, 180), _style(5, (30, 30))
    session = PrintStylization(content, [style], base_side=100, tile_side=29)
    steps = [step for phase in session.phases() for step in phase]
    session.accept(steps[0], session.run_step(model, steps[0]))
    octave = session._octaves[0]
    rows, columns = torch.arange(120), torch.arange(180)
    start = session._start(octave, rows, columns)[None]
    for step in steps[1:]:
        session.accept(step, session.run_step(model, step))
    encoder, decoder = model.encoder, model.decoders["relu1_1"]
    features = encoder.encode(start, "relu1_1")
    prepared = style_at(style, 180, 1.0, min_side=MIN_STYLE_SIDE)
    stats = CovarianceStats.of(encoder.encode(prepared, "relu1_1"))
    matrix, shift = wct_affine(features, [stats], weights=(1.0,))
    expected = decoder.forward_linear(features, matrix, shift).clamp(0, 1)[0]
    got = session.result().read().float() / 255
    assert float((got - expected).abs().max()) <= 1.5 / 255


def test_no_seam_at_tile_boundaries(model):
    """Across a tile boundary neighbouring columns (rows) differ as much as inside tiles."""
    across = torch.linspace(0, 1, 300)[None, :].expand(200, -1)
    down = torch.linspace(0, 1, 200)[:, None].expand(-1, 300)
    content = (torch.stack([across, down, (across + down) / 2]) * 255).round().to(torch.uint8)
    out = PrintStylization(content, [_style(6)], base_side=64, tile_side=50).run(model).float()
    columns = (out[:, :, 1:] - out[:, :, :-1]).abs().mean(dim=(0, 1))  # between c and c + 1
    rows = (out[:, 1:] - out[:, :-1]).abs().mean(dim=(0, 2))
    for diffs, length in ((columns, 300), (rows, 200)):
        boundary = torch.tensor([b - 1 for b in range(50, length, 50)])
        inside = torch.ones(length - 1, dtype=torch.bool)
        inside[boundary] = False
        assert float(diffs[boundary].mean()) <= 1.1 * float(diffs[inside].mean())


def test_reruns_are_identical(model):
    content = _photo(90, 140)
    first = PrintStylization(content, [_style(7)], base_side=48, tile_side=23).run(model)
    second = PrintStylization(content, [_style(7)], base_side=48, tile_side=23).run(model)
    assert torch.equal(first, second)


def test_a_print_paused_between_layers_paints_the_same(model):
    """A print whose steps run inside ``pausing`` (as a service's bulk forwards do) stops
    at pause points inside every step (the base's passes between their layers; a tile
    step and an octave's statistics between their pieces) and paints the same pixels."""
    pauses: dict[str, int] = {}
    session = PrintStylization(_photo(90, 140), [_style(7)], base_side=48, tile_side=23)
    for step in [step for phase in session.phases() for step in phase]:
        with pausing(lambda kind=step.kind: pauses.update({kind: pauses.get(kind, 0) + 1})):
            result = session.run_step(model, step)
        session.accept(step, result)
    alone = PrintStylization(_photo(90, 140), [_style(7)], base_side=48, tile_side=23)
    assert torch.equal(session.result().read(), alone.run(model))
    steps = {kind: sum(step.kind == kind for phase in session.phases() for step in phase)
             for kind in pauses}  # fmt: skip
    # more pause points than passes in the base; at least two in every other step
    assert pauses["base"] > model.resolve_passes(None, session.options.preset).passes
    assert pauses["statistics"] >= steps["statistics"] and pauses["tiles"] >= 2 * steps["tiles"]


def test_the_steps_run_in_phases_and_the_tiles_count_their_pixels():
    session = PrintStylization(_photo(100, 160), [_style()], base_side=64, tile_side=40)
    phases = session.phases()
    kinds = ["base", "statistics", "tiles", "statistics", "tiles"]  # octaves 50 x 80, 100 x 160
    assert [phase[0].kind for phase in phases] == kinds
    assert sum(step.pixels for step in phases[-1]) == 100 * 160
    assert session.steps == sum(len(phase) for phase in phases)


def test_a_photo_that_fits_the_base_is_refused():
    with pytest.raises(ValueError, match="fits the base"):
        PrintStylization(_photo(60, 64), [_style()], base_side=64)


# ------------------------------------------------------------ the pipeline's entry
def test_stylize_paints_large_photos_by_octaves(model):
    model.base_side = 64
    content = _photo(80, 120)
    out = model.stylize(content[None].float() / 255, [_style()])
    session = PrintStylization(content, [_style()], base_side=64)
    expected = session.run(model).float()[None] / 255
    assert out.shape == (1, 3, 80, 120)
    torch.testing.assert_close(out, expected, atol=1.5 / 255, rtol=0)
    with pytest.raises(ValueError, match="masks"):
        model.stylize(content[None].float() / 255, [_style()], masks=[torch.ones(1, 1, 80, 120)])


def test_stylize_of_large_photos_stops_rows_the_control_drops(model):
    model.base_side = 64
    batch = torch.stack([_photo(80, 120, seed) for seed in (1, 2)]).float() / 255
    asked = []

    def control(done, total):
        asked.append((done, total))
        return [1] if done == 2 else None  # drop the first photo at its third step

    out = model.stylize(batch, [_style()], control=control)
    alone = model.stylize(batch[1:], [_style()])
    assert out.shape == (1, 3, 80, 120)
    torch.testing.assert_close(out, alone)
    assert asked[-1][0] == asked[-1][1]  # asked once more at the end
