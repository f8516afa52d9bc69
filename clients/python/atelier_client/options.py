"""The options a request may carry, written once, and how they go on the wire.

:class:`StylizeOptions` are the form fields of ``POST /v1/stylize`` besides the uploads
(``content``, ``style``, ``mask``); :class:`GenerateOptions` the JSON fields of ``POST
/v1/generate`` besides ``prompt``. ``tests/clients`` compares both with the server's
OpenAPI (names, and the choices of the ``Literal`` fields), so a field the server grows
that this client cannot send fails a test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict, get_args

Preset = Literal["quality", "realtime"]
ImageFormat = Literal["png", "jpeg", "webp"]
WebhookEvent = Literal["completed", "progress"]


class StylizeOptions(TypedDict, total=False):
    """Stylisation options (all optional; the server's defaults otherwise).

    ``style_weights``: one weight per painting (normalised to sum 1 by the server);
    ``alpha``: style strength in [0, 1]; ``preserve_color``: keep the photo's colours;
    ``size``: the output's longer side in px (above the server's ``print_size_above`` a
    print, painted at the photo's own resolution, as a job); ``format``/``quality``: the
    result's encoding; ``preset``: ``quality`` or ``realtime``; ``style_scale``: the
    size of the painting's strokes (0.25-2); ``webhook``/``webhook_events``: a URL the
    finished job is POSTed to, signed; ``previews``: ``preview`` events while it runs.
    """

    style_weights: Sequence[float]
    alpha: float
    preserve_color: bool
    size: int
    format: ImageFormat
    quality: int
    preset: Preset
    style_scale: float
    webhook: str
    webhook_events: Sequence[WebhookEvent]
    previews: bool


class GenerateOptions(TypedDict, total=False):
    """Text-to-image options (all optional; the model's defaults otherwise).

    ``num_images``: 1-8; ``seed``: image i uses ``seed + i``; ``steps``, ``guidance_scale``,
    ``sampler``: the diffusion sampler's; ``negative_prompt``; ``plan_layout``: draw
    each object of a caption in its own grid cell; ``webhook``/``webhook_events``,
    ``previews``: as for stylize.
    """

    negative_prompt: str
    num_images: int
    steps: int
    guidance_scale: float
    seed: int
    sampler: str
    plan_layout: bool
    webhook: str
    webhook_events: Sequence[WebhookEvent]
    previews: bool


#: The uploads of ``POST /v1/stylize`` (not options).
STYLIZE_UPLOADS = ("content", "style", "mask")
STYLIZE_FIELDS: frozenset[str] = frozenset(StylizeOptions.__annotations__)
GENERATE_FIELDS: frozenset[str] = frozenset(GenerateOptions.__annotations__)
#: The choices of each ``Literal`` option, by field name.
CHOICES: dict[str, tuple[str, ...]] = {
    "preset": get_args(Preset),
    "format": get_args(ImageFormat),
    "webhook_events": get_args(WebhookEvent),
}


def _unknown(given: Mapping[str, object], known: frozenset[str], route: str) -> None:
    extra = sorted(set(given) - known)
    if extra:
        raise TypeError(f"{route}: unknown option(s) {extra}; known: {sorted(known)}")


def _number(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return repr(value) if isinstance(value, float) else str(value)


def stylize_form(options: Mapping[str, Any]) -> dict[str, str]:
    """Form fields of ``POST /v1/stylize`` for ``options``: numbers as text, booleans as
    ``true``/``false``, lists comma-separated.

    Raises:
        TypeError: an option this client does not know, or a value of the wrong type.
    """
    _unknown(options, STYLIZE_FIELDS, "stylize")
    form: dict[str, str] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name in CHOICES and name != "webhook_events" and value not in CHOICES[name]:
            raise ValueError(f"{name}: one of {list(CHOICES[name])}, got {value!r}")
        if isinstance(value, bool):
            form[name] = "true" if value else "false"
        elif name == "style_weights":
            form[name] = ",".join(_number(weight) for weight in value)
        elif name == "webhook_events":
            form[name] = ",".join(value)
        elif isinstance(value, int | float):
            form[name] = _number(value)
        else:
            form[name] = str(value)
    return form


def generate_body(prompt: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body of ``POST /v1/generate``.

    Raises:
        TypeError: an option this client does not know.
    """
    _unknown(options, GENERATE_FIELDS, "generate")
    body: dict[str, Any] = {"prompt": prompt}
    for name, value in options.items():
        if value is None:
            continue
        body[name] = list(value) if name == "webhook_events" else value
    return body
