"""Argument checks shared by the functions and the modules.

Every bad argument raises ``ValueError`` naming the argument, including arguments of
the wrong type (``eps=None`` where ``None`` means nothing, ``num_groups="4"``), which a
bare comparison would turn into a ``TypeError`` from deep inside the code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Literal, overload

from torch import Tensor


def real(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
) -> float:
    """``value`` as a float when it is a finite real number in ``[low, high]``.

    ``open_low`` excludes ``low`` itself (``(low, high]``). Booleans are not numbers here.
    """
    # ``numbers.Real`` declares only ``<`` and ``<=`` in the stubs: ``not number <= low``
    # is ``number > low`` and ``not number < low`` is ``number >= low`` (finite numbers).
    number = value if isinstance(value, Real) and not isinstance(value, bool) else None
    in_range = number is not None and math.isfinite(number)
    if number is not None and in_range and low is not None:
        in_range = not number <= low if open_low else not number < low
    if number is not None and in_range and high is not None:
        in_range = number <= high
    if number is None or not in_range:
        if low == 0.0 and high is None:
            kind = "positive" if open_low else "non-negative"
        else:
            kind = "in {}{}, {}]".format(
                "(" if open_low else "[",
                "-inf" if low is None else low,
                "inf" if high is None else high,
            )
        raise ValueError(f"{name} must be a finite number, {kind}; got {value!r}")
    return float(number)


def positive_int(name: str, value: object) -> int:
    """``value`` when it is an int ``>= 1`` (booleans excluded)."""
    # ``not value < 1`` is ``value >= 1``: ``numbers.Integral`` declares only ``<``, ``<=``.
    if not (isinstance(value, Integral) and not isinstance(value, bool) and not value < 1):
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


@overload
def eps(value: object, *, positive: bool = ..., allow_none: Literal[False] = ...) -> float: ...
@overload
def eps(value: object, *, positive: bool = ..., allow_none: bool) -> float | None: ...
def eps(value: object, *, positive: bool = False, allow_none: bool = False) -> float | None:
    """A variance epsilon: ``>= 0`` (``> 0`` with ``positive``); ``None`` only if allowed.

    ``allow_none`` is for RMS norm, where torch reads ``eps=None`` as the machine epsilon
    of the input's computation dtype.
    """
    if value is None:
        if allow_none:
            return None
        raise ValueError(
            "eps must be a number; eps=None (machine epsilon of the input) is accepted by "
            "RMS norm only, as in torch"
        )
    return real("eps", value, low=0.0, open_low=positive)


def momentum(value: object, *, allow_none: bool = True) -> float | None:
    """A running-average factor in ``[0, 1]``; ``None`` (cumulative average) if allowed."""
    if value is None:
        if allow_none:
            return None
        raise ValueError(
            "momentum=None (cumulative average) needs the batch count: the modules pass "
            "1 / num_batches_tracked; functions take a float in [0, 1]"
        )
    return real("momentum", value, low=0.0, high=1.0)


def shapes(shape: Sequence[int], **tensors: Tensor | None) -> None:
    """Each given tensor (``None`` is skipped) has exactly ``shape``, e.g. ``(C,)``."""
    for name, tensor in tensors.items():
        if tensor is not None and tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(tensor.shape)}")


def running_stats(
    running_mean: Tensor | None,
    running_var: Tensor | None,
    *,
    required: bool = False,
    why: str = "evaluation (training=False)",
) -> None:
    """``running_mean``/``running_var`` come together, and are given when ``required``
    (the error names ``why`` they are)."""
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must be given together")
    if required and running_mean is None:
        raise ValueError(f"{why} needs running_mean and running_var")
