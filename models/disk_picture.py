"""A picture kept in a file instead of in memory, read and written a region at a time.

A print's big intermediate pictures (an octave's float32 output and residual, the 8-bit
canvas: 201 MB each at 8192 x 8192 px, ``models.adain.large``) are needed a tile at a
time, so they live in a :class:`DiskPicture`: a ``(C, H, W)`` array in an anonymous
temporary file (``tempfile``'s folder: ``TMPDIR``, else ``/tmp``), its space reserved
when it is made (``posix_fallocate``), so that a full disk is an error then and never a
failed write later. Each read or write maps the file, copies the region and unmaps it:
the pages read or written count in the process's RSS only for that call. They stay in
the kernel's page cache, which gives them up under memory pressure (dirty ones once
written back), unlike a process's own memory. The file goes when the picture is closed
or collected. A ``TMPDIR`` on a RAM file system (tmpfs) keeps them in memory after all.
"""

from __future__ import annotations

import math
import mmap
import os
import tempfile
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

_NUMPY_DTYPES = {torch.uint8: np.uint8, torch.float32: np.float32}


class ScratchFull(OSError):
    """There is no room in the temporary folder for a picture's file."""


class DiskPicture:
    """A ``(C, H, W)`` picture of ``dtype`` (uint8 or float32) in a file (see the module).

    Raises:
        ScratchFull: the temporary folder has no room for it.
    """

    def __init__(self, shape: tuple[int, int, int], dtype: torch.dtype) -> None:
        if dtype not in _NUMPY_DTYPES:
            raise ValueError(f"a disk picture is uint8 or float32, not {dtype}")
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"a disk picture is (C, H, W) with every side >= 1, got {shape}")
        self.shape = shape
        self.dtype = dtype
        self._numpy_dtype: Any = _NUMPY_DTYPES[dtype]
        self.nbytes = math.prod(shape) * np.dtype(self._numpy_dtype).itemsize
        self._file = tempfile.TemporaryFile(prefix="atelier-picture-")  # noqa: SIM115 (held, closed by close())
        try:
            os.posix_fallocate(self._file.fileno(), 0, self.nbytes)
        except OSError as error:
            self._file.close()
            raise ScratchFull(
                error.errno,
                f"no room for a {self.nbytes / 2**20:.0f} MB picture in {tempfile.gettempdir()}",
            ) from None
        # the file goes with the picture when nobody closed it (a job cancelled midway)
        self._closer = weakref.finalize(self, self._file.close)

    def read(self, top: int = 0, bottom: int | None = None, left: int = 0,
             right: int | None = None) -> Tensor:  # fmt: skip
        """Rows ``top:bottom`` and columns ``left:right`` (all by default), a copy:
        ``(C, n, m)``."""
        with mmap.mmap(self._file.fileno(), self.nbytes, access=mmap.ACCESS_READ) as mapped:
            whole = np.frombuffer(mapped, dtype=self._numpy_dtype).reshape(self.shape)
            region = whole[:, top:bottom, left:right].copy()
            del whole  # the map cannot close while an array points into it
        return torch.from_numpy(region)

    def write(self, top: int, left: int, values: Tensor) -> None:
        """``values`` ``(C, n, m)`` into rows ``top:top + n`` and columns ``left:left + m``."""
        height, width = values.shape[-2:]
        if (
            values.shape[0] != self.shape[0]
            or top + height > self.shape[1]
            or (left + width > self.shape[2])
        ):
            raise ValueError(f"{tuple(values.shape)} at ({top}, {left}) leaves {self.shape}")
        source = values.detach().cpu().to(self.dtype).numpy()
        with mmap.mmap(self._file.fileno(), self.nbytes, access=mmap.ACCESS_WRITE) as mapped:
            whole = np.frombuffer(mapped, dtype=self._numpy_dtype).reshape(self.shape)
            whole[:, top : top + height, left : left + width] = source
            del whole

    def element_size(self) -> int:
        """Bytes of one value (as :meth:`torch.Tensor.element_size`)."""
        return int(np.dtype(self._numpy_dtype).itemsize)

    def close(self) -> None:
        """Delete the file (reads and writes fail after)."""
        self._closer()


#: A picture held in memory or kept on disk.
Picture = Tensor | DiskPicture


def in_memory(picture: Picture) -> Tensor:
    """A picture that was to stay in memory, as its tensor.

    Raises:
        TypeError: it is on disk (its maker was asked to keep it there).
    """
    if isinstance(picture, DiskPicture):
        raise TypeError(f"a {picture.shape} picture on disk where one in memory was made")
    return picture


def picture_rows(picture: Picture, top: int, bottom: int) -> Tensor:
    """Rows ``top:bottom`` of a ``(C, H, W)`` picture, ``(C, n, W)`` (a view of a tensor,
    a copy of a disk picture's rows)."""
    if isinstance(picture, DiskPicture):
        return picture.read(top, bottom)
    return picture[:, top:bottom]


def picture_region(picture: Picture, rows: slice, columns: slice) -> Tensor:
    """``picture[:, rows, columns]`` (slices with unit steps): a view of a tensor, a copy
    of a disk picture's region."""
    if isinstance(picture, DiskPicture):
        return picture.read(rows.start or 0, rows.stop, columns.start or 0, columns.stop)
    return picture[:, rows, columns]


#: The most bytes one read of a disk picture copies (:func:`read_chunks`): the box read
#: is held twice while it is copied (its mapped pages and the copy), so a box of an
#: octave's grid, whose rows lie spread over the whole picture, is read in several.
READ_BOX_BYTES = 8 * 2**20


def read_chunks(
    first: Tensor, last: Tensor, row_bytes: int, budget: int | None = None
) -> Iterator[slice]:
    """Consecutive runs of output rows, each read from one box of source rows: output row
    ``i`` needs source rows ``first[i]..last[i]``, a run's box spans from the least to
    the greatest of its rows, and each box holds at most ``budget`` bytes
    (``READ_BOX_BYTES`` by default; ``row_bytes`` a source row of the box; one output
    row's box alone may exceed it). A run ends only where the next row would not fit.

    Shape:
        - first, last: ``(n,)`` long; output: slices that cover ``0..n`` in order.
    """
    budget = READ_BOX_BYTES if budget is None else budget
    if row_bytes < 1 or budget < 1:
        raise ValueError(f"row_bytes and budget must be >= 1, got {row_bytes} and {budget}")
    start, low, high = 0, math.inf, -math.inf
    for index, (top, bottom) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
        low, high = min(low, top), max(high, bottom)
        if index > start and (high - low + 1) * row_bytes > budget:
            yield slice(start, index)
            start, low, high = index, top, bottom
    if start < len(first):
        yield slice(start, len(first))


def gather(picture: Picture, rows: Tensor, columns: Tensor) -> Tensor:
    """``picture[:, rows][:, :, columns]`` without a copy of the whole rows or columns.
    From a :class:`DiskPicture`: a run of output rows at a time, each from the box its
    indices lie in, of at most ``READ_BOX_BYTES`` (:func:`read_chunks`; a tile's rows
    and columns are one small box; an octave's grid of sparse rows is read a band at a
    time, never whole).

    Shape:
        - picture: ``(C, H, W)``; rows, columns: ``(n,)``, ``(m,)`` long; output:
          ``(C, n, m)`` of the picture's dtype.
    """
    if not isinstance(picture, DiskPicture):
        return picture[:, rows[:, None], columns[None, :]]
    left, right = int(columns.min()), int(columns.max()) + 1
    out = torch.empty((picture.shape[0], len(rows), len(columns)), dtype=picture.dtype)
    for these in read_chunks(
        rows, rows, picture.shape[0] * (right - left) * picture.element_size()
    ):
        chunk = rows[these]
        top = int(chunk.min())
        box = picture.read(top, int(chunk.max()) + 1, left, right)
        out[:, these] = box[:, (chunk - top)[:, None], (columns - left)[None, :]]
    return out
