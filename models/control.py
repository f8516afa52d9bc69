"""Step control: progress reports and cancellation of rows between the steps of a batch.

A long batched computation (a sampler's steps, AdaIN's passes) calls a
:class:`StepControl` before each step and once after the last. The control sees how far
the batch got and answers which rows are still wanted; the computation then continues on
those rows alone, so work nobody waits for stops within one step while the rest of the
batch goes on unchanged. This only works because every row is independent: its noise
comes from its own seed (:func:`models.diffusion.random.randn`) and no layer mixes rows.

Pause points are finer: the networks call :func:`pause_point` between their layers, and
a thread inside :func:`pausing` waits there while its ``pause()`` says so (a forward
that yields the device to more urgent work, ``service.batching.DeviceGate``). One step
of a long pass (a pyramid's relu3_1 pass at 512 px takes a second on a CPU) then holds
the device for one layer at a time. Waiting at a pause point changes nothing computed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor


class StepControl(Protocol):
    """Called as ``control(done, total)`` before step ``done`` (0-based) and once more with
    ``done == total`` after the last step.

    Returns the positions, in the current batch and ascending, of the rows still wanted
    (the batch shrinks to them; an empty list stops the computation), or ``None`` to keep
    every row.
    """

    def __call__(self, done: int, total: int) -> Sequence[int] | None: ...


#: A step control's optional hook on the picture as it forms: a control with a ``show``
#: attribute that is not ``None`` is called ``show(done, total, images)`` after step
#: ``done - 1`` (``done`` steps are done), where ``images()`` gives the batch's picture so
#: far, ``(B, 3, h, w)`` in ``[0, 1]`` with the rows the control kept, on the model's
#: device (a stage of the style-transfer pyramid, a sampler's estimate of the clean
#: image). The hook calls ``images()`` only when it wants a picture, during the call, and
#: never changes it in place: a computation gives the same result with or without it.
#: A control without the hook (or with ``show = None``) costs the computation nothing.
ShowImages = Callable[[int, int, Callable[[], Tensor]], None]


def image_hook(control: StepControl | None) -> ShowImages | None:
    """``control``'s ``show`` hook (see :data:`ShowImages`), or ``None`` when it has none."""
    show = getattr(control, "show", None)
    return show if callable(show) else None


def pause_hook(control: StepControl | None) -> Callable[[], None] | None:
    """``control``'s ``pause`` hook, or ``None`` when it has none: a control with a
    ``pause`` attribute that is not ``None`` may be called ``pause()`` at points *inside*
    one of its steps where the computation may wait (e.g. for more urgent work on the
    device) before it goes on. Waiting there changes nothing computed."""
    pause = getattr(control, "pause", None)
    return pause if callable(pause) else None


_this_thread = threading.local()


@contextlib.contextmanager
def pausing(pause: Callable[[], None] | None) -> Iterator[None]:
    """Within the block, every :func:`pause_point` reached on this thread calls
    ``pause()`` (nothing when ``None``); the thread's earlier setting comes back after."""
    previous = getattr(_this_thread, "pause", None)
    _this_thread.pause = pause
    try:
        yield
    finally:
        _this_thread.pause = previous


def pause_point() -> None:
    """A point between two layers of a network where the calling thread may wait, if it
    runs inside :func:`pausing` (a thread-local look-up otherwise)."""
    pause = getattr(_this_thread, "pause", None)
    if pause is not None:
        pause()


class _ConvertedImages:
    """A step control whose ``show`` hook gets ``convert(images())``."""

    def __init__(
        self, control: StepControl, show: ShowImages, convert: Callable[[Tensor], Tensor]
    ) -> None:
        self._control = control
        self._show = show
        self._convert = convert

    def __call__(self, done: int, total: int) -> Sequence[int] | None:
        return self._control(done, total)

    def show(self, done: int, total: int, images: Callable[[], Tensor]) -> None:
        self._show(done, total, lambda: self._convert(images()))


def converted_images(
    control: StepControl | None, convert: Callable[[Tensor], Tensor]
) -> StepControl | None:
    """``control`` with its ``show`` hook given ``convert`` of the computation's pictures
    (e.g. a sampler's ``[-1, 1]`` estimate as ``[0, 1]`` images); ``control`` itself when
    it has no hook."""
    show = image_hook(control)
    if control is None or show is None:
        return control
    return _ConvertedImages(control, show, convert)


def take_rows(value: Any, rows: Tensor) -> Any:
    """``value`` restricted to batch rows ``rows`` (a ``(K,)`` long tensor).

    Tensors are indexed along dim 0; lists (e.g. one generator per row) by position;
    tuples and named tuples item by item; an object with a ``take_rows(rows)`` method
    (e.g. :class:`~models.diffusion.guidance.Regions`) does it itself; anything else
    (``None``, one shared generator, numbers) is kept as it is.
    """
    if hasattr(value, "take_rows"):
        return value.take_rows(rows)
    if isinstance(value, Tensor):
        return value.index_select(0, rows.to(value.device))
    if isinstance(value, list):
        return [value[i] for i in rows.tolist()]
    if isinstance(value, tuple):
        items = [take_rows(item, rows) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def concat_rows(values: Sequence[Any]) -> Any:
    """Batches stacked along their rows, the inverse of :func:`take_rows`.

    Tensors are concatenated along dim 0; tuples and named tuples item by item; a type
    with a ``concat_rows(values)`` classmethod (e.g.
    :class:`~models.text_encoder.TextCondition`, which pads its tokens) does it itself.

    Raises:
        TypeError: for values that have no rows (numbers, ``None``).
    """
    first = values[0]
    if hasattr(type(first), "concat_rows"):
        return type(first).concat_rows(values)
    if isinstance(first, Tensor):
        return torch.cat(list(values))
    if isinstance(first, tuple):
        items = [concat_rows(parts) for parts in zip(*values, strict=True)]
        return type(first)(*items) if hasattr(first, "_fields") else tuple(items)
    raise TypeError(f"cannot stack the rows of {type(first).__name__}")


def wanted_rows(control: StepControl | None, done: int, total: int) -> Tensor | None:
    """Ask ``control``; ``None`` when every row is kept, else the kept rows as a tensor."""
    if control is None:
        return None
    rows = control(done, total)
    return None if rows is None else torch.as_tensor(list(rows), dtype=torch.long)
