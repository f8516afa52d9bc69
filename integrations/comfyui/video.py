"""A batch of frames as a short lossless clip for the server's video path, and the
server's clip back as frames (PyAV, which ComfyUI installs).

Frames go out as FFV1 in Matroska (lossless, any size), at ``fps``; the server paints
them as one clip (stable from frame to frame) and answers in the same container
(H.264, even sides: an odd side loses its last row or column, which
:func:`clip_to_frames` puts back by repeating its neighbour).
"""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np


def frames_to_clip(frames: np.ndarray, fps: int) -> bytes:
    """``(B, H, W, 3)`` uint8 RGB as a Matroska/FFV1 clip at ``fps`` frames a second."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"expected (B, H, W, 3) uint8 frames, got {frames.shape} {frames.dtype}")
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="matroska") as output:
        stream = output.add_stream("ffv1", rate=Fraction(fps))
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv444p"
        for pixels in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
            output.mux(stream.encode(frame))
        output.mux(stream.encode(None))
    return buffer.getvalue()


def clip_to_frames(data: bytes, height: int, width: int) -> np.ndarray:
    """Every frame of a clip as ``(B, height, width, 3)`` uint8 RGB (a frame a row or a
    column short, as H.264 crops odd sides, is edge-padded back)."""
    frames = []
    with av.open(io.BytesIO(data), "r") as container:
        for frame in container.decode(video=0):
            pixels = frame.to_ndarray(format="rgb24")[:height, :width]
            pad = ((0, height - pixels.shape[0]), (0, width - pixels.shape[1]), (0, 0))
            frames.append(np.pad(pixels, pad, mode="edge"))
    if not frames:
        raise ValueError("the server's clip holds no frames")
    return np.stack(frames)
