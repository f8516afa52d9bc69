"""Diffusion maths: schedules, samplers on Gaussian data (closed-form denoiser), guidance."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.diffusion import (
    classifier_free_guidance,
    cosine_schedule,
    ddim,
    ddpm,
    diffusion_loss,
    dpm_solver_pp_2m,
    epsilon_model,
    generators_from_seeds,
    get_sampler,
    get_schedule,
    linear_schedule,
    prediction_target,
    randn,
    sampling_timesteps,
    to_epsilon,
)

T = 1000
MU, STD = 0.7, 0.5  # toy data x0 ~ N(MU, STD^2 I)


def gaussian_denoiser(alpha_bar: torch.Tensor, mu: float = MU, std: float = STD):
    """The optimal eps-predictor for x0 ~ N(mu, std^2 I): E[eps | x_t], in closed form.

    x_t = a x0 + s eps is Gaussian with mean a mu and variance a^2 std^2 + s^2, and
    Cov(eps, x_t) = s, so E[eps | x_t] = s (x_t - a mu) / (a^2 std^2 + s^2).
    """

    def model(x, t, cond):
        ab = alpha_bar[t].to(x.dtype).view(-1, *([1] * (x.dim() - 1)))
        a, s = ab.sqrt(), (1 - ab).sqrt()
        return s * (x - a * mu) / (a**2 * std**2 + s**2)

    return model


def marginal_std(alpha_bar_t: float, std: float = STD) -> float:
    return math.sqrt(alpha_bar_t * std**2 + 1 - alpha_bar_t)


def start_noise(alpha_bar, n, dim, seed=0):
    """x_T drawn from the exact marginal at the first grid timestep (float64)."""
    ab = float(alpha_bar[T - 1])
    z = torch.randn(n, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return math.sqrt(ab) * MU + marginal_std(ab) * z, z


# ------------------------------------------------------------------ schedules
@pytest.mark.parametrize("schedule", [cosine_schedule, linear_schedule])
def test_schedule_is_decreasing_in_unit_interval(schedule):
    alpha_bar = schedule(T)
    assert alpha_bar.shape == (T,) and alpha_bar.dtype == torch.float64
    assert torch.all(alpha_bar[1:] < alpha_bar[:-1])
    assert 0 < alpha_bar[-1] < 1e-3 and 0.99 < alpha_bar[0] < 1


def test_cosine_schedule_matches_its_formula_where_unclipped():
    # alpha_bar_t = f(t + 1) / f(0) with f(t) = cos^2(((t / T) + s) / (1 + s) * pi / 2)
    def f(t):
        return math.cos((t / T + 0.008) / 1.008 * math.pi / 2) ** 2

    alpha_bar = cosine_schedule(T)
    for t in (0, 10, 250, 500, 900):
        assert alpha_bar[t].item() == pytest.approx(f(t + 1) / f(0), rel=1e-9)


def test_linear_schedule_matches_cumulative_product():
    betas = [1e-4 + (0.02 - 1e-4) * i / (T - 1) for i in range(T)]
    expected = math.prod(1 - b for b in betas[:300])
    assert linear_schedule(T)[299].item() == pytest.approx(expected, rel=1e-9)


def test_get_schedule_rejects_unknown_names():
    with pytest.raises(ValueError, match="cosine"):
        get_schedule("quadratic", T)


@given(steps=st.integers(1, T))
@settings(max_examples=30, deadline=None)
def test_sampling_timesteps_descend_from_last_to_zero(steps):
    grid = sampling_timesteps(T, steps)
    assert len(grid) == steps and grid[0] == T - 1
    assert all(b < a for a, b in zip(grid, grid[1:], strict=False))
    if steps > 1:
        assert grid[-1] == 0


@pytest.mark.parametrize("steps", [0, T + 1])
def test_sampling_timesteps_rejects_bad_counts(steps):
    with pytest.raises(ValueError, match="steps"):
        sampling_timesteps(T, steps)


# ------------------------------------------------------------------ samplers
def test_ddim_step_is_its_definition():
    """One DDIM step (eta = 0) from t to s, computed by hand in float64."""
    alpha_bar = cosine_schedule(T)
    model = gaussian_denoiser(alpha_bar)
    x = torch.randn(3, 4, dtype=torch.float64)
    out = ddim(model, x, None, alpha_bar, steps=1)
    # steps=1: a single jump from t = T - 1 straight to clean data, x0_hat itself.
    ab = alpha_bar[T - 1]
    eps = model(x, torch.full((3,), T - 1), None)
    torch.testing.assert_close(out, (x - (1 - ab).sqrt() * eps) / ab.sqrt())


def test_ddim_walks_its_grid_by_the_definition():
    """Several DDIM steps against the update written out in float64 over the grid:
    ``x_s = sqrt(ab_s) x0_hat + sqrt(1 - ab_s) eps_hat``, ending in ``x0_hat``."""
    alpha_bar = cosine_schedule(T)
    model = gaussian_denoiser(alpha_bar)
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    steps = 4
    out = ddim(model, x, None, alpha_bar, steps=steps)
    grid = sampling_timesteps(T, steps)
    expected = x.clone()
    for i, t in enumerate(grid):
        ab_t = float(alpha_bar[t])
        ab_s = float(alpha_bar[grid[i + 1]]) if i + 1 < len(grid) else 1.0
        eps = model(expected, torch.full((3,), t), None)
        x0 = (expected - math.sqrt(1 - ab_t) * eps) / math.sqrt(ab_t)
        expected = math.sqrt(ab_s) * x0 + math.sqrt(1 - ab_s) * eps
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_ddim_draws_no_noise():
    alpha_bar = cosine_schedule(T)
    model = gaussian_denoiser(alpha_bar)
    x, _ = start_noise(alpha_bar, 8, 3)
    runs = [
        ddim(model, x, None, alpha_bar, steps=10, generator=torch.Generator().manual_seed(seed))
        for seed in (1, 2)
    ]
    assert torch.equal(runs[0], runs[1])


def test_ddpm_matches_data_moments():
    alpha_bar = cosine_schedule(T)
    x, _ = start_noise(alpha_bar, 4000, 4)
    samples = ddpm(
        gaussian_denoiser(alpha_bar),
        x,
        None,
        alpha_bar,
        steps=250,
        generator=torch.Generator().manual_seed(2),
    )
    n = samples.numel()
    assert samples.mean().item() == pytest.approx(MU, abs=4 * STD / math.sqrt(n))
    assert samples.std().item() == pytest.approx(STD, rel=0.03)


def probability_flow_solution(z):
    """The PF-ODE maps the standardised x_T to the standardised x_0: x_0 = MU + STD z."""
    return MU + STD * z


@pytest.mark.parametrize("sampler,steps", [(ddim, 500), (dpm_solver_pp_2m, 200)])
def test_deterministic_samplers_follow_the_probability_flow_ode(sampler, steps):
    alpha_bar = cosine_schedule(T)
    x, z = start_noise(alpha_bar, 256, 2)
    out = sampler(gaussian_denoiser(alpha_bar), x, None, alpha_bar, steps=steps)
    assert (out - probability_flow_solution(z)).abs().max().item() < 1e-2


def _pf_error(sampler, steps):
    alpha_bar = cosine_schedule(T)
    x, z = start_noise(alpha_bar, 256, 2)
    out = sampler(gaussian_denoiser(alpha_bar), x, None, alpha_bar, steps=steps)
    return (out - probability_flow_solution(z)).abs().max().item()


def test_dpm_solver_converges_at_second_order_and_ddim_at_first():
    """Doubling the steps divides the error by ~4 for the 2M solver and ~2 for DDIM."""
    dpm_ratio = _pf_error(dpm_solver_pp_2m, 100) / _pf_error(dpm_solver_pp_2m, 200)
    ddim_ratio = _pf_error(ddim, 100) / _pf_error(ddim, 200)
    assert dpm_ratio > 3.0
    assert 1.5 < ddim_ratio < 2.5
    assert _pf_error(dpm_solver_pp_2m, 100) < _pf_error(ddim, 100)


@pytest.mark.parametrize("name", ["ddpm", "ddim", "dpm++2m"])
def test_samplers_call_the_model_once_per_step_and_clip(name):
    calls = []

    def model(x, t, cond):
        calls.append((t.clone(), cond))
        return -5 * torch.ones_like(x)  # huge x0_hat, clipped to 1

    alpha_bar = cosine_schedule(T)
    out = get_sampler(name)(
        model,
        torch.zeros(2, 3),
        "c",
        alpha_bar,
        steps=7,
        clip_denoised=True,
        generator=torch.Generator().manual_seed(0),
    )
    assert len(calls) == 7 and all(cond == "c" for _, cond in calls)
    assert [int(t[0]) for t, _ in calls] == sampling_timesteps(T, 7)
    assert out.max() <= 1.0 + 1e-6


def test_unknown_sampler_lists_the_names():
    with pytest.raises(ValueError, match="dpm\\+\\+2m"):
        get_sampler("euler")


# ------------------------------------------------------------------ noise and guidance
def test_per_item_generators_make_each_row_independent_of_the_batch():
    batch = randn((3, 5), generators_from_seeds([7, 8, 9]))
    alone = randn((1, 5), generators_from_seeds([8]))
    torch.testing.assert_close(batch[1:2], alone, rtol=0, atol=0)
    assert not torch.equal(batch[0], batch[1])


def test_randn_rejects_a_generator_count_mismatch():
    with pytest.raises(ValueError, match="generators"):
        randn((3, 5), generators_from_seeds([1, 2]))


def _conditional_model(x, t, cond):
    return x * cond


def _conditions(batch: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """A per-row conditional (2) and unconditional (-3) condition, ``(B, 1)`` each."""
    return torch.full((batch, 1), 2.0, dtype=dtype), torch.full((batch, 1), -3.0, dtype=dtype)


def test_guidance_scale_one_is_the_conditional_prediction():
    calls = []

    def model(x, t, cond):
        calls.append(cond)
        return _conditional_model(x, t, cond)

    x, t = torch.randn(2, 3), torch.zeros(2, dtype=torch.long)
    cond = _conditions(2)
    out = classifier_free_guidance(model, 1.0)(x, t, cond)
    torch.testing.assert_close(out, x * 2.0)
    assert len(calls) == 1 and calls[0] is cond[0]  # the unconditional branch is not run


@given(scale=st.floats(0.0, 10.0))
@settings(max_examples=25, deadline=None)
def test_guidance_extrapolates_from_unconditional_to_conditional(scale):
    x, t = torch.randn(2, 3, dtype=torch.float64), torch.zeros(2, dtype=torch.long)
    out = classifier_free_guidance(_conditional_model, scale)(x, t, _conditions(2, torch.float64))
    torch.testing.assert_close(out, -3.0 * x + scale * (2.0 * x - -3.0 * x))


def test_guidance_runs_both_branches_as_one_forward_of_twice_the_rows():
    calls = []

    def model(x, t, cond):
        calls.append((x.shape[0], t.tolist()))
        return _conditional_model(x, t, cond)

    x, t = torch.randn(3, 4), torch.tensor([5, 6, 7])
    classifier_free_guidance(model, 4.0)(x, t, _conditions(3))
    assert calls == [(6, [5, 6, 7, 5, 6, 7])]


# ------------------------------------------------------------------ parameterization
@given(ab=st.floats(1e-6, 1 - 1e-6))
@settings(max_examples=30, deadline=None)
def test_v_target_converts_back_to_the_noise(ab):
    x0 = torch.randn(4, 3, dtype=torch.float64)
    noise = torch.randn(4, 3, dtype=torch.float64)
    alpha_bar_t = torch.full((4,), ab, dtype=torch.float64)
    x_t = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * noise
    v = prediction_target(x0, noise, alpha_bar_t, "v")
    torch.testing.assert_close(v, math.sqrt(ab) * noise - math.sqrt(1 - ab) * x0)
    torch.testing.assert_close(to_epsilon(v, x_t, alpha_bar_t, "v"), noise)
    torch.testing.assert_close(prediction_target(x0, noise, alpha_bar_t, "epsilon"), noise)


def test_v_model_samples_like_the_epsilon_model():
    """A v-network built from the closed-form eps gives the same DDIM trajectory."""
    alpha_bar = cosine_schedule(T)
    eps_model = gaussian_denoiser(alpha_bar)

    def v_model(x, t, cond):  # v = (eps - s x_t) / a, from eps = s x_t + a v
        ab = alpha_bar[t].view(-1, 1)
        return (eps_model(x, t, cond) - (1 - ab).sqrt() * x) / ab.sqrt()

    x, _ = start_noise(alpha_bar, 32, 2)
    expected = ddim(eps_model, x, None, alpha_bar, steps=20)
    got = ddim(epsilon_model(v_model, alpha_bar, "v"), x, None, alpha_bar, steps=20)
    torch.testing.assert_close(got, expected)
    assert epsilon_model(eps_model, alpha_bar, "epsilon") is eps_model


def test_unknown_prediction_is_rejected():
    with pytest.raises(ValueError, match="prediction"):
        to_epsilon(torch.zeros(1), torch.zeros(1), torch.ones(1), "x0")


def test_diffusion_loss_is_the_mse_to_the_target():
    x0 = torch.randn(6, 3)
    alpha_bar = cosine_schedule(T)

    def zero_model(x, t, cond):
        return torch.zeros_like(x)

    for prediction in ("epsilon", "v"):
        loss = diffusion_loss(
            zero_model,
            x0,
            None,
            alpha_bar,
            prediction=prediction,
            generator=torch.Generator().manual_seed(3),
        )
        generator = torch.Generator().manual_seed(3)  # replay the draws
        t = torch.randint(0, T, (6,), generator=generator)
        noise = torch.randn(x0.shape, generator=generator)
        target = prediction_target(x0, noise, alpha_bar[t], prediction)
        torch.testing.assert_close(loss, target.pow(2).mean())


def test_min_snr_weights_the_clean_image_error_by_min_snr_gamma():
    """Whatever the target, the weighted loss of a fixed error in x0 is min(SNR, gamma)
    times that error: the three parameterizations agree once weighted."""
    from models.diffusion.losses import loss_weights

    alpha_bar = cosine_schedule(T).double()
    snr = alpha_bar / (1 - alpha_bar)
    x0_weight = snr.clamp(max=5.0)
    # |eps err|^2 = SNR |x0 err|^2 and |v err|^2 = (SNR + 1) |x0 err|^2
    eps = loss_weights(alpha_bar, "epsilon", "min-snr", gamma=5.0).double() * snr
    v = loss_weights(alpha_bar, "v", "min-snr", gamma=5.0).double() * (snr + 1)
    torch.testing.assert_close(eps, x0_weight, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(v, x0_weight, rtol=1e-6, atol=1e-9)
    assert torch.equal(loss_weights(alpha_bar, "v"), torch.ones(T))
    with pytest.raises(ValueError, match="weighting"):
        loss_weights(alpha_bar, "v", "p2")
    with pytest.raises(ValueError, match="gamma"):
        loss_weights(alpha_bar, "v", "min-snr", gamma=0.0)


def test_weighted_loss_is_the_weighted_mean_of_per_item_errors():
    from models.diffusion.losses import loss_weights

    x0 = torch.randn(6, 3)
    alpha_bar = cosine_schedule(T)

    def zero_model(x, t, cond):
        return torch.zeros_like(x)

    loss = diffusion_loss(
        zero_model,
        x0,
        None,
        alpha_bar,
        prediction="v",
        generator=torch.Generator().manual_seed(5),
        weighting="min-snr",
    )
    generator = torch.Generator().manual_seed(5)  # replay the draws
    t = torch.randint(0, T, (6,), generator=generator)
    noise = torch.randn(x0.shape, generator=generator)
    target = prediction_target(x0, noise, alpha_bar[t], "v")
    weights = loss_weights(alpha_bar[t], "v", "min-snr")
    torch.testing.assert_close(loss, (weights * target.pow(2).mean(dim=1)).mean())


# ------------------------------------------------------------------ rows and devices
def test_concat_rows_is_the_inverse_of_take_rows():
    from models.control import concat_rows, take_rows
    from models.text_encoder import TextCondition

    a = TextCondition(torch.randn(2, 4), torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool))
    b = TextCondition(torch.randn(1, 4), torch.randn(1, 5, 4), torch.ones(1, 5, dtype=torch.bool))
    both = concat_rows([a, b])
    assert isinstance(both, TextCondition) and both.tokens.shape == (3, 5, 4)
    # the shorter rows are padded with zeros the mask hides
    assert torch.equal(take_rows(both, torch.tensor([0, 1])).tokens[:, :3], a.tokens)
    assert not both.mask[:2, 3:].any() and torch.equal(both.tokens[:2, 3:], torch.zeros(2, 2, 4))
    assert torch.equal(take_rows(both, torch.tensor([2])).tokens, b.tokens)
    pair = concat_rows([(torch.zeros(2, 1), torch.ones(2)), (torch.ones(1, 1), torch.zeros(1))])
    assert pair[0].shape == (3, 1) and pair[1].tolist() == [1.0, 1.0, 0.0]
    with pytest.raises(TypeError, match="float"):
        concat_rows([2.0, -3.0])


def test_generators_live_on_the_device_asked_for_and_draw_there():
    from models.diffusion.random import generators_from_seeds, randn

    generators = generators_from_seeds([1, 2], "cpu")
    assert all(g.device.type == "cpu" for g in generators)
    # devices without generators of their own get CPU ones, whose noise is copied over
    assert all(g.device.type == "cpu" for g in generators_from_seeds([1], "meta"))
    noise = randn((1, 3), generators_from_seeds([7], "meta"), device="meta")
    assert noise.device.type == "meta" and noise.shape == (1, 3)


def test_the_schedule_is_copied_to_a_device_once():
    from models.diffusion.process import ScheduleOnDevice

    alpha_bar = get_schedule("cosine", 10)
    schedule = ScheduleOnDevice(alpha_bar)
    assert schedule(torch.device("cpu")) is alpha_bar
    first = schedule(torch.device("meta"))
    assert first.device.type == "meta" and schedule(torch.device("meta")) is first
