"""``POST /v1/images/generations`` driven by the real ``openai`` SDK against uvicorn.

The server runs the fake models in a thread (``service_fakes``): the tests check what
the SDK sends, what reaches the model and what the SDK makes of the answers and of the
errors, not the model.
"""

from __future__ import annotations

import base64
import io
import time

import httpx
import numpy as np
import openai
import pytest
from PIL import Image
from service_fakes import Fakes, FakeTextToImage, make_settings, served

from service.app import create_app
from service.routes.openai_images import IGNORED_FIELDS

API_KEY = "test-key"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture(scope="module")
def base_url(fakes):
    app = create_app(make_settings(api_key=API_KEY), model_entries=fakes.entries())
    with served(app) as url:
        yield url


def _sdk(base_url: str, api_key: str = API_KEY) -> openai.OpenAI:
    # No retries: a 429 or 5xx must surface as the SDK's exception, at once.
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def sdk(base_url) -> openai.OpenAI:
    return _sdk(base_url)


def _pixels(b64: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


def test_one_image_follows_its_seed(sdk, fakes):
    before = int(time.time())
    result = sdk.images.generate(prompt="a red circle", extra_body={"seed": 41})
    assert before <= result.created <= int(time.time())
    assert len(result.data) == 1
    assert result.data[0].url is None
    np.testing.assert_array_equal(_pixels(result.data[0].b64_json), FakeTextToImage.pixels(41))
    assert fakes.dit["cpu"].calls[-1]["prompts"] == ["a red circle"]


def test_revised_prompt_is_the_prompt_as_understood(sdk):
    result = sdk.images.generate(prompt="A HUGE red circle, and five", extra_body={"seed": 1})
    assert result.data[0].revised_prompt == "a large red circle"
    result = sdk.images.generate(prompt="big and blue", extra_body={"seed": 1})
    assert result.data[0].revised_prompt is None  # nothing understood: drawn as typed


def test_n_images_use_consecutive_seeds(sdk):
    result = sdk.images.generate(prompt="a cat", n=3, extra_body={"seed": 5})
    assert len(result.data) == 3
    for image, seed in zip(result.data, (5, 6, 7), strict=True):
        np.testing.assert_array_equal(_pixels(image.b64_json), FakeTextToImage.pixels(seed))


def test_a_seed_reproduces_the_bytes_of_v1_generate(sdk, base_url):
    first = sdk.images.generate(prompt="a boat", n=2, extra_body={"seed": 7})
    again = sdk.images.generate(prompt="a boat", n=2, extra_body={"seed": 7})
    other = sdk.images.generate(prompt="a boat", n=2, extra_body={"seed": 8})
    b64s = [image.b64_json for image in first.data]
    assert [image.b64_json for image in again.data] == b64s
    assert [image.b64_json for image in other.data] != b64s
    native = httpx.post(
        f"{base_url}/v1/generate",
        json={"prompt": "a boat", "num_images": 2, "seed": 7},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert native.json()["images"] == b64s


def test_atelier_fields_reach_the_model(sdk, fakes):
    extra = {
        "seed": 3,
        "steps": 6,
        "guidance_scale": 1.5,
        "negative_prompt": "blurry",
        "sampler": "ddpm",
        "plan_layout": False,
    }
    sdk.images.generate(
        prompt="a dog",
        size="8x8",
        response_format="b64_json",
        output_format="png",
        extra_body=extra,
    )
    assert fakes.dit["cpu"].calls[-1] == {
        "prompts": ["a dog"],
        "negative_prompts": ["blurry"],
        "steps": 6,
        "guidance_scale": 1.5,
        "seeds": [3],
        "sampler": "ddpm",
        "plan_layout": False,
    }


def test_openai_only_fields_are_ignored(sdk, fakes):
    # One value of OpenAI's own for each field the route accepts and ignores.
    openai_only = {
        "model": "dall-e-3",
        "quality": "hd",
        "style": "vivid",
        "user": "someone",
        "background": "opaque",
        "moderation": "low",
        "output_compression": 80,
        "partial_images": 0,
        "complexity": "low",
        "safety_identifier": "abc",
    }
    assert set(openai_only) == set(IGNORED_FIELDS)
    plain = sdk.images.generate(prompt="a tree", extra_body={"seed": 9})
    plain_call = fakes.dit["cpu"].calls[-1]
    dressed = sdk.images.generate(
        prompt="a tree", size="auto", **openai_only, extra_body={"seed": 9}
    )
    assert fakes.dit["cpu"].calls[-1] == plain_call
    assert dressed.data[0].b64_json == plain.data[0].b64_json


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        ({"size": "1024x1024x"}, "size", "auto"),
        ({"size": "1024x512"}, "size", "8x8"),
        ({"size": "100x100"}, "size", "multiple of 8"),
        ({"size": "2048x2048"}, "size", "up to 1024"),
        ({"response_format": "url"}, "response_format", "b64_json"),
        ({"n": 9}, "n", "less than or equal to 8"),
        ({"output_format": "jpeg"}, "output_format", "png"),
        ({"stream": True}, "stream", "not supported"),
        ({"extra_body": {"steps": 0}}, "steps", "greater than or equal to 1"),
        ({"extra_body": {"num_images": 2}}, "num_images", "Extra inputs"),
    ],
)
def test_invalid_fields_raise_bad_request_naming_the_field(sdk, kwargs, param, words):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.images.generate(prompt="a cat", **kwargs)
    error = caught.value
    assert error.status_code == 400
    assert (error.type, error.param) == ("invalid_request_error", param)
    assert error.code in ("validation_error", "invalid_parameter")
    assert words in error.message and param in error.message


@pytest.mark.parametrize("side", [16, 256])
def test_a_bigger_square_is_the_native_drawing_enlarged(sdk, side):
    """The answer at ``side`` px is the native drawing resampled by Lanczos (nothing
    else done to it), says so in a header and in its PNG text, and keeps the text that
    says how it was made."""
    raw = sdk.images.with_raw_response.generate(
        prompt="a red circle", size=f"{side}x{side}", extra_body={"seed": 5}
    )
    native = sdk.images.generate(prompt="a red circle", extra_body={"seed": 5})
    assert raw.headers["X-Atelier-Upscaled-From"] == "8x8"
    with Image.open(io.BytesIO(base64.b64decode(raw.parse().data[0].b64_json))) as enlarged:
        text = dict(enlarged.text)
        pixels = np.asarray(enlarged.convert("RGB"))
    with Image.open(io.BytesIO(base64.b64decode(native.data[0].b64_json))) as drawn:
        assert text == {**drawn.text, "upscaled_from": "8x8"}
        expected = drawn.convert("RGB").resize((side, side), Image.Resampling.LANCZOS)
    assert pixels.shape == (side, side, 3)
    np.testing.assert_array_equal(pixels, np.asarray(expected))


def test_the_native_size_is_not_resampled(sdk):
    raw = sdk.images.with_raw_response.generate(
        prompt="a red circle", size="8x8", extra_body={"seed": 5}
    )
    plain = sdk.images.generate(prompt="a red circle", extra_body={"seed": 5})
    assert "X-Atelier-Upscaled-From" not in raw.headers
    assert raw.parse().data[0].b64_json == plain.data[0].b64_json


def test_wrong_key_raises_authentication_error(base_url):
    """The key is checked before the body is read, ahead of routing, so the answer has the
    service-wide envelope (no OpenAI ``type``); the client still reads its code."""
    with pytest.raises(openai.AuthenticationError) as caught:
        _sdk(base_url, api_key="wrong").images.generate(prompt="a cat")
    error = caught.value
    assert (error.status_code, error.code) == (401, "unauthorized")
    assert error.response.headers["WWW-Authenticate"] == "Bearer"


def test_missing_model_raises_server_error(client_factory):
    client = client_factory(load_models="adain")
    response = client.post("/v1/images/generations", json={"prompt": "a cat"})
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "server_error"
    assert response.json()["error"]["code"] == "model_not_loaded"


def test_only_this_route_answers_in_openai_envelope(base_url):
    headers = {"Authorization": f"Bearer {API_KEY}"}
    ours = httpx.post(f"{base_url}/v1/generate", json={"prompt": "a", "n": 2}, headers=headers)
    theirs = httpx.post(f"{base_url}/v1/images/generations", json={"prompt": ""}, headers=headers)
    assert ours.status_code == 422 and set(ours.json()["error"]) == {"code", "message"}
    assert theirs.status_code == 400
    assert set(theirs.json()["error"]) == {"message", "type", "param", "code"}
    assert theirs.json()["error"]["param"] == "prompt"


def test_invalid_json_has_no_param(base_url):
    response = httpx.post(
        f"{base_url}/v1/images/generations",
        content=b"not json",
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] is None


@pytest.mark.weights
@pytest.mark.timeout(300)
def test_real_dit_through_the_sdk_matches_v1_generate(real_models_url):
    sdk = openai.OpenAI(base_url=f"{real_models_url}/v1", api_key="unused", max_retries=0)
    extra = {"seed": 11, "steps": 2}
    result = sdk.images.generate(prompt="a red circle", n=2, size="32x32", extra_body=extra)
    native = httpx.post(
        f"{real_models_url}/v1/generate",
        json={"prompt": "a red circle", "num_images": 2, **extra},
        timeout=120,
    )
    assert [image.b64_json for image in result.data] == native.json()["images"]
    assert [_pixels(image.b64_json).shape for image in result.data] == [(32, 32, 3)] * 2
    with pytest.raises(openai.BadRequestError, match="32x32"):
        sdk.images.generate(prompt="a red circle", size="1536x1024")
