"""The vocabulary of the captioned-shapes world: palette, shapes, sizes, grid, scene types.

A scene is 1 to 3 flat shapes on a black 32x32 canvas. The canvas is cut into a 3x3 grid;
each object sits at the centre of its own cell (with a little jitter that never lets it
leave the cell), so a cell index ``row * 3 + col`` is unambiguous and objects never touch.
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGE_SIZE = 32
GRID = 3
CELL = IMAGE_SIZE / GRID  # 10.67 px

#: Saturated palette (RGB, 0..255) on a black background; the order is the label order.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "magenta": (255, 0, 255),
    "cyan": (0, 255, 255),
    "white": (255, 255, 255),
    "orange": (255, 128, 0),
}
COLOURS: tuple[str, ...] = tuple(PALETTE)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
SIZES: tuple[str, ...] = ("small", "large")
#: Grid cells in reading order: index = row * 3 + col.
POSITIONS: tuple[str, ...] = (
    "top left",
    "top",
    "top right",
    "left",
    "center",
    "right",
    "bottom left",
    "bottom",
    "bottom right",
)

#: Half-extent in pixels of each size (circle radius, square half-side, triangle half-base).
RADIUS: dict[str, float] = {"small": 2.75, "large": 4.25}
#: Largest centre jitter (pixels, each axis): keeps >= 1 empty pixel between neighbours.
JITTER: dict[str, float] = {"small": 1.0, "large": 0.25}


@dataclass(frozen=True)
class SceneObject:
    """One shape on the canvas.

    Args:
        colour: one of :data:`COLOURS`.
        shape: one of :data:`SHAPES`.
        size: one of :data:`SIZES`.
        cell: grid cell index ``row * 3 + col`` in ``0..8``.
        offset: jitter ``(dx, dy)`` in pixels from the cell centre, within ``JITTER[size]``.
    """

    colour: str
    shape: str
    size: str
    cell: int
    offset: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        if self.colour not in PALETTE:
            raise ValueError(f"unknown colour {self.colour!r}; expected one of {COLOURS}")
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r}; expected one of {SHAPES}")
        if self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; expected one of {SIZES}")
        if not 0 <= self.cell < GRID * GRID:
            raise ValueError(f"cell must be in 0..{GRID * GRID - 1}, got {self.cell}")
        limit = JITTER[self.size]
        if any(abs(d) > limit for d in self.offset):
            raise ValueError(f"offset {self.offset} exceeds the {self.size} jitter {limit}")

    @property
    def row(self) -> int:
        return self.cell // GRID

    @property
    def col(self) -> int:
        return self.cell % GRID

    @property
    def position(self) -> str:
        return POSITIONS[self.cell]

    @property
    def centre(self) -> tuple[float, float]:
        """``(x, y)`` of the object's bounding-box centre in pixel coordinates."""
        return (
            (self.col + 0.5) * CELL + self.offset[0],
            (self.row + 0.5) * CELL + self.offset[1],
        )


@dataclass(frozen=True)
class Scene:
    """A list of objects in distinct cells and the caption that describes them exactly."""

    objects: tuple[SceneObject, ...]
    caption: str

    def __post_init__(self) -> None:
        if not 1 <= len(self.objects) <= GRID * GRID:
            raise ValueError(f"a scene holds 1 to {GRID * GRID} objects, got {len(self.objects)}")
        cells = [obj.cell for obj in self.objects]
        if len(set(cells)) != len(cells):
            raise ValueError(f"objects must sit in distinct cells, got cells {cells}")
