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


def test_a_picture_that_was_to_stay_in_memory_is_its_tensor_and_one_on_disk_is_refused():
    pixels = torch.zeros(3, 4, 4, dtype=torch.uint8)
    assert in_memory(pixels) is pixels
    with pytest.raises(TypeError, match="on disk"):
        in_memory(DiskPicture((3, 4, 4), torch.uint8))
