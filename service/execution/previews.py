"""Live previews of a job: small JPEGs of the work so far, for its event stream.

A job submitted with ``previews`` gets a :class:`Previews` from its runner. The model
shows its pictures as they form (``models.control.ShowImages``: each stage of the
style-transfer pyramid, the sampler's estimate of the clean image after each step),
through the batch's step control, to the callback that :meth:`Previews.watcher` gives
the job's first part. At most one picture every ``interval_s`` is taken (the others are
never read: the hook decides before it asks for the picture), shrunk on its device to
``max_side`` on its longer side (a small one is enlarged by a whole factor, nearest
neighbour, so that its pixels survive JPEG), encoded as a JPEG and handed to
``publish``, on the worker thread. The last step's picture is the result: it is not
previewed.

A job without previews has no :class:`Previews`: its batch's control has no ``show``
hook and the model hands nothing over.
"""

from __future__ import annotations

import io
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from PIL import Image

from service.batching import PreviewCallback
from service.jobs.previews import pack_preview

logger = logging.getLogger("atelier.previews")

#: Least seconds between two previews of a job.
INTERVAL_S = 0.5
#: Longer side of a preview, at most; a picture with a longer side under ``MIN_SIDE`` is
#: enlarged by a whole factor towards it.
MAX_SIDE = 256
MIN_SIDE = 128
QUALITY = 70


def preview_jpeg(
    picture: torch.Tensor, *, max_side: int = MAX_SIDE, min_side: int = MIN_SIDE
) -> tuple[bytes, int, int]:
    """``picture`` ``(3, h, w)`` in ``[0, 1]`` (any device, any float dtype) as a JPEG of
    at most ``max_side`` on its longer side: ``(data, width, height)``."""
    image = picture.detach()[None].float()
    height, width = image.shape[-2:]
    longest = max(height, width)
    if longest > max_side:
        scale = max_side / longest
        size = (max(1, round(height * scale)), max(1, round(width * scale)))
        image = F.interpolate(
            image, size=size, mode="bilinear", antialias=True, align_corners=False
        )
    elif longest < min_side:
        factor = max(1, min(min_side, max_side) // longest)
        if factor > 1:
            image = F.interpolate(image, scale_factor=factor, mode="nearest")
    # to 8 bits in NumPy: torch's thread pool costs more than this small array's work,
    # most of all on a busy CPU (~40 ms against ~0.2 ms on two loaded cores)
    array = image[0].permute(1, 2, 0).cpu().numpy()
    array = np.clip(array * 255.0 + 0.5, 0.0, 255.0).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(array).save(out, "JPEG", quality=QUALITY)
    return out.getvalue(), array.shape[1], array.shape[0]


class Previews:
    """One job's previews (see the module docstring); ``publish(blob)`` gets each one
    packed (:func:`pack_preview`), from the worker thread."""

    def __init__(
        self,
        publish: Callable[[bytes], None],
        *,
        interval_s: float = INTERVAL_S,
        max_side: int = MAX_SIDE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self.interval_s = interval_s
        self.max_side = max_side
        self._clock = clock
        self._next_at = -math.inf
        self._lock = threading.Lock()
        self._failed = False
        self.taken = 0

    def watcher(self, part: int | None) -> PreviewCallback | None:
        """The callback for part ``part`` of the job: the first part's pictures are the
        job's previews (a job of several images previews its first); ``None`` for the
        others and for items without a part, whose batches then install no hook for them."""
        return self._offer if part == 0 else None

    def _offer(self, done: int, total: int, picture: Callable[[], Any]) -> None:
        if done >= total or self._failed:
            return
        with self._lock:
            now = self._clock()
            if now < self._next_at:
                return
            self._next_at = now + self.interval_s
        try:
            data, width, height = preview_jpeg(picture(), max_side=self.max_side)
            self._publish(pack_preview(data, width, height, done, total))
        except Exception:  # a preview never fails its job
            self._failed = True
            logger.exception("a preview failed; this job shows no more")
            return
        self.taken += 1
