"""Print-size style transfer: a photo of any size painted at its own resolution, with
memory set by the tile, not by the picture.

A photo whose longer side is above ``BASE_SIDE`` (1024 px) is painted in two parts:

1. **The base**: the preset's whole pyramid (:mod:`models.adain.presets`) on the photo
   shrunk to ``BASE_SIDE`` on its longer side. The strokes, shapes and colour regions
   are laid down exactly as in a 1024 px result, so they keep their size relative to the
   picture whatever its resolution (``style_scale`` keeps its meaning), and every
   image-wide statistic of the coarse stages is computed once, on the whole picture.
2. **The octaves**: sizes ``S_0 = (H, W)``, ``S_{k+1} = ceil(S_k / 2)`` down to the last
   one whose longer side is above ``BASE_SIDE``, run coarse to fine. Octave ``k`` starts
   from the photo at its size plus the style residual of the octave below, upsampled,
   exactly as a finer stage of the pyramid does (:mod:`models.adain.presets`):

   .. math::

       y_k = T\\big(\\mathrm{clip}(x_k + \\mathrm{up}(y_{k-1} - x_{k-1}))\\big)

   with ``T`` the presets' own finest pass, relu1_1 WCT, towards the style resized to the
   octave as every stage of the pyramid resizes it (``style_scale`` times the octave's
   side, :func:`~models.adain.presets.style_at`), so its grain keeps the size it has in
   the base; ``x_k`` the photo at octave ``k``
   (the photo itself at full size, each coarser one the finer one halved by a 2 x 2
   mean; at the base, :func:`~models.adain.presets.resize` of the coarsest octave), and
   ``up`` the pyramid's bicubic resize (Keys, ``a = -0.75``), evaluated on any rows and
   columns (:func:`resample_region`). The photo's edges, text and windows come back at
   native resolution from ``x_k``; the style's grain and colours from ``T``.

Why the tiles agree exactly. ``T``'s content and style covariances are estimated once per
octave, on the grid of positions that a whole-map pass reads (:func:`grid_neighbourhoods`,
:func:`~models.adain.whitening.grid_stride`; an enlarged style is read there too, never
held whole), so every tile is transformed by the same
affine map ``f -> M f + t``. The relu1_1 round trip is a 3 x 3 convolution, that map and
another 3 x 3 convolution, so an output pixel depends on the 5 x 5 window of input
around it. Each tile is computed from its rows and columns plus a ``HALO`` of two pixels
(reflected where it leaves the picture, as the whole-map pass pads it): the tiles are the
whole-map pass cut in pieces, to float rounding, and there is no seam to blend.

Cost and memory: the base costs a fixed ~20 GMAC; each octave one relu1_1 pass (~3.5
kMAC a pixel), ``4/3`` of the full-size pixels in all, so the cost per output pixel
falls towards a constant as the photo grows. Held in memory at once, at most: the base's
residual (1024 px), the coarsest octave's photo (float32, at most 2048 px; on disk where
the photo is) and the tiles of the steps in flight. The photo may itself be on disk (a
served print's is: 8-bit, read a strip or a tile's box at a time,
:func:`~models.disk_picture.gather`; its luma and its coarsest octave too). Each
octave's output (float32 below full size, then its residual in place) and the result
(8-bit) are kept on disk (:class:`~models.disk_picture.DiskPicture`), written a tile at
a time and read a box at a time (:func:`resample_region`, in runs of rows whose box is
at most ``READ_BOX_BYTES``, 8 MB: an octave's statistics read rows spread over the whole
picture); at 8192 x 8192 px they are 201 MB each. Nothing else of the picture's size is
held whole: the octave below an 8-bit photo is read from it where it is needed
(:class:`HalfPhoto`; its float32 pixels would be another 201 MB), coarser octaves are
halved in strips (:func:`halved`), a residual is made in strips, and regions are
gathered without a copy of the columns they lie in. Measured
(``benchmarks/print_memory.py --side 8192``, one print on a served CPU replica,
docs/service.md): the server's peak RSS growth while the finest octave is painted is 149
MB with the photo on disk too and tiles of 256 px (244 MB with tiles of 512 and an
octave's statistics read in boxes of 128 rows), 422 MB with the photo in memory, 717-784
MB with every picture in memory.

A stylisation is a list of phases (:meth:`PrintStylization.phases`), each a list of
:class:`Step` that may run in any order or at once; a phase needs the one before it
accepted. The service runs every step through its batcher
(``service.workers.style_transfer``); :meth:`PrintStylization.run` runs them in turn.
Each step's work is fixed by the plan (never by how a batcher grouped it), so a rerun
gives the same image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, Unpack

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from models.adain.color import luminance, with_chroma_of
from models.adain.options import StyleKeywords, StyleOptions
from models.adain.presets import (
    BASE_SIDE,
    MIN_STYLE_SIDE,
    octave_sizes,
    resize,
    stage_size,
    style_at,
)
from models.adain.stats import convex_weights
from models.adain.whitening import (
    CovarianceStats,
    feature_covariance,
    grid_stride,
    symmetric_power,
    wct_affine,
)
from models.control import pause_point
from models.decoder import Decoder
from models.devices import return_freed_memory, to_host
from models.disk_picture import (
    DiskPicture,
    Picture,
    gather,
    picture_region,
    picture_rows,
    read_chunks,
)
from models.images import fit_longer_side, to_uint8
from models.vgg import VGGEncoder


class TilingModel(Protocol):
    """What print-size stylisation asks of the model
    (:class:`~models.adain.pipeline.StyleTransfer`): the base painted whole, and the
    relu1_1 round trip's pieces in the dtype it computes in."""

    @property
    def device(self) -> torch.device: ...

    @property
    def encoder(self) -> VGGEncoder: ...

    def ready(self) -> torch.dtype: ...  # the compute dtype, the networks cast to it

    def decoder(self, level: str) -> Decoder: ...

    def stylize(
        self, content: Tensor, styles: Sequence[Tensor], **keywords: Unpack[StyleKeywords]
    ) -> Tensor: ...


#: Side of a tile of an octave's pass (its output; the input adds ``HALO`` each side).
#: A tile's relu1_1 features are 17 MB of float32 at 256 px, 68 MB at 512, in the same
#: time on the CPU (``benchmarks/print_tiles.py``).
TILE_SIDE = 256
#: Input pixels a relu1_1 round trip reads beyond its output: two 3 x 3 convolutions.
HALO = 2
#: Smallest tile side: a two-pixel reflection needs three rows.
MIN_TILE_SIDE = 3
#: Keys' cubic convolution parameter, as torch's bicubic resize uses it.
CUBIC_A = -0.75
#: The level of an octave's pass.
OCTAVE_LEVEL = "relu1_1"
#: Rows of an octave's output turned into its residual at once (the photo's rows read
#: as float32 for them: a strip, never the octave's whole photo).
RESIDUAL_ROWS_PER_STRIP = 64


# ------------------------------------------------------------------------ the plan
def spans(length: int, tile_side: int) -> list[tuple[int, int]]:
    """``[start, stop)`` pieces of ``range(length)`` of ``tile_side`` each, the last one
    merged into its neighbour when it would be shorter than ``MIN_TILE_SIDE``."""
    bounds = list(range(0, length, tile_side)) + [length]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] < MIN_TILE_SIDE:
        del bounds[-2]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


@dataclass(frozen=True)
class Tile:
    """Rows ``top:bottom`` and columns ``left:right`` of an octave's output."""

    top: int
    bottom: int
    left: int
    right: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.bottom - self.top, self.right - self.left


def tiles_of(size: tuple[int, int], tile_side: int = TILE_SIDE) -> list[Tile]:
    """The tiles covering ``size``, row-major."""
    return [
        Tile(top, bottom, left, right)
        for top, bottom in spans(size[0], tile_side)
        for left, right in spans(size[1], tile_side)
    ]


def group_tiles(tiles: Sequence[Tile], per_step: int) -> list[tuple[Tile, ...]]:
    """Tiles in groups of up to ``per_step`` of one shape (one batched forward each), in
    plan order: the grouping depends on the plan only."""
    groups: list[tuple[Tile, ...]] = []
    by_shape: dict[tuple[int, int], list[Tile]] = {}
    for tile in tiles:
        bucket = by_shape.setdefault(tile.shape, [])
        bucket.append(tile)
        if len(bucket) == per_step:
            groups.append(tuple(bucket))
            bucket.clear()
    groups.extend(tuple(bucket) for bucket in by_shape.values() if bucket)
    return groups


# ------------------------------------------------------------- resampling regions
def reflect_index(index: Tensor, length: int) -> Tensor:
    """Positions outside ``[0, length)`` reflected into it (``-1 -> 1``, ``length -> length - 2``),
    as a reflection padding reads them."""
    index = index.abs()
    return torch.where(index > length - 1, 2 * (length - 1) - index, index)


def bicubic_taps(in_size: int, out_size: int, index: Tensor) -> tuple[Tensor, Tensor]:
    """Source positions and weights of output positions ``index`` of a bicubic resize from
    ``in_size`` to ``out_size`` (torch's ``interpolate(mode="bicubic", align_corners=False)``:
    source ``(i + 1/2) in/out - 1/2``, four taps of Keys' kernel, positions clamped).

    Shape:
        - index: ``(n,)`` long; output: ``(n, 4)`` long and ``(n, 4)`` float64.
    """
    source = (index.double() + 0.5) * (in_size / out_size) - 0.5
    first = source.floor()
    t = (source - first).unsqueeze(1)
    a = CUBIC_A
    distance = torch.cat([t + 1, t, 1 - t, 2 - t], dim=1)  # to taps -1, 0, 1, 2
    near = ((a + 2) * distance - (a + 3)) * distance * distance + 1  # |d| <= 1
    far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a  # 1 < |d| < 2
    weights = torch.where(distance <= 1, near, far)
    taps = first.long().unsqueeze(1) + torch.arange(-1, 3)
    return taps.clamp(0, in_size - 1), weights


def bilinear_taps(in_size: int, out_size: int, index: Tensor) -> tuple[Tensor, Tensor]:
    """As :func:`bicubic_taps` for torch's ``mode="bilinear"`` (``align_corners=False``,
    no antialiasing: an enlargement): source ``max(0, (i + 1/2) in/out - 1/2)``, two taps.

    Shape:
        - index: ``(n,)`` long; output: ``(n, 2)`` long and ``(n, 2)`` float64.
    """
    source = ((index.double() + 0.5) * (in_size / out_size) - 0.5).clamp_min(0.0)
    first = source.floor()
    t = (source - first).unsqueeze(1)
    taps = first.long().unsqueeze(1) + torch.arange(2)
    return taps.clamp(0, in_size - 1), torch.cat([1 - t, t], dim=1)


def resample_region(
    image: Picture,
    size: tuple[int, int],
    rows: Tensor,
    columns: Tensor,
    taps: Callable[[int, int, Tensor], tuple[Tensor, Tensor]] = bicubic_taps,
) -> Tensor:
    """Rows ``rows`` and columns ``columns`` of ``image`` enlarged to ``size`` (bicubic, or
    ``taps=bilinear_taps``), reading only the source pixels they need (a tile's, not the
    picture's): a run of output rows at a time, from the box of source rows and columns
    their taps lie in (:func:`~models.disk_picture.read_chunks`: read from a
    :class:`~models.disk_picture.DiskPicture`, at most ``READ_BOX_BYTES`` at once; a view
    of a tensor).

    Shape:
        - image: ``(C, h, w)`` float; rows, columns: ``(n,)``, ``(m,)`` long in ``size``;
          output: ``(C, n, m)`` float32.
    """
    channels = image.shape[0]
    row_taps, row_weights = taps(image.shape[-2], size[0], rows)
    column_taps, column_weights = taps(image.shape[-1], size[1], columns)
    low, high = int(column_taps.min()), int(column_taps.max()) + 1
    result = torch.zeros(channels, len(rows), len(columns))
    row_bytes = channels * (high - low) * image.element_size()
    first, last = row_taps.min(dim=1).values, row_taps.max(dim=1).values
    for these in read_chunks(first, last, row_bytes):
        chunk_taps, chunk_weights = row_taps[these], row_weights[these]
        top, bottom = int(chunk_taps.min()), int(chunk_taps.max()) + 1
        if isinstance(image, DiskPicture):
            box = image.read(top, bottom, low, high)
        else:
            box = image[:, top:bottom, low:high]
        out = torch.zeros(channels, len(chunk_taps), high - low)
        for tap in range(chunk_taps.shape[1]):
            # rows gathered out of the box (index_select on the picture would copy a band
            # of columns its whole height first: 200 MB on an octave's grid)
            source = box[:, chunk_taps[:, tap] - top].float()
            out += chunk_weights[:, tap].float()[:, None] * source
        for tap in range(column_taps.shape[1]):
            picked = out.index_select(2, column_taps[:, tap] - low)
            result[:, these] += column_weights[:, tap].float() * picked
    return result


def halve(photo: Tensor, rows_per_strip: int = 256) -> Tensor:
    """``photo`` ``(3, H, W)`` (uint8 in [0, 255] or float in [0, 1]) halved by a 2 x 2
    mean (the partial windows of an odd side averaging what they hold), as float32 in
    [0, 1], in strips of ``rows_per_strip`` (even) rows written into the one tensor it
    returns, so that no float copy of the whole photo is made."""
    if rows_per_strip % 2:
        raise ValueError(f"rows_per_strip must be even, got {rows_per_strip}")
    scale = 255.0 if photo.dtype == torch.uint8 else 1.0
    channels, height, width = photo.shape
    out = torch.empty((channels, -(-height // 2), -(-width // 2)), dtype=torch.float32)
    for top in range(0, height, rows_per_strip):
        strip = photo[None, :, top : top + rows_per_strip].float()
        out[:, top // 2 : (top + rows_per_strip) // 2] = F.avg_pool2d(strip, 2, ceil_mode=True)[0]
    return out.div_(scale)


def halved(photo: Picture, times: int, out_rows_per_strip: int = 64) -> Picture:
    """``photo`` halved ``times`` times by :func:`halve`, bit for bit, in strips of
    ``out_rows_per_strip`` output rows (each from its ``2^times`` as many input rows), so
    that no octave between the photo and the result is held whole; the result is kept
    where the photo is (a print's coarsest octave, 50 MB of float32 at 2048 px, stays on
    disk while the base and that octave are painted).

    Shape:
        - photo: ``(C, H, W)`` uint8 or float, in memory or on disk; output:
          ``(C, h, w)`` float32, each side halved (rounding up) ``times`` times, on disk
          when the photo is.
    """
    if times < 1:
        raise ValueError(f"times must be >= 1, got {times}")
    channels, height, width = photo.shape
    for _ in range(times):
        height, width = -(-height // 2), -(-width // 2)
    shape = (channels, height, width)
    out: Picture = (
        DiskPicture(shape, torch.float32)
        if isinstance(photo, DiskPicture)
        else torch.empty(shape, dtype=torch.float32)
    )
    span = out_rows_per_strip * 2**times  # strips start on multiples of 2^times rows
    for top in range(0, photo.shape[-2], span):
        strip = picture_rows(photo, top, top + span)
        for _ in range(times):
            strip = halve(strip)
        if isinstance(out, DiskPicture):
            out.write(top // 2**times, 0, strip)
        else:
            out[:, top // 2**times : top // 2**times + out_rows_per_strip] = strip
    return out


@dataclass(frozen=True)
class HalfPhoto:
    """:func:`halve` of an 8-bit photo, read where it is needed instead of held whole.

    A 2 x 2 mean of 8-bit values is exact in float32 (a sum of at most four integers
    below 256, divided by 1, 2 or 4), so any part read here is bit for bit that part of
    ``halve(photo)``, however it is cut. A print's second-finest octave is one of these:
    its float32 pixels would be as large as the 8-bit photo.

    Shape:
        - photo: ``(C, H, W)`` uint8, in memory or on disk; the half:
          ``(C, ceil(H / 2), ceil(W / 2))``.
    """

    photo: Picture

    @property
    def shape(self) -> tuple[int, int, int]:
        channels, height, width = self.photo.shape
        return channels, -(-height // 2), -(-width // 2)

    def rows(self, top: int, bottom: int) -> Tensor:
        """Rows ``top:bottom`` of the half, ``(C, n, w)`` float32 in [0, 1]."""
        return halve(picture_rows(self.photo, 2 * top, 2 * bottom))

    def at(self, rows: Tensor, columns: Tensor) -> Tensor:
        """The half at ``rows`` x ``columns``, ``(C, n, m)`` float32 in [0, 1]: each
        position's 2 x 2 window of the photo (a partial window at an odd side reads its
        one row or column twice: the same mean) averaged."""

        def window(index: Tensor, length: int) -> Tensor:
            pair = torch.stack([2 * index, (2 * index + 1).clamp_max(length - 1)], dim=1)
            return pair.flatten()

        height, width = self.photo.shape[-2:]
        rows2, columns2 = window(rows, height), window(columns, width)
        picked = gather(self.photo, rows2, columns2)
        return F.avg_pool2d(picked[None].float(), 2)[0].div_(255.0)


#: An octave's photo: held whole or kept on disk (uint8 or float32), or a
#: :class:`HalfPhoto`.
OctavePhoto = Picture | HalfPhoto


def octave_photo(photo: Picture, times: int, *, coarsest: bool) -> OctavePhoto:
    """The photo of the octave ``times`` halvings below the photo ``(C, H, W)``: a
    :class:`HalfPhoto` one below an 8-bit photo, unless the base reads it whole (the
    coarsest); else :func:`halved`."""
    if times == 1 and not coarsest and photo.dtype == torch.uint8:
        return HalfPhoto(photo)
    return halved(photo, times)


def photo_rows(photo: OctavePhoto, top: int, bottom: int) -> Tensor:
    """Rows ``top:bottom`` of an octave's photo as float32 in [0, 1], ``(C, n, w)``."""
    if isinstance(photo, HalfPhoto):
        return photo.rows(top, bottom)
    return _as_float(picture_rows(photo, top, bottom))


def pixels_at(photo: OctavePhoto, rows: Tensor, columns: Tensor) -> Tensor:
    """``photo[:, rows][:, :, columns]`` as RGB float32 in [0, 1] (``photo`` uint8 or
    float, in memory or on disk, or a :class:`HalfPhoto`; RGB or one luma channel).

    Shape:
        - photo: ``(3 or 1, H, W)``; rows, columns: ``(n,)``, ``(m,)``; output: ``(3, n, m)``.
    """
    if isinstance(photo, HalfPhoto):
        return photo.at(rows, columns).expand(3, -1, -1)
    picked = gather(photo, rows, columns).float()  # from the tile's box, nothing copied first
    if photo.dtype == torch.uint8:
        picked.div_(255.0)
    return picked.expand(3, -1, -1)


# ------------------------------------------------------------------------- steps
StepKind = Literal["base", "statistics", "tiles"]


@dataclass(frozen=True)
class Step:
    """One piece of a print-size stylisation: the base, an octave's statistics, or a
    group of an octave's tiles (``octave`` counts from the coarsest, 0)."""

    kind: StepKind
    octave: int = -1
    tiles: tuple[Tile, ...] = ()

    @property
    def pixels(self) -> int:
        """Output pixels of the step (its cost for a batcher's budget)."""
        return sum(tile.shape[0] * tile.shape[1] for tile in self.tiles)


@dataclass
class _Octave:
    size: tuple[int, int]
    # (C, H, W), C = 3 or 1 (luma): uint8 at full size, a HalfPhoto of it at the octave
    # below (when that is not the coarsest), float32 below; on disk where the photo is
    photo: OctavePhoto | None
    matrix: Tensor | None = None  # (64, 64), float64
    shift: Tensor | None = None  # (64,)
    # (3, H, W) on disk: float32 below full size, uint8 at it
    output: DiskPicture | None = None
    # (3, h, w) float32: y - x of the octave below (the base's in memory: 1024 px)
    residual_below: Picture | None = None
    tiles_left: int = 0


class PrintStylization:
    """One photo's print-size stylisation (see the module's text).

    Args:
        content: the photo, ``(3, H, W)`` uint8 (or float in [0, 1]), larger than the base:
            in memory, or on disk (read where it is needed, never whole).
        styles: style images, each ``(1, 3, h, w)`` float in [0, 1].
        options: how it is painted (:class:`~models.adain.options.StyleOptions`, its
            ``style_scale`` already checked).
        base_side: longer side of the base.
        tile_side: side of an octave's tiles.
        tiles_per_step: tiles of one shape batched into one step (a GPU runs several at
            once; the CPU gains nothing).
    """

    def __init__(
        self,
        content: Picture,
        styles: Sequence[Tensor],
        options: StyleOptions = StyleOptions(),
        *,
        base_side: int = BASE_SIDE,
        tile_side: int = TILE_SIDE,
        tiles_per_step: int = 1,
    ) -> None:
        if len(content.shape) != 3 or content.shape[0] != 3:
            raise ValueError(f"content must be (3, H, W), got {tuple(content.shape)}")
        if tile_side < MIN_TILE_SIDE or tiles_per_step < 1:
            raise ValueError(f"tile_side must be >= {MIN_TILE_SIDE} and tiles_per_step >= 1")
        size = (content.shape[-2], content.shape[-1])
        sizes = octave_sizes(size, base_side)
        if not sizes:
            raise ValueError(f"{size} fits the base ({base_side} px): stylise it whole")
        if min(sizes[0]) < MIN_TILE_SIDE:
            raise ValueError(f"{size} is too narrow for print-size stylisation")
        self.content = content if isinstance(content, DiskPicture) else content.cpu()
        # luminance-only transfer works on luma images throughout (the chroma comes back
        # from the photo at the end), as the pipeline does
        self.options = options
        styles = [style.float() for style in styles]
        self.styles = (
            [luminance(style).contiguous() for style in styles]
            if options.preserve_color
            else styles
        )
        self.weights = convex_weights(options.style_weights, len(self.styles))
        photo = _luma(self.content) if options.preserve_color else self.content
        self._octaves = [_Octave(size, photo)]  # fine to coarse, then reversed
        for times, octave_size in enumerate(sizes[-2::-1], start=1):
            below = octave_photo(photo, times, coarsest=times == len(sizes) - 1)
            self._octaves.append(_Octave(octave_size, below))
        self._octaves.reverse()
        whole = self._octaves[0].photo
        # the base reads the coarsest whole (at most twice the base's side): the photo
        # itself or its halving, read whole where it is kept on disk
        assert whole is not None and not isinstance(whole, HalfPhoto)
        if isinstance(whole, DiskPicture):
            whole = whole.read()
        coarsest = _as_float(whole).expand(3, -1, -1)[None]
        width, height = fit_longer_side(size[1], size[0], base_side)  # the base's size
        self.base_photo = resize(coarsest, (height, width))  # (1, 3, h, w)
        self._phases: list[list[Step]] = [[Step("base")]]
        for index, octave in enumerate(self._octaves):
            self._phases.append([Step("statistics", index)])
            tiles = tiles_of(octave.size, tile_side)
            octave.tiles_left = len(tiles)
            groups = group_tiles(tiles, tiles_per_step)
            self._phases.append([Step("tiles", index, group) for group in groups])

    @property
    def size(self) -> tuple[int, int]:
        return self._octaves[-1].size

    def phases(self) -> list[list[Step]]:
        """The steps, phase by phase (see the module's text)."""
        return self._phases

    @property
    def steps(self) -> int:
        """How many steps in all (what progress counts)."""
        return sum(len(phase) for phase in self._phases)

    # ------------------------------------------------------------------ running
    def run_step(self, model: TilingModel, step: Step) -> Tensor:
        """Compute ``step`` on ``model`` (on any thread: it reads what earlier phases set
        and writes nothing). Returns the base ``(1, 3, h, w)``, the octave's map
        ``[M | t]`` ``(64, 65)`` or the tiles ``(T, 3, th, tw)``."""
        if step.kind == "base":
            # the base is luma already where colour is preserved
            options = replace(self.options, preserve_color=False)
            return model.stylize(self.base_photo, self.styles, **options.keywords())
        if step.kind == "statistics":
            return self._affine_map(model, step.octave)
        return self._run_tiles(model, step)

    def accept(self, step: Step, result: Tensor) -> None:
        """Take a step's result in (on the one thread that drives the phases)."""
        if step.kind == "base":
            self._octaves[0].residual_below = (to_host(result.float()) - self.base_photo)[0]
        elif step.kind == "statistics":
            octave = self._octaves[step.octave]
            octave.matrix, octave.shift = result[:, :-1], result[:, -1]
        else:
            self._accept_tiles(step, to_host(result))

    def _accept_tiles(self, step: Step, tiles: Tensor) -> None:
        index = step.octave
        octave = self._octaves[index]
        final = index == len(self._octaves) - 1
        if octave.output is None:
            dtype = torch.uint8 if final else torch.float32
            octave.output = DiskPicture((3, *octave.size), dtype)
        for tile, image in zip(step.tiles, tiles, strict=True):
            if final and self.options.preserve_color:
                region = picture_region(
                    self.content, slice(tile.top, tile.bottom), slice(tile.left, tile.right)
                )
                image = with_chroma_of(image[None], _as_float(region)[None])[0]
            octave.output.write(tile.top, tile.left, to_uint8(image) if final else image)
        octave.tiles_left -= len(step.tiles)
        if octave.tiles_left == 0:
            self._finish_octave(index)

    def _finish_octave(self, index: int) -> None:
        """After an octave's last tile: keep its residual for the next octave, drop the rest."""
        octave = self._octaves[index]
        if index + 1 < len(self._octaves):
            assert octave.output is not None and octave.photo is not None
            residual = octave.output
            for top in range(0, octave.size[0], RESIDUAL_ROWS_PER_STRIP):
                bottom = top + RESIDUAL_ROWS_PER_STRIP
                photo = photo_rows(octave.photo, top, bottom).expand(3, -1, -1)
                residual.write(top, 0, residual.read(top, bottom).sub_(photo))
            self._octaves[index + 1].residual_below = residual
            octave.output = None
        if isinstance(octave.residual_below, DiskPicture):
            octave.residual_below.close()
        octave.photo = None
        octave.residual_below = None

    def result(self) -> DiskPicture:
        """The painted photo, ``(3, H, W)`` uint8 on disk (once every phase is accepted)."""
        output = self._octaves[-1].output
        if output is None:
            raise RuntimeError("the stylisation has not run")
        return output

    def run(self, model: TilingModel) -> Tensor:
        """Every step in turn on ``model``; returns :meth:`result` read whole, ``(3, H, W)``
        uint8, and deletes its file. (Progress is reported through a step control:
        ``StyleTransfer.stylize`` above its base side.)"""
        for phase in self._phases:
            for step in phase:
                self.accept(step, self.run_step(model, step))
            return_freed_memory()  # what the phase's steps freed, as the service does
        picture = self.result()
        try:
            return picture.read()
        finally:
            picture.close()

    # ------------------------------------------------------------------- the steps
    def _start(self, octave: _Octave, rows: Tensor, columns: Tensor) -> Tensor:
        """The octave's start image at ``rows`` x ``columns`` (reflected indices):
        ``clip(x_k + up(y_{k-1} - x_{k-1}))``, ``(3, n, m)`` float32."""
        if octave.residual_below is None or octave.photo is None:
            raise RuntimeError("the octave below has not run")
        up = resample_region(octave.residual_below, octave.size, rows, columns)
        return up.add_(pixels_at(octave.photo, rows, columns)).clamp_(0.0, 1.0)

    def _affine_map(self, model: TilingModel, index: int) -> Tensor:
        """The octave's WCT map ``[M | t]`` ``(64, 65)`` float64 (``alpha`` is applied per
        tile, against the photo): the content covariance from relu1_1 features of the
        octave's start image at the grid positions the whole-map pass reads
        (:func:`~models.adain.whitening.grid_stride`), the style's at the base."""
        octave = self._octaves[index]
        rows, columns = grid_neighbourhoods(octave.size)
        grid = octave_grid_features(model, self._start(octave, rows, columns)[None])
        pause_point()
        side = max(octave.size)
        styles = [
            _octave_style_statistics(model, style, side, self.options.style_scale)
            for style in self.styles
        ]
        matrix, shift = wct_affine(grid, styles, weights=self.weights, scratch=True)
        return torch.cat([matrix[0], shift[0][:, None]], dim=1)

    def _run_tiles(self, model: TilingModel, step: Step) -> Tensor:
        octave = self._octaves[step.octave]
        if octave.matrix is None or octave.shift is None or octave.photo is None:
            raise RuntimeError(f"octave {step.octave}'s statistics are not set")
        height, width = octave.size
        starts, photos = [], []
        for tile in step.tiles:
            pause_point()  # the start images are most of a tile's work on a CPU
            rows = reflect_index(torch.arange(tile.top - HALO, tile.bottom + HALO), height)
            columns = reflect_index(torch.arange(tile.left - HALO, tile.right + HALO), width)
            starts.append(self._start(octave, rows, columns))
            if self.options.alpha < 1.0:
                photos.append(pixels_at(octave.photo, rows, columns))
        return octave_tiles(
            model,
            torch.stack(starts),
            octave.matrix,
            octave.shift,
            [_edges(tile, octave.size) for tile in step.tiles],
            alpha=self.options.alpha,
            photos=torch.stack(photos) if photos else None,
        )


def _as_float(image: Tensor) -> Tensor:
    """uint8 in [0, 255] -> float32 in [0, 1]; float images as float32."""
    return image.float().div_(255.0) if image.dtype == torch.uint8 else image.float()


def _luma(content: Picture, rows_per_strip: int = 256) -> Picture:
    """The photo's luma ``Y`` as ``(1, H, W)`` uint8, computed in strips of rows: on disk
    where the photo is."""
    height, width = content.shape[-2:]
    strips = (
        (
            top,
            to_uint8(
                luminance(_as_float(picture_rows(content, top, top + rows_per_strip))[None])[0, :1]
            ),
        )
        for top in range(0, height, rows_per_strip)
    )
    if not isinstance(content, DiskPicture):
        return torch.cat([strip for _, strip in strips], dim=1)
    luma = DiskPicture((1, height, width), torch.uint8)
    for top, strip in strips:
        luma.write(top, 0, strip)
    return luma


def _edges(tile: Tile, size: tuple[int, int]) -> tuple[bool, bool, bool, bool]:
    """Which of the tile's sides (top, bottom, left, right) are the picture's."""
    return tile.top == 0, tile.bottom == size[0], tile.left == 0, tile.right == size[1]


# ------------------------------------------------------------- the relu1_1 pieces
def grid_neighbourhoods(size: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """The rows and columns of the 3 x 3 neighbourhoods of the grid positions a whole-map
    relu1_1 pass reads on a ``size`` map (stride :func:`~models.adain.whitening.grid_stride`),
    reflected at the edges: each position's rows ``-1, 0, 1`` side by side, likewise the
    columns (what :func:`octave_grid_features` takes)."""
    stride = grid_stride(*size)

    def around(length: int) -> Tensor:
        centres = torch.arange(0, length, stride)
        return reflect_index((centres[:, None] + torch.arange(-1, 2)).flatten(), length)

    return around(size[0]), around(size[1])


def _octave_style_statistics(
    model: TilingModel, style: Tensor, side: int, style_scale: float
) -> CovarianceStats:
    """A style's relu1_1 WCT statistics at an octave whose longer side is ``side``: the
    style resized as every stage of the pyramid resizes it (:func:`~models.adain.presets.style_at`,
    to ``style_scale x side``), read on the grid a whole-map pass reads, so that an
    enlarged style is never held whole.

    Shape:
        - style: ``(1, 3, h, w)`` float in [0, 1].
    """
    height, width = style.shape[-2:]
    factor = max(style_scale * side / max(height, width), MIN_STYLE_SIDE / min(height, width))
    size = stage_size((height, width), factor)
    if factor <= 1:  # a reduction, antialiased: the reduced style is small
        reduced = style_at(style, side, style_scale, min_side=MIN_STYLE_SIDE)[0]
        rows, columns = grid_neighbourhoods(size)
        picked = pixels_at(reduced.cpu(), rows, columns)
    else:
        rows, columns = grid_neighbourhoods(size)
        picked = resample_region(style[0].cpu(), size, rows, columns, bilinear_taps)
    grid = octave_grid_features(model, picked.clamp_(0.0, 1.0)[None])
    mean, covariance = feature_covariance(grid, scratch=True)
    return CovarianceStats(mean, symmetric_power(covariance, 0.5))


def octave_grid_features(model: TilingModel, neighbourhoods: Tensor) -> Tensor:
    """relu1_1 features at grid positions from their 3 x 3 neighbourhoods laid side by side.

    Shape:
        - neighbourhoods: ``(1, 3, 3h, 3w)`` float (each position's rows ``-1, 0, 1`` and
          columns likewise, consecutive); output: ``(1, 64, h w)`` in the model's dtype.
    """
    dtype = model.ready()
    preprocess, conv = model.encoder.relu1_1_layers()
    image = preprocess(neighbourhoods.to(model.device, dtype))
    return F.relu_(F.conv2d(image, conv.weight, conv.bias, stride=3)).flatten(2)


def octave_tiles(
    model: TilingModel,
    starts: Tensor,
    matrix: Tensor,
    shift: Tensor,
    edges: Sequence[tuple[bool, bool, bool, bool]],
    *,
    alpha: float = 1.0,
    photos: Tensor | None = None,
) -> Tensor:
    """The relu1_1 pass ``decode(lerp(f(photo), M f(start) + t, alpha))`` on tiles given
    with their ``HALO``; the features' one-pixel border is replaced by its reflection on
    the sides that are the picture's, as the whole-map pass pads its map.

    Shape:
        - starts, photos: ``(T, 3, th + 4, tw + 4)`` float; matrix: ``(64, 64)``; shift:
          ``(64,)``; output: ``(T, 3, th, tw)`` float32.
    """
    dtype = model.ready()
    preprocess, conv = model.encoder.relu1_1_layers()
    decoder = model.decoder(OCTAVE_LEVEL)

    def features(images: Tensor) -> Tensor:
        images = images.to(model.device, dtype).contiguous(memory_format=torch.channels_last)
        mapped = F.relu_(F.conv2d(preprocess(images), conv.weight, conv.bias))
        for index, (top, bottom, left, right) in enumerate(edges):
            if left:
                mapped[index, :, :, 0] = mapped[index, :, :, 2]
            if right:
                mapped[index, :, :, -1] = mapped[index, :, :, -3]
            if top:
                mapped[index, :, 0] = mapped[index, :, 2]
            if bottom:
                mapped[index, :, -1] = mapped[index, :, -3]
        return mapped

    pause_point()  # between the pieces of the pass: where a forward may wait
    mapped = features(starts)
    pause_point()
    weight, bias = decoder.folded_first_conv(alpha * matrix, alpha * shift)
    out = F.conv2d(mapped, weight, bias)
    if photos is not None and alpha < 1.0:  # the anchor's share, (1 - alpha) f(photo)
        out += F.conv2d(features(photos), (1.0 - alpha) * decoder.conv(1).weight)
    return out.float().clamp_(0.0, 1.0)
