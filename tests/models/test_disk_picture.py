"""A picture kept in a file: regions read back as written, the file's life, a full disk."""

from __future__ import annotations

import errno
import gc

import pytest
import torch

import models.disk_picture as disk_picture_module
from models.disk_picture import (
    DiskPicture,
    ScratchFull,
    gather,
    in_memory,
    picture_region,
    picture_rows,
    read_chunks,
)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_regions_read_back_what_was_written_where_it_was_written(dtype):
    """Random regions written over one another, as into a tensor beside it."""
    generator = torch.Generator().manual_seed(0)
    shape = (3, 37, 53)
    expected = torch.zeros(shape, dtype=dtype)
    picture = DiskPicture(shape, dtype)
    assert torch.equal(picture.read(), expected)  # a new picture is zeros
    for _ in range(20):
        top, left = (int(torch.randint(0, side, (1,), generator=generator)) for side in (37, 53))
        height = int(torch.randint(1, 38 - top, (1,), generator=generator))
        width = int(torch.randint(1, 54 - left, (1,), generator=generator))
        values = torch.rand(3, height, width, generator=generator) * 255
        values = values.to(dtype)
        picture.write(top, left, values)
        expected[:, top : top + height, left : left + width] = values
    assert torch.equal(picture.read(), expected)
    assert torch.equal(picture.read(5, 30, 7, 40), expected[:, 5:30, 7:40])
    assert torch.equal(picture_rows(picture, 3, 9), expected[:, 3:9])
    assert torch.equal(picture_rows(expected, 3, 9), expected[:, 3:9])


def test_a_write_outside_the_picture_is_refused():
    picture = DiskPicture((1, 4, 4), torch.uint8)
    with pytest.raises(ValueError, match="leaves"):
        picture.write(2, 0, torch.zeros(1, 3, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="leaves"):
        picture.write(0, 0, torch.zeros(3, 2, 2, dtype=torch.uint8))


@pytest.mark.parametrize(
    ("shape", "dtype"), [((3, 0, 4), torch.uint8), ((3, 4), torch.uint8), ((3, 4, 4), torch.int64)]
)
def test_a_picture_of_another_shape_or_kind_is_refused(shape, dtype):
    with pytest.raises(ValueError):
        DiskPicture(shape, dtype)


def test_the_file_goes_when_the_picture_is_closed_or_forgotten():
    picture = DiskPicture((3, 8, 8), torch.float32)
    file = picture._file
    picture.close()
    assert file.closed
    with pytest.raises(ValueError):
        picture.read()
    forgotten = DiskPicture((3, 8, 8), torch.float32)
    file = forgotten._file
    del forgotten
    gc.collect()
    assert file.closed


def test_no_room_for_the_file_is_scratch_full_with_the_size(monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_picture_module.os, "posix_fallocate", full)
    with pytest.raises(ScratchFull, match=r"no room for a 192 MB picture in ") as raised:
        DiskPicture((3, 8192, 8192), torch.uint8)
    assert raised.value.errno == errno.ENOSPC


def test_regions_and_gathers_are_the_tensors_in_memory_and_on_disk():
    """``picture_region`` and ``gather`` (reflected indices, as a tile's halo reads them)
    give what indexing the tensor gives, from the tensor and from its file."""
    generator = torch.Generator().manual_seed(1)
    pixels = torch.randint(0, 256, (3, 29, 41), dtype=torch.uint8, generator=generator)
    on_disk = DiskPicture((3, 29, 41), torch.uint8)
    on_disk.write(0, 0, pixels)
    rows = torch.tensor([1, 0, 0, 1, 2, 3, 4])  # reflected at the top
    columns = torch.tensor([38, 39, 40, 40, 39])  # and at the right
    expected = pixels[:, rows][:, :, columns]
    for picture in (pixels, on_disk):
        assert torch.equal(gather(picture, rows, columns), expected)
        assert torch.equal(picture_region(picture, slice(3, 9), slice(None)), pixels[:, 3:9])
        assert torch.equal(picture_region(picture, slice(0, 29), slice(5, 6)), pixels[:, :, 5:6])


@pytest.mark.parametrize("seed", range(6))
def test_read_chunks_cover_the_rows_in_order_each_box_within_budget_and_as_long_as_fits(seed):
    """Runs of output rows: consecutive, covering every row once; each run's box of
    source rows at most the budget (unless it is one row); and each run stops only where
    the next row would take its box past the budget."""
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(0, 500, (200,), generator=generator).sort().values
    last = first + torch.randint(0, 4, (200,), generator=generator)  # a row's taps
    first[::7] = torch.randint(0, 500, (len(first[::7]),), generator=generator)  # reflected
    row_bytes, budget = 3 * 41, 3 * 41 * 60
    runs = list(read_chunks(first, last, row_bytes, budget))
    assert [run.start for run in runs] == [0] + [run.stop for run in runs[:-1]]
    assert runs[-1].stop == len(first)

    def box(run: slice) -> int:
        return (int(last[run].max()) - int(first[run].min()) + 1) * row_bytes

    for run in runs:
        assert box(run) <= budget or run.stop - run.start == 1
    for run, after in zip(runs, runs[1:], strict=False):
        assert box(slice(run.start, run.stop + 1)) > budget, "the run could have gone on"
        assert after.start == run.stop


def test_a_gather_read_under_a_small_budget_is_the_same_and_never_reads_the_whole(monkeypatch):
    """With a budget of a few rows, a gather of sparse rows over the whole picture reads
    many small boxes, never the picture whole, and gives what indexing gives."""
    pixels = torch.randint(0, 256, (3, 64, 40), dtype=torch.uint8)
    on_disk = DiskPicture((3, 64, 40), torch.uint8)
    on_disk.write(0, 0, pixels)
    boxes = []
    read = DiskPicture.read

    def counted(picture, top=0, bottom=None, left=0, right=None):
        region = read(picture, top, bottom, left, right)
        boxes.append(region.numel())
        return region

    monkeypatch.setattr(DiskPicture, "read", counted)
    monkeypatch.setattr(disk_picture_module, "READ_BOX_BYTES", 3 * 40 * 8)
    rows, columns = torch.arange(0, 64, 3), torch.arange(0, 40, 2)
    assert torch.equal(gather(on_disk, rows, columns), pixels[:, rows][:, :, columns])
    assert len(boxes) > 1 and max(boxes) <= 3 * 40 * 8


def test_a_picture_that_was_to_stay_in_memory_is_its_tensor_and_one_on_disk_is_refused():
    pixels = torch.zeros(3, 4, 4, dtype=torch.uint8)
    assert in_memory(pixels) is pixels
    with pytest.raises(TypeError, match="on disk"):
        in_memory(DiskPicture((3, 4, 4), torch.uint8))
