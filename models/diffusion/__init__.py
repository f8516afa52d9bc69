"""Diffusion maths as pure functions: the noise process, samplers, guidance, the loss.

Nothing here knows the network: a sampler takes ``model(x, t, cond) -> eps``.
"""

from models.diffusion.guidance import Regions, classifier_free_guidance, regional_denoiser
from models.diffusion.losses import diffusion_loss
from models.diffusion.process import (
    PREDICTIONS,
    add_noise,
    cosine_schedule,
    epsilon_model,
    get_schedule,
    linear_schedule,
    prediction_target,
    sampling_timesteps,
    to_epsilon,
    to_x0,
)
from models.diffusion.random import (
    MAX_SEED,
    consecutive_seeds,
    generators_from_seeds,
    randn,
    random_seed,
)
from models.diffusion.samplers import SAMPLERS, ddim, ddpm, dpm_solver_pp_2m, get_sampler

__all__ = [
    "MAX_SEED",
    "PREDICTIONS",
    "Regions",
    "SAMPLERS",
    "add_noise",
    "classifier_free_guidance",
    "consecutive_seeds",
    "cosine_schedule",
    "ddim",
    "ddpm",
    "dpm_solver_pp_2m",
    "diffusion_loss",
    "epsilon_model",
    "prediction_target",
    "to_epsilon",
    "to_x0",
    "generators_from_seeds",
    "get_sampler",
    "get_schedule",
    "linear_schedule",
    "random_seed",
    "randn",
    "regional_denoiser",
    "sampling_timesteps",
]
