"""Flow, warping, occlusion, the warping error, and the temporal blend of a clip's frames
(models.flow, models.temporal, models.adain.video)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from models.adain.options import StyleOptions
from models.adain.pipeline import StyleTransfer
from models.adain.video import CHUNK_FRAMES, ClipState, stylize_chunk, stylize_clip
from models.flow import (
    FlowEstimator,
    reliable_mask,
    shift_flow,
    to_hwc,
    warp,
    warping_error,
)
from models.temporal import HALF_STAGE_SHARE, FrameMotion, StageBlend, stage_strength

pytestmark = pytest.mark.usefixtures("single_thread")


def _scene(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A textured float scene ``(H, W, 3)`` in [0, 255]: smooth blobs plus fine detail."""
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, height // 8, width // 8, generator=gen)
    smooth = F.interpolate(coarse, size=(height, width), mode="bicubic", align_corners=False)
    detail = 0.15 * torch.rand(1, 3, height, width, generator=gen)
    return ((smooth + detail).clamp(0, 1)[0].permute(1, 2, 0).numpy() * 255).astype(np.float32)


def _pan(frames: int, height: int, width: int, step: int, seed: int = 0) -> torch.Tensor:
    """A camera panning right by ``step`` px a frame over a static scene: ``(n, 3, H, W)``
    uint8 (frame ``t`` is the window at ``x = t * step``)."""
    scene = _scene(height, width + step * frames, seed)
    windows = [scene[:, t * step : t * step + width] for t in range(frames)]
    return torch.from_numpy(np.stack(windows).round().astype(np.uint8)).permute(0, 3, 1, 2)


# --------------------------------------------------------------------------- flow
def test_dis_recovers_a_pan_and_warp_undoes_it():
    clip = _pan(2, 96, 128, step=3)
    backward, forward = FlowEstimator("medium").flows(clip[0], clip[1])
    inner = (slice(8, -8), slice(8, -16))
    assert np.abs(backward[inner][..., 0] - 3).mean() < 0.25
    assert np.abs(backward[inner][..., 1]).mean() < 0.25
    assert np.abs(forward[inner][..., 0] + 3).mean() < 0.25
    exact, mask = shift_flow((96, 128), 3.0)
    carried = warp(clip[0], exact)  # frame 0's pixels brought onto frame 1
    np.testing.assert_array_equal(carried[:, :-3], to_hwc(clip[1])[:, :-3])
    assert mask[:, :-3].all() and not mask[:, -3:].any()  # came from outside the frame


def test_the_round_trip_check_marks_pixels_whose_flows_disagree():
    backward = np.zeros((20, 30, 2), np.float32)
    forward = np.zeros((20, 30, 2), np.float32)
    forward[5:10, 5:10] = 4.0  # where frame t-1 says it went elsewhere
    mask = reliable_mask(backward, forward)
    assert mask[5:10, 5:10].sum() == 0 and mask.sum() == 20 * 30 - 25


def test_warping_error_is_zero_for_outputs_that_move_with_the_content_and_positive_otherwise():
    clip = _pan(3, 64, 96, step=2)
    backward, mask = shift_flow((64, 96), 2.0)
    assert warping_error(clip[0], clip[1], backward, mask) == pytest.approx(0.0, abs=1e-12)
    shaken = torch.roll(clip[1], shifts=1, dims=1)  # the output jumped by a row
    error = warping_error(clip[0], shaken, backward, mask)
    # a float64 reference of the same sum
    previous = np.roll(to_hwc(clip[0]).astype(np.float64), -2, axis=1)  # read at p + 2
    reference = ((to_hwc(shaken) / 255.0 - previous / 255.0) ** 2).sum(-1)[:, :-2].mean()
    assert error == pytest.approx(reference, rel=1e-5)


# ---------------------------------------------------------------------- the blend
def _still_motion(shape: tuple[int, int]) -> FrameMotion:
    return FrameMotion(np.zeros((*shape, 2), np.float32), np.ones(shape, np.float32))


def test_stage_strength_is_full_at_the_coarse_stages_a_share_at_the_half_none_at_full_size():
    assert stage_strength(0.8, 0.125) == stage_strength(0.8, 0.25) == 0.8
    assert stage_strength(0.8, 0.5) == pytest.approx(0.8 * HALF_STAGE_SHARE)
    assert 0.0 < HALF_STAGE_SHARE < 1.0
    assert stage_strength(0.8, 1.0) == 0.0


def test_a_still_frame_is_pulled_towards_the_previous_one_by_each_stages_strength():
    blend = StageBlend(strength=0.75)
    first = torch.full((1, 3, 8, 8), 0.2)
    blend.begin([None])
    for stage, factor in enumerate((0.125, 0.5, 1.0)):
        assert torch.equal(blend.after_stage(stage, factor, first.clone()), first)
    carried = {stage: blend.carried[stage].float() / 255 for stage in (0, 1)}  # 8-bit
    blend.begin([_still_motion((8, 8))])
    for stage, factor in enumerate((0.125, 0.5)):
        pulled = blend.after_stage(stage, factor, torch.full((1, 3, 8, 8), 1.0))
        beta = stage_strength(0.75, factor)
        torch.testing.assert_close(pulled, 1.0 + beta * (carried[stage][None] - 1.0))
    full = blend.after_stage(2, 1.0, torch.full((1, 3, 8, 8), 1.0))
    torch.testing.assert_close(full, torch.full((1, 3, 8, 8), 1.0))
    assert set(blend.carried) == {0, 1}  # the full-size stage is never carried


def test_motion_is_enlarged_to_a_finer_stage_with_its_vectors_scaled():
    motion = FrameMotion(np.full((10, 15, 2), 1.0, np.float32), np.ones((10, 15), np.float32))
    large = motion.at((20, 30))
    assert large.backward.shape == (20, 30, 2)
    np.testing.assert_allclose(large.backward[5:15, 5:25], 2.0, rtol=1e-6)


def test_motion_is_resized_to_a_stage_with_its_vectors_scaled():
    motion = FrameMotion(np.full((40, 60, 2), 4.0, np.float32), np.ones((40, 60), np.float32))
    small = motion.at((10, 15))
    assert small.backward.shape == (10, 15, 2)
    np.testing.assert_allclose(small.backward[..., 0], 1.0)  # 4 px x 15/60
    np.testing.assert_allclose(small.backward[..., 1], 1.0)  # 4 px x 10/40


def test_the_clip_state_round_trips_through_bytes():
    state = ClipState(16, torch.randint(0, 255, (3, 6, 8), dtype=torch.uint8))
    state.carried = {0: torch.randint(0, 255, (3, 2, 3), dtype=torch.uint8)}
    back = ClipState.from_bytes(state.to_bytes())
    assert back.frames_done == 16 and torch.equal(back.last_input, state.last_input)
    assert back.carried.keys() == {0} and torch.equal(back.carried[0], state.carried[0])


# ------------------------------------------------------------- on the tiny model
@pytest.fixture
def model(tiny_networks):
    encoder, decoders = tiny_networks
    return StyleTransfer(encoder, decoders)


def _run(model, clip, style, state: ClipState) -> tuple[torch.Tensor, ClipState]:
    """The clip through the clip loop (``stylize_clip``) from ``state``: its frames and its
    state at the end, as checkpointed."""
    chunks = (clip[start : start + CHUNK_FRAMES] for start in range(0, clip.shape[0], CHUNK_FRAMES))
    painted = list(stylize_clip(model, chunks, [style], StyleOptions(preset="realtime"), state))
    last = ClipState.from_bytes(painted[-1][1].to_bytes())
    return torch.cat([frames for frames, _ in painted]), last


def test_a_clip_resumed_from_its_saved_state_equals_an_uninterrupted_run(model):
    clip = _pan(2 * CHUNK_FRAMES + 3, 48, 64, step=2)
    style = torch.rand(1, 3, 40, 40, generator=torch.Generator().manual_seed(3))
    whole, _ = _run(model, clip, style, ClipState())
    head, state = _run(model, clip[:CHUNK_FRAMES], style, ClipState())
    tail, _ = _run(model, clip[CHUNK_FRAMES:], style, state)
    assert torch.equal(torch.cat([head, tail]), whole)


def test_frames_of_a_pan_move_with_the_content_more_than_frames_stylised_alone(
    shared_weights_dir, shared_images_dir
):
    """On the real networks and a painting (the tiny random networks paint nearly black):
    the blended clip's warping error, with the pan's exact flow, is under half that of its
    frames stylised one by one."""
    from models.images import load_image

    model = StyleTransfer.from_pretrained([shared_weights_dir])
    clip = _pan(10, 144, 256, step=3)
    style = load_image(shared_images_dir / "style" / "starry_night.jpg", max_side=256)
    ours, _ = _run(model, clip, style, ClipState())
    alone = []
    for frame in clip:
        blend = StageBlend(0.0)
        blend.begin([None])
        alone.append(
            stylize_chunk(model, frame[None], [style], StyleOptions(preset="realtime"), blend)
        )
    single = torch.cat(alone)
    backward, mask = shift_flow((144, 256), 3.0)

    def error(outputs):
        pairs = range(1, outputs.shape[0])
        return np.mean([warping_error(outputs[t - 1], outputs[t], backward, mask) for t in pairs])

    assert error(ours) < 0.5 * error(single)


def test_frames_refuse_levels_masks_and_step_controls(model):
    frames = torch.rand(2, 3, 32, 32)
    style = torch.rand(1, 3, 32, 32)
    blend = StageBlend()
    blend.begin([None, None])
    with pytest.raises(ValueError, match="levels or masks"):
        model.stylize(frames, [style], levels=["relu1_1"], blend=blend)
    with pytest.raises(ValueError, match="step control"):
        model.stylize(frames, [style], blend=blend, control=lambda done, total: None)
