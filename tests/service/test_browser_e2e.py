"""The web page at ``/`` driven in headless Chromium against a real uvicorn server.

The server runs in a thread with the fake models (see ``service_fakes``), so the test
checks the page and the HTTP path, not the model. Skipped when Debian's ``chromium``
or ``chromium-driver`` is not installed.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import threading
import urllib.request

import corpus
import pytest
from PIL import Image
from service_fakes import FAKE_BAND_ROWS, Fakes, make_settings, served

from models.adain.presets import get_preset
from service.app import create_app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
        reason="needs Debian packages chromium and chromium-driver",
    ),
]


@pytest.fixture(scope="module")
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture(scope="module")
def server_url(fakes):
    app = create_app(make_settings(), model_entries=fakes.entries())
    with served(app) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _wait_for(driver, condition, timeout=30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_stylize_from_the_page(browser, server_url, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(server_url + "/")
    content = _write(tmp_path, "photo.png", corpus.solid_png((200, 40, 10), 40, 24))
    styles = [
        _write(tmp_path, "red.png", corpus.solid_png((255, 0, 0))),
        _write(tmp_path, "blue.png", corpus.solid_png((0, 0, 255))),
    ]
    browser.find_element(By.ID, "content").send_keys(content)
    browser.find_element(By.ID, "styles").send_keys("\n".join(styles))
    slider = browser.find_element(By.ID, "alpha")
    browser.execute_script(
        "arguments[0].value = '0.5'; arguments[0].dispatchEvent(new Event('input'));", slider
    )
    assert browser.find_element(By.ID, "alpha-value").text == "0.50"
    browser.find_element(By.ID, "stylize-button").click()
    _wait_for(browser, lambda d: d.find_element(By.ID, "stylize-status").text == "Done.")
    result = browser.find_element(By.ID, "stylize-result")
    assert result.is_displayed()
    bar = browser.find_element(By.ID, "stylize-progress")  # every pass of the quality preset
    passes = str(get_preset("quality").passes)
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == (passes, passes)
    width = browser.execute_script("return arguments[0].naturalWidth;", result)
    assert width == 40
    # Read the pixels the page shows: alpha 0.5 between the photo and the styles' mean.
    data_url = browser.execute_script(
        """
        const img = arguments[0];
        const canvas = document.createElement('canvas');
        canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
        canvas.getContext('2d').drawImage(img, 0, 0);
        return canvas.toDataURL('image/png');
        """,
        result,
    )
    pixels = Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("RGB")
    red, green, blue = pixels.getpixel((5, 5))
    expected = (0.5 * 200 + 0.5 * 127.5, 0.5 * 40, 0.5 * 10 + 0.5 * 127.5)
    assert all(abs(got - want) <= 2 for got, want in zip((red, green, blue), expected, strict=True))


def test_page_shows_api_errors(browser, server_url, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(server_url + "/")
    browser.find_element(By.ID, "content").send_keys(_write(tmp_path, "notes.txt", corpus.text()))
    browser.find_element(By.ID, "styles").send_keys(_write(tmp_path, "s.png", corpus.png()))
    browser.find_element(By.ID, "stylize-button").click()
    status = _wait_for(
        browser,
        lambda d: d.find_element(By.ID, "stylize-status").text.startswith("415") and d,
    ).find_element(By.ID, "stylize-status")
    assert "unsupported_image_type" in status.text
    assert "error" in status.get_attribute("class")


def test_generate_from_the_page(browser, server_url):
    from selenium.webdriver.common.by import By

    browser.get(server_url + "/")
    browser.find_element(By.ID, "prompt").send_keys("a huge red circle above a cat, and five")
    number = browser.find_element(By.ID, "num-images")
    number.clear()
    number.send_keys("3")
    browser.find_element(By.ID, "seed").send_keys("7")
    browser.find_element(By.ID, "generate-button").click()
    _wait_for(browser, lambda d: d.find_element(By.ID, "generate-status").text.startswith("Done"))
    images = browser.find_elements(By.CSS_SELECTOR, "#generate-results img")
    assert [image.get_attribute("title") for image in images] == ["seed 7", "seed 8", "seed 9"]
    assert all(browser.execute_script("return arguments[0].naturalWidth;", i) == 8 for i in images)
    understood = browser.find_element(By.ID, "generate-understood")
    assert understood.text == (
        "Drawn as: a large red circle above a cat. Ignored: five. "
        "This model has not learned to draw: cat."
    )
    assert "partial" in understood.get_attribute("class")


def test_generate_shows_progress_and_cancels(browser, server_url, fakes):
    from selenium.webdriver.common.by import By

    model = fakes.dit["cpu"]
    before = len(model.step_rows)
    model.step_gate = threading.Semaphore(2)  # steps 0 and 1 run, step 2 waits
    try:
        browser.get(server_url + "/")
        browser.find_element(By.ID, "prompt").send_keys("a slow red circle")
        browser.find_element(By.ID, "generate-button").click()
        status = _wait_for(
            browser,
            lambda d: "sampler step 1 of 4" in d.find_element(By.ID, "generate-status").text and d,
        ).find_element(By.ID, "generate-status")
        assert status.text == "running: sampler step 1 of 4"
        bar = browser.find_element(By.ID, "generate-progress")
        assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("1", "4")
        browser.find_element(By.ID, "generate-cancel").click()
        _wait_for(browser, lambda d: d.find_element(By.ID, "generate-status").text == "Cancelled.")
    finally:
        for _ in range(10):
            model.step_gate.release()
        model.step_gate = None
    # a request after it is served once the cancelled forward has ended (one worker)
    request = urllib.request.Request(
        server_url + "/v1/generate",
        data=json.dumps({"prompt": "next"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert urllib.request.urlopen(request, timeout=30).status == 200
    # the job ran steps 0 and 1 only (the cancel stopped it before step 2), then "next" 4
    assert len(model.step_rows) - before == 2 + 4


def test_the_page_names_the_key_in_use_and_lists_its_jobs(browser, fakes, tmp_path):
    from selenium.webdriver.common.by import By

    from service.keys import KeyFile

    keys = KeyFile(tmp_path / "keys.json")
    token = keys.add("alice")
    app = create_app(make_settings(api_keys_file=keys.path), model_entries=fakes.entries())
    with served(app) as url:
        browser.get(url + "/")
        _wait_for(browser, lambda d: "No valid key" in d.find_element(By.ID, "whoami").text)
        field = browser.find_element(By.ID, "api-key")
        field.send_keys(token)
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'));", field)
        _wait_for(browser, lambda d: d.find_element(By.ID, "whoami").text == "Key in use: alice")
        assert token not in browser.page_source  # the name is shown, never the key
        browser.find_element(By.ID, "prompt").send_keys("a red circle")
        browser.find_element(By.ID, "generate-button").click()
        _wait_for(
            browser, lambda d: d.find_element(By.ID, "generate-status").text.startswith("Done")
        )
        cards = _wait_for(
            browser,
            lambda d: [c for c in d.find_elements(By.CSS_SELECTOR, "#jobs-list .card")
                       if "succeeded" in c.text] or None,
        )  # fmt: skip
        assert len(cards) == 1 and "Text to image" in cards[0].text


def test_a_print_size_photo_is_painted_by_tiles_from_the_page(browser, tmp_path):
    """The page offers the server's max_side, says from which size it paints by tiles,
    shows a print-size job's progress in tiles, and shows the result file."""
    from selenium.webdriver.common.by import By

    fakes = Fakes()
    app = create_app(make_settings(max_side=2048), model_entries=fakes.entries())
    with served(app) as url:
        browser.get(url + "/")
        _wait_for(browser, lambda d: d.find_element(By.ID, "size-hint").text != "")
        assert browser.find_element(By.ID, "size").get_attribute("max") == "2048"
        assert "1024" in browser.find_element(By.ID, "size-hint").text
        photo = _write(tmp_path, "print.png", corpus.png(1100, 300, seed=6))
        browser.find_element(By.ID, "content").send_keys(photo)
        browser.find_element(By.ID, "styles").send_keys(
            _write(tmp_path, "s.png", corpus.solid_png((0, 0, 255)))
        )
        size = browser.find_element(By.ID, "size")
        size.clear()
        size.send_keys("1100")
        browser.find_element(By.ID, "stylize-button").click()
        _wait_for(browser, lambda d: d.find_element(By.ID, "stylize-status").text == "Done.")
        result = browser.find_element(By.ID, "stylize-result")
        assert browser.execute_script("return arguments[0].naturalWidth;", result) == 1100
        bar = browser.find_element(By.ID, "stylize-progress")
        steps = str(1 + -(-300 // FAKE_BAND_ROWS))  # the base and one step per band
        assert (bar.get_attribute("value"), bar.get_attribute("max")) == (steps, steps)


def test_the_page_offers_sizes_to_max_side_and_shows_a_size_refusal_beside_it(
    browser, fakes, tmp_path
):
    """Sizes come from GET /v1/limits; a 422 naming the size (here the job budget) shows
    next to the size field; the format and quality reach the result and its download."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    settings = make_settings(max_side=2048, max_job_stylize_pixel_passes=1_000_000)
    with served(create_app(settings, model_entries=fakes.entries())) as url:
        browser.get(url + "/")
        size = browser.find_element(By.ID, "size")
        _wait_for(browser, lambda d: size.get_attribute("max") == "2048")
        choices = browser.find_elements(By.CSS_SELECTOR, "#size-choices option")
        assert [c.get_attribute("value") for c in choices] == ["512", "1024", "2048"]
        assert "Up to 2048 px" in browser.find_element(By.ID, "size-hint").text

        # a print is costed at the side it is painted at: the photo must be that large
        photo = corpus.solid_png((200, 120, 40), 2048, 1536)
        browser.find_element(By.ID, "content").send_keys(_write(tmp_path, "photo.png", photo))
        browser.find_element(By.ID, "styles").send_keys(_write(tmp_path, "s.png", corpus.png()))
        size.clear()
        size.send_keys("2048")  # 1024^2 x 2 x 1.33 + 2048^2 pixel-passes: over 1 M
        browser.find_element(By.ID, "stylize-button").click()
        error = _wait_for(browser, lambda d: d.find_element(By.ID, "size-error").text or None)
        assert "max_job_stylize_pixel_passes" in error and "smaller size" in error
        assert browser.find_element(By.ID, "stylize-status").text.startswith("422")

        assert browser.find_element(By.ID, "quality").get_attribute("disabled")  # png
        Select(browser.find_element(By.ID, "format")).select_by_value("jpeg")
        quality = browser.find_element(By.ID, "quality")
        assert quality.is_enabled()
        quality.send_keys("40")
        size.clear()
        size.send_keys("48")
        browser.find_element(By.ID, "stylize-button").click()
        _wait_for(browser, lambda d: d.find_element(By.ID, "stylize-status").text == "Done.")
        assert browser.find_element(By.ID, "size-error").text == ""  # cleared
        result = browser.find_element(By.ID, "stylize-result")
        assert result.get_attribute("src").startswith("blob:")  # the result file
        download = browser.find_element(By.ID, "stylize-download")
        assert download.get_attribute("download") == "stylized.jpg"
        assert download.get_attribute("href") == result.get_attribute("src")


def test_a_video_is_stylised_from_the_page_with_frame_progress_and_a_player(
    browser, server_url, tmp_path
):
    """A WebM chosen as the content: the size field empties (the clip keeps its size),
    progress counts frames, and the result plays in a <video> with its download."""
    from selenium.webdriver.common.by import By

    from tests.clips import CLIPS, make_clip

    clip = make_clip(*CLIPS["webm"], frames=12)
    browser.get(server_url + "/")
    browser.find_element(By.ID, "content").send_keys(_write(tmp_path, "clip.webm", clip))
    assert browser.find_element(By.ID, "size").get_attribute("value") == ""
    browser.find_element(By.ID, "styles").send_keys(_write(tmp_path, "s.png", corpus.png()))
    browser.find_element(By.ID, "stylize-button").click()
    _wait_for(browser, lambda d: d.find_element(By.ID, "stylize-status").text == "Done.")
    bar = browser.find_element(By.ID, "stylize-progress")
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("12", "12")
    player = browser.find_element(By.ID, "stylize-video")
    assert player.is_displayed() and player.get_attribute("src").startswith("blob:")
    assert not browser.find_element(By.ID, "stylize-result").is_displayed()
    duration = _wait_for(
        browser, lambda d: d.execute_script("return arguments[0].duration;", player) or None
    )
    assert abs(duration - 12 / 25) < 0.1  # the clip's length: it decodes in the browser
    download = browser.find_element(By.ID, "stylize-download")
    assert download.get_attribute("download") == "stylized.webm"
