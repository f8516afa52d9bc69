"""Property-based fuzzing of every operation in the OpenAPI schema (schemathesis).

Schemathesis reads the app's OpenAPI schema and, for each operation, sends its examples,
boundary values and random valid and invalid requests to a real uvicorn server, then
checks every answer: no 5xx, a documented status, a documented content type, a body
that conforms to the documented schema, and a 4xx for every schema-invalid request.
Routes join the fuzz by being in the schema. File parts are small random images of the
media types the schema's ``encoding`` names, so uploads reach the model too.

Once more against the real models (``real_models_url``): a few random valid requests an
operation, the DiT held to 2 steps and 2 images a request, so that real outputs pass
through every route within the suite's budget.

Not checked:

- that every schema-valid request succeeds (``positive_data_acceptance``): some limits
  cannot be written in the schema (an upload must be a readable image, the sampler one of
  the loaded model's, ``size`` at most ``max_side``) and answer 4xx;
- that schema-invalid multipart forms are refused (``negative_data_rejection``): form
  fields are text on the wire, so a mutated ``style_weights=245434437`` arrives as the
  valid string it spells, and FastAPI reads an empty field as absent (HTML forms'
  meaning), so ``format=`` is the default; schemathesis 4.32 cannot tell these apart
  from real misses when the form has file parts (its validator refuses their bytes).
  JSON bodies keep the check; it found that lax parsing accepted ``0`` for ``false``.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from PIL import Image
from schemathesis.checks import negative_data_rejection, positive_data_acceptance
from schemathesis.config import SchemathesisConfig
from service_fakes import Fakes, make_settings, served

from service.app import create_app
from service.images import ACCEPTED_FORMATS

API_KEY = "fuzz-key"


def image_files(
    pil_format: str, min_side: int = 16, max_side: int = 40
) -> st.SearchStrategy[bytes]:
    """Encoded images of random size (``min_side`` to ``max_side`` a side), random pixels."""

    @st.composite
    def draw_image(draw) -> bytes:
        width, height = (draw(st.integers(min_side, max_side)) for _ in range(2))
        seed = draw(st.integers(0, 2**32 - 1))
        pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=pil_format)
        return buffer.getvalue()

    return draw_image()


for _name in ACCEPTED_FORMATS:
    schemathesis.openapi.media_type(f"image/{_name.lower()}", image_files(_name))

# The schema alone: building the app loads nothing (models load when it starts serving).
OPENAPI = create_app(make_settings(), model_entries=Fakes().entries()).openapi()
SCHEMA = schemathesis.openapi.from_dict(OPENAPI)
#: For the real models: random valid requests only (invalid ones never reach a model, and
#: the boundary tour of the coverage phase sends ~200 requests per JSON route).
RANDOM_VALID_ONLY = SchemathesisConfig.from_dict(
    {
        "generation": {"mode": "positive"},
        "phases": {"coverage": {"enabled": False}, "examples": {"enabled": False}},
    }
)
REAL_SCHEMA = schemathesis.openapi.from_dict(OPENAPI, config=RANDOM_VALID_ONLY)
#: The most the real models do for one request of the fuzz: DiT steps and images, and
#: the stylize size (``max_side`` of ``real_models_url``, which the schema cannot say).
REAL_STEPS, REAL_IMAGES, REAL_SIDE = 2, 2, 64


def held_to_budget(case) -> None:
    """Hold a request to the real models' budget: at most ``REAL_STEPS`` steps (also when
    the model's default would apply) and ``REAL_IMAGES`` images to generate, a stylize
    ``size`` of at most ``REAL_SIDE`` (also in place of the default 512)."""

    def at_most(value, limit):  # ints and integral floats (5.0 is an integer too)
        return min(value, limit) if type(value) in (int, float) else value

    body = case.body
    if not isinstance(body, dict):
        return
    if case.operation.path == "/v1/stylize":
        body["size"] = at_most(body.get("size", REAL_SIDE), REAL_SIDE)
    if "prompt" in body:  # a generate body, either spelling
        body["steps"] = at_most(body.get("steps") or REAL_STEPS, REAL_STEPS)
        for count in ("num_images", "n"):
            if count in body:
                body[count] = at_most(body[count], REAL_IMAGES)


def excluded_checks(case) -> list:
    """The checks that cannot hold here (see the module docstring)."""
    if case.media_type == "multipart/form-data":
        return [positive_data_acceptance, negative_data_rejection]
    return [positive_data_acceptance]


def files_as_arrays(case) -> None:
    """Send a single file drawn for an array-of-files part as the array the schema says.

    Schemathesis draws one value for a part that has a media-type strategy, even when the
    part is an array; sent as is it would lose its filename and read as a text field.
    """
    if not isinstance(case.body, dict) or case.media_type != "multipart/form-data":
        return
    properties = case.operation.get_body_for_media_type(case.media_type).form_properties
    for name, value in case.body.items():
        if isinstance(value, bytes) and properties.get(name, {}).get("type") == "array":
            case.body[name] = [value]


@pytest.fixture(scope="module")
def fake_url():
    app = create_app(make_settings(api_key=API_KEY), model_entries=Fakes().entries())
    with served(app) as url:
        yield url


@SCHEMA.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_fake_models_answer_every_request_as_documented(case, fake_url):
    files_as_arrays(case)
    case.call_and_validate(
        base_url=fake_url,
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=30,
        excluded_checks=excluded_checks(case),
    )


@pytest.mark.weights
@pytest.mark.slow
@pytest.mark.timeout(300)
@REAL_SCHEMA.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_real_models_answer_every_request_as_documented(case, real_models_url):
    files_as_arrays(case)
    held_to_budget(case)
    case.call_and_validate(
        base_url=real_models_url, timeout=120, excluded_checks=excluded_checks(case)
    )
