"""The page as a studio, in headless Chromium against a real uvicorn with the fake models:
samples to click, drag and drop and paste, the before/after slider, the gallery of
results (thumbnails after a reload, reopen, delete), every field of the API (checked on
the server side), errors next to their fields, keyboard-only use, axe-core, and
screenshots at a desktop's and a phone's width (saved in ``$ATELIER_SCREENSHOTS_DIR`` or
a temporary folder the run prints)."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from browser import (
    DESKTOP,
    PHONE,
    chromium,
    full_page_png,
    needs_chromium,
    reset_width,
    run_axe,
    screenshots_dir,
    serious,
    set_width,
    wait_for,
)
from PIL import Image, ImageDraw
from service_fakes import Fakes, make_settings, served, wait_until
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.app import create_app

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180), needs_chromium]


# ---------------------------------------------------------------- images and samples
def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def photo(width: int = 96, height: int = 64, hue: int = 0) -> bytes:
    """A small 'landscape': sky, sun, hills."""
    image = Image.new("RGB", (width, height), (120 + hue % 100, 170, 230))
    draw = ImageDraw.Draw(image)
    draw.ellipse((width * 0.65, height * 0.1, width * 0.85, height * 0.4), fill=(250, 220, 90))
    draw.polygon([(0, height), (0, height * 0.6), (width * 0.4, height * 0.45), (width, height * 0.7), (width, height)], fill=(60, 130 + hue % 60, 70))  # fmt: skip
    return _png(image)


def painting(colours: tuple[tuple[int, int, int], ...], width: int = 64, height: int = 64) -> bytes:
    """Diagonal stripes of ``colours``."""
    image = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(image)
    for i in range(-height, width, 8):
        draw.polygon([(i, 0), (i + 8, 0), (i + 8 + height, height), (i + height, height)], fill=colours[(i // 8) % len(colours)])  # fmt: skip
    return _png(image)


def mask(left: bool, width: int = 96, height: int = 64) -> bytes:
    """White on the left (or the right) half."""
    image = Image.new("L", (width, height), 0)
    ImageDraw.Draw(image).rectangle((0, 0, width // 2, height) if left else (width // 2, 0, width, height), fill=255)  # fmt: skip
    return _png(image)


def make_samples(root: Path) -> Path:
    (root / "content").mkdir(parents=True)
    (root / "style").mkdir()
    (root / "content" / "valley.png").write_bytes(photo(160, 112))
    (root / "content" / "meadow.png").write_bytes(photo(160, 112, hue=40))
    (root / "style" / "embers.png").write_bytes(
        painting(((200, 40, 20), (250, 160, 30), (90, 10, 10)))
    )
    (root / "style" / "tide.png").write_bytes(
        painting(((20, 60, 160), (240, 240, 255), (10, 120, 170)))
    )
    (root / "style" / "moss.png").write_bytes(painting(((40, 90, 30), (150, 180, 60))))
    return root


# ---------------------------------------------------------------- the recording server
class Recorder:
    """An ASGI wrapper that notes every request's method and path, and the form fields
    of each POST /v1/stylize as the server received them (the app reads the same body)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[tuple[str, str]] = []
        self.listings: list[str] = []  # the query of each GET /v1/jobs
        self.forms: list[dict[str, list[Any]]] = []
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self.lock:
            self.requests.append((scope["method"], scope["path"]))
            if (scope["method"], scope["path"]) == ("GET", "/v1/jobs"):
                self.listings.append(scope["query_string"].decode())
        if (scope["method"], scope["path"]) != ("POST", "/v1/stylize"):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)

        def replay() -> Receive:
            sent = False

            async def again() -> Message:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return again

        form = await Request(scope, replay()).form()
        fields: dict[str, list[Any]] = {}
        for key, value in form.multi_items():
            if isinstance(value, str):
                fields.setdefault(key, []).append(value)
            else:
                fields.setdefault(key, []).append((value.filename, await value.read()))
        await form.close()
        with self.lock:
            self.forms.append(fields)
        await self.app(scope, replay(), send)

    def count(self, method: str, prefix: str) -> int:
        with self.lock:
            return sum(1 for m, path in self.requests if m == method and path.startswith(prefix))


@pytest.fixture(scope="module")
def samples_dir(tmp_path_factory) -> Path:
    return make_samples(tmp_path_factory.mktemp("samples"))


@pytest.fixture(scope="module")
def studio(samples_dir):
    """The app with the fake models and the samples, behind a Recorder: (url, recorder)."""
    app = create_app(make_settings(samples_dir=samples_dir), model_entries=Fakes().entries())
    recorder = Recorder(app)
    with served(recorder) as url:
        yield url, recorder


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = screenshots_dir(tmp_path_factory)
    return folder


def _by():
    from selenium.webdriver.common.by import By

    return By


def _id(driver, name):
    return driver.find_element(_by().ID, name)


def _css(driver, selector):
    return driver.find_elements(_by().CSS_SELECTOR, selector)


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _open(driver, url: str) -> None:
    """The page, fresh: nothing kept from an earlier test (IndexedDB emptied, from a
    page of the same origin that does not hold it open)."""
    driver.get(url + "/healthz")
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})  # nor an answer it cached
    driver.execute_async_script(
        "const done = arguments[0]; const r = indexedDB.deleteDatabase('atelier-page');"
        "r.onsuccess = r.onerror = r.onblocked = () => done();"
    )
    driver.get(url + "/")
    wait_for(driver, lambda d: _id(d, "whoami").text.startswith("Key in use"))


def _wait_samples(driver) -> None:
    wait_for(driver, lambda d: _id(d, "samples").is_displayed())
    wait_for(driver, lambda d: len(_css(d, "#sample-paintings .sample")) == 3)


def _stylize_a_sample_pair(driver) -> None:
    _wait_samples(driver)
    _css(driver, "#sample-photos .sample")[0].click()
    wait_for(driver, lambda d: "Meadow" in _id(d, "content-name").text)
    _css(driver, "#sample-paintings .sample")[0].click()
    wait_for(driver, lambda d: len(_css(d, "#paintings .painting")) == 1)
    _id(driver, "stylize-button").click()
    wait_for(driver, lambda d: _id(d, "stylize-status").text == "Done.")


def _job_ids(url: str) -> list[str]:
    with urllib.request.urlopen(url + "/v1/jobs?limit=100", timeout=10) as answer:
        return [job["id"] for job in json.load(answer)["jobs"]]


def _job(url: str, job_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/v1/jobs/{job_id}", timeout=10) as answer:
        return json.load(answer)


def _set_range(driver, element, value: str) -> None:
    driver.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
        element,
        value,
    )


# ---------------------------------------------------------------- samples and the slider
def test_a_sample_pair_gives_a_result_and_the_slider_moves(browser, studio, shots):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    url, recorder = studio
    _open(browser, url)
    _stylize_a_sample_pair(browser)
    photos = _css(browser, "#sample-photos .sample")
    assert photos[0].get_attribute("aria-pressed") == "true"
    assert photos[1].get_attribute("aria-pressed") == "false"
    assert _css(browser, "#sample-paintings .sample")[0].get_attribute("aria-pressed") == "true"
    # the samples' files went up as the uploads
    form = recorder.forms[-1]
    assert [name for name, _ in form["content"]] == ["meadow.png"]
    assert [name for name, _ in form["style"]] == ["embers.png"]
    assert "style_weights" not in form and "mask" not in form

    result = _id(browser, "stylize-result")
    before = _id(browser, "compare-before")
    assert result.is_displayed() and before.is_displayed()
    assert browser.execute_script("return arguments[0].naturalWidth;", result) == 160
    split = "return getComputedStyle(arguments[0]).getPropertyValue('--split').trim();"
    frame = _id(browser, "compare-frame")
    assert browser.execute_script(split, frame) == "50%"
    slider = _id(browser, "compare-slider")
    slider.send_keys(Keys.ARROW_RIGHT * 5)  # the keyboard moves it
    assert slider.get_attribute("value") == "55"
    assert browser.execute_script(split, frame) == "55%"
    assert slider.get_attribute("aria-valuetext") == "photo up to 55 %"
    clip = browser.execute_script("return getComputedStyle(arguments[0]).clipPath;", before)
    assert "45%" in clip  # the photo is cut at 55 % of the width
    slider.send_keys(Keys.HOME)
    assert browser.execute_script(split, frame) == "0%"
    # a drag on the picture moves it too
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", frame)
    width = frame.size["width"]
    ActionChains(browser).move_to_element_with_offset(frame, -width // 4, 0).click_and_hold().move_by_offset(width // 8, 0).release().perform()  # fmt: skip
    assert 30 <= int(slider.get_attribute("value")) <= 45

    browser.execute_script("window.scrollTo(0, 0)")
    (shots / "desktop-stylized.png").write_bytes(full_page_png(browser))
    # use this result as the photo
    _id(browser, "stylize-as-photo").click()
    assert _id(browser, "content-name").text.startswith("stylized.png")
    assert photos[0].get_attribute("aria-pressed") == "false"
    _id(browser, "stylize-button").click()
    wait_for(browser, lambda d: _id(d, "stylize-status").text == "Done.")
    assert [name for name, _ in recorder.forms[-1]["content"]] == ["stylized.png"]


# ---------------------------------------------------------------- live previews
#: Notes, in the page, each time a preview or a result is shown: [what, section, time].
WATCH_PREVIEWS = """
window.shown = [];
const note = (what, prefix) => window.shown.push([what, prefix, performance.now()]);
for (const prefix of ['stylize', 'generate']) {
  const preview = document.getElementById(prefix + '-preview');
  new MutationObserver(() => {
    if (!preview.hidden && preview.src.startsWith('data:image/jpeg;base64,')) note('preview', prefix);
  }).observe(preview, {attributes: true, attributeFilter: ['src', 'hidden']});
}
const result = document.getElementById('stylize-result');
new MutationObserver(() => { if (result.src) note('result', 'stylize'); })
  .observe(result, {attributes: true, attributeFilter: ['src']});
new MutationObserver(() => note('result', 'generate'))
  .observe(document.getElementById('generate-results'), {childList: true});
"""


def test_previews_show_while_a_job_works_and_the_result_replaces_them(browser, samples_dir):
    """Both sections ask for previews; at least one shows before the final image, which
    then replaces it (the preview is hidden again)."""
    fakes = Fakes()
    recorder = Recorder(create_app(make_settings(samples_dir=samples_dir), model_entries=fakes.entries()))  # fmt: skip
    with served(recorder) as url:
        fakes.adain["cpu"].step_delay_s = 0.4  # four passes: 1.6 s
        fakes.dit["cpu"].step_delay_s = 0.3  # four steps: 1.2 s
        _open(browser, url)
        browser.execute_script(WATCH_PREVIEWS)
        _stylize_a_sample_pair(browser)
        assert recorder.forms[-1]["previews"] == ["true"]
        _id(browser, "prompt").send_keys("a red circle")
        _id(browser, "generate-button").click()
        wait_for(browser, lambda d: _id(d, "generate-status").text.startswith("Done"))
        shown = browser.execute_script("return window.shown;")
        for prefix in ("stylize", "generate"):
            events = [what for what, section, _ in shown if section == prefix]
            assert "preview" in events and "result" in events, shown
            assert events.index("preview") < events.index("result"), shown
            assert not _id(browser, f"{prefix}-preview").is_displayed()  # replaced
        for job_id in _job_ids(url)[:2]:
            assert _job(url, job_id)["parameters"]["previews"] is True


def test_the_page_hides_the_samples_when_there_are_none(browser, tmp_path):
    for samples_dir in (None, tmp_path / "missing"):
        app = create_app(make_settings(samples_dir=samples_dir), model_entries=Fakes().entries())
        with served(app) as url:
            browser.get(url + "/")
            wait_for(browser, lambda d: _id(d, "whoami").text.startswith("Key in use"))
            time.sleep(0.3)  # the listing came back (empty)
            assert not _id(browser, "samples").is_displayed()
            assert _css(browser, "#sample-photos .sample") == []


def test_drag_and_drop_and_paste_give_the_photo_paintings_and_masks(browser, studio):
    """Files dropped on the boxes or pasted: each shows with its thumbnail."""
    url, _ = studio
    _open(browser, url)
    make_file = """
        const [b64, name] = [arguments[0], arguments[1]];
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], name, {type: 'image/png'}));
        return transfer;
    """
    import base64

    def drop(target_css: str, data: bytes, name: str) -> None:
        browser.execute_script(
            "const t = (function() {" + make_file + "})(arguments[0], arguments[1]);"
            "const target = document.querySelector(arguments[2]);"
            "target.dispatchEvent(new DragEvent('dragover', {dataTransfer: t, bubbles: true, cancelable: true}));"
            "target.dispatchEvent(new DragEvent('drop', {dataTransfer: t, bubbles: true, cancelable: true}));",
            base64.b64encode(data).decode(),
            name,
            target_css,
        )

    def paste(data: bytes, name: str) -> None:
        browser.execute_script(
            "const t = (function() {" + make_file + "})(arguments[0], arguments[1]);"
            "document.dispatchEvent(new ClipboardEvent('paste', {clipboardData: t, bubbles: true, cancelable: true}));",
            base64.b64encode(data).decode(),
            name,
        )

    drop("#content-drop", photo(), "dropped.png")
    assert _id(browser, "content-name").text.startswith("dropped.png")
    thumb = _id(browser, "content-thumb")
    wait_for(browser, lambda d: d.execute_script("return arguments[0].naturalWidth;", thumb) == 96)
    drop("#paintings-drop", painting(((255, 0, 0),)), "red.png")
    browser.execute_script("document.getElementById('styles').focus()")
    paste(painting(((0, 0, 255),)), "blue.png")
    names = [p.text for p in _css(browser, ".painting-name")]
    assert names == ["Painting 1: red.png", "Painting 2: blue.png"]
    thumbs = _css(browser, ".painting > img.thumb")
    assert all(browser.execute_script("return arguments[0].naturalWidth;", t) == 64 for t in thumbs)
    drop("#painting-1", mask(left=False), "right.png")  # on a painting: its mask
    assert "mask: right.png" in _id(browser, "painting-1").text
    browser.execute_script("document.activeElement.blur()")
    paste(photo(hue=30), "pasted.png")  # elsewhere: the photo
    assert _id(browser, "content-name").text.startswith("pasted.png")


# ---------------------------------------------------------------- the API's fields
def test_a_mask_and_two_weighted_paintings_reach_the_api(browser, studio, tmp_path):
    url, recorder = studio
    _open(browser, url)
    _id(browser, "content").send_keys(_write(tmp_path, "photo.png", photo()))
    styles = [
        _write(tmp_path, "warm.png", painting(((200, 40, 20), (250, 160, 30)))),
        _write(tmp_path, "cool.png", painting(((20, 60, 160), (240, 240, 255)))),
    ]
    _id(browser, "styles").send_keys("\n".join(styles))
    wait_for(browser, lambda d: len(_css(d, ".painting")) == 2)
    _set_range(browser, _id(browser, "weight-0"), "0.75")
    _set_range(browser, _id(browser, "weight-1"), "0.25")
    assert _id(browser, "weight-0-value").text == "75 % of the mix"
    _set_range(browser, _id(browser, "alpha"), "0.8")
    _id(browser, "preserve-color").click()
    from selenium.webdriver.support.ui import Select

    Select(_id(browser, "preset")).select_by_value("realtime")
    _set_range(browser, _id(browser, "style-scale"), "1.5")
    size = _id(browser, "size")
    size.clear()
    size.send_keys("80")
    _id(browser, "stylize-button").click()
    wait_for(browser, lambda d: _id(d, "stylize-status").text == "Done.")
    form = recorder.forms[-1]
    assert [name for name, _ in form["style"]] == ["warm.png", "cool.png"]
    assert form["style_weights"] == ["0.75,0.25"]
    assert "mask" not in form
    assert (form["alpha"], form["preserve_color"], form["preset"]) == (
        ["0.8"],
        ["true"],
        ["realtime"],
    )
    assert (form["style_scale"], form["size"], form["format"]) == (["1.5"], ["80"], ["png"])
    job = _job(url, _job_ids(url)[0])
    assert job["parameters"]["style_weights"] == [0.75, 0.25]  # as the server read them
    assert job["parameters"]["preset"] == "realtime" and job["parameters"]["size"] == 80

    # A mask on one painting only: the page says what is missing, next to that painting.
    _id(browser, "mask-0").send_keys(_write(tmp_path, "left.png", mask(left=True)))
    wait_for(browser, lambda d: "mask: left.png" in _id(d, "painting-0").text)
    assert not _id(browser, "weight-0").is_enabled()  # masks choose: no weights
    sent = len(recorder.forms)
    _id(browser, "stylize-button").click()
    error = _id(browser, "painting-1-error")
    assert "give this painting a mask too" in error.text.lower()
    assert _id(browser, "mask-1").get_attribute("aria-invalid") == "true"
    assert browser.switch_to.active_element == _id(browser, "mask-1")
    assert len(recorder.forms) == sent  # nothing was sent
    _id(browser, "mask-1").send_keys(_write(tmp_path, "right.png", mask(left=False)))
    wait_for(browser, lambda d: "mask: right.png" in _id(d, "painting-1").text)
    assert _id(browser, "painting-1-error").text == ""
    _id(browser, "stylize-button").click()
    wait_for(browser, lambda d: len(recorder.forms) > sent)
    wait_for(browser, lambda d: _id(d, "stylize-status").text == "Done.")
    form = recorder.forms[-1]
    assert [name for name, _ in form["mask"]] == ["left.png", "right.png"]
    assert form["mask"][0][1] == mask(left=True)
    assert "style_weights" not in form
    assert _job(url, _job_ids(url)[0])["parameters"]["masks"] == 2


def test_generate_sends_every_field_and_same_again_changes_only_the_seed(browser, studio):
    from selenium.webdriver.support.ui import Select

    url, _ = studio
    _open(browser, url)
    wait_for(browser, lambda d: len(_css(d, "#sampler option")) == 3)  # from GET /v1/models
    _id(browser, "prompt").send_keys("a red circle left of a blue square")
    _id(browser, "negative-prompt").send_keys("green")
    number = _id(browser, "num-images")
    number.clear()
    number.send_keys("2")
    _id(browser, "seed").send_keys("11")
    Select(_id(browser, "sampler")).select_by_value("ddpm")
    _id(browser, "steps").send_keys("3")
    _id(browser, "guidance-scale").send_keys("2.5")
    _id(browser, "plan-layout").click()
    assert _id(browser, "generate-cost").text == "Cost: 3 steps x 2 images = 6 image-steps."
    _id(browser, "generate-button").click()
    wait_for(browser, lambda d: _id(d, "generate-status").text.startswith("Done"))
    first = _job(url, _job_ids(url)[0])["parameters"]
    assert first["prompt"] == "a red circle left of a blue square"
    assert first["negative_prompt"] == "green"
    assert (first["seeds"], first["sampler"], first["steps"]) == ([11, 12], "ddpm", 3)
    assert (first["guidance_scale"], first["plan_layout"]) == (2.5, False)
    _id(browser, "generate-again").click()
    wait_for(browser, lambda d: _id(d, "generate-status").text.startswith("Done") and _id(d, "seed").get_attribute("value") != "11")  # fmt: skip
    again = _job(url, _job_ids(url)[0])["parameters"]
    seed = int(_id(browser, "seed").get_attribute("value"))
    assert again["seeds"] == [seed, seed + 1]
    assert {k: v for k, v in again.items() if k != "seeds"} == {
        k: v for k, v in first.items() if k != "seeds"
    }
    # a generated image as the photo
    _css(browser, "#generate-results figcaption button")[0].click()
    assert _id(browser, "content-name").text.startswith(f"seed-{seed}.png")


def test_errors_show_next_to_their_fields(browser, studio, tmp_path):
    url, _ = studio
    _open(browser, url)
    # the page's own checks
    _id(browser, "stylize-button").click()
    assert "choose a photo" in _id(browser, "content-error").text.lower()
    assert "one to four paintings" in _id(browser, "paintings-error").text
    assert browser.switch_to.active_element == _id(browser, "content")
    # the server's: a painting that is not an image (415, "style[1]: ...") on its card
    _id(browser, "content").send_keys(_write(tmp_path, "photo.png", photo()))
    assert _id(browser, "content-error").text == ""  # a new photo clears it
    _id(browser, "styles").send_keys(
        "\n".join([_write(tmp_path, "ok.png", painting(((9, 9, 9),))), _write(tmp_path, "notes.png", b"just words")])
    )  # fmt: skip
    _id(browser, "stylize-button").click()
    error = wait_for(browser, lambda d: _id(d, "painting-1-error").text or None)
    assert "not an image" in error.lower()
    assert _id(browser, "stylize-status").text.startswith("415")
    assert _id(browser, "painting-0-error").text == ""
    # a size over max_side (422 "size: at most ...") next to the size
    _css(browser, "#painting-1 .remove")[0].click()
    size = _id(browser, "size")
    size.clear()
    size.send_keys("5000")
    assert "over this server's largest size" in _id(browser, "size-cost").text
    _id(browser, "stylize-button").click()
    error = wait_for(browser, lambda d: _id(d, "size-error").text or None)
    assert error.startswith("At most 1024")
    assert size.get_attribute("aria-invalid") == "true"
    assert browser.switch_to.active_element == size
    assert "size-error" in size.get_attribute("aria-describedby")
    # generate: steps over the model's schedule (422 "steps: ...")
    _id(browser, "prompt").send_keys("a red circle")
    _id(browser, "steps").send_keys("5000")
    _id(browser, "generate-button").click()
    error = wait_for(browser, lambda d: _id(d, "steps-error").text or None)
    assert "1000" in error
    assert _id(browser, "prompt-error").text == ""


# ---------------------------------------------------------------- the gallery
def test_the_gallery_shows_the_result_with_a_thumbnail_after_a_reload(browser, studio):
    url, recorder = studio
    _open(browser, url)
    _stylize_a_sample_pair(browser)
    job_id = _job_ids(url)[0]
    card = f'#jobs-list [data-job="{job_id}"]'
    shown = (
        "const i = document.querySelector(arguments[0]); return i && i.complete && i.naturalWidth;"
    )
    results = recorder.count("GET", f"/v1/jobs/{job_id}/result")
    wait_for(browser, lambda d: d.execute_script(shown, f"{card} .shot img"))
    time.sleep(0.5)
    # made in the page from the result: the gallery listing the job meanwhile waited for
    # it, and fetched no thumbnail of the server's
    assert recorder.count("GET", f"/v1/jobs/{job_id}/thumbnail") == 0
    for reload in ("kept", "fetched"):
        fetched = recorder.count("GET", f"/v1/jobs/{job_id}/thumbnail")
        if reload == "fetched":  # nothing kept in this browser: the server's thumbnail
            _open(browser, url)
        else:
            browser.refresh()
        width = wait_for(browser, lambda d: d.execute_script(shown, f"{card} .shot img"))
        assert width == 160  # under 256 px: as it is
        assert "Style transfer" in _css(browser, card)[0].text
        assert "succeeded" in _css(browser, card)[0].text
        time.sleep(0.5)
        thumbnails = recorder.count("GET", f"/v1/jobs/{job_id}/thumbnail") - fetched
        assert thumbnails == (reload == "fetched")
    assert recorder.count("GET", f"/v1/jobs/{job_id}/result") == results  # never the result

    # Open: the settings come back, and the picture
    _set_range(browser, _id(browser, "alpha"), "0.3")
    buttons = {b.text: b for b in _css(browser, f"{card} button")}
    assert set(buttons) == {"Open", "Download", "Delete"}
    buttons["Open"].click()
    wait_for(
        browser, lambda d: d.find_element(_by().ID, "stylize-status").text.startswith("Reopened")
    )
    assert _id(browser, "alpha").get_attribute("value") == "1"
    assert _id(browser, "stylize-result").is_displayed()
    # Download: the result file, fetched with the key's header
    fetched = recorder.count("GET", f"/v1/jobs/{job_id}/result")
    {b.text: b for b in _css(browser, f"{card} button")}["Download"].click()
    wait_for(browser, lambda d: _id(d, "jobs-status").text == "Downloaded.")
    assert recorder.count("GET", f"/v1/jobs/{job_id}/result") == fetched + 1
    # Delete: gone from the page and from the server
    buttons = {b.text: b for b in _css(browser, f"{card} button")}
    buttons["Delete"].click()
    wait_for(browser, lambda d: not _css(d, card))
    assert job_id not in _job_ids(url)


def test_a_reopened_job_brings_back_its_inputs_from_this_browser(browser, studio, tmp_path):
    url, _ = studio
    _open(browser, url)
    _id(browser, "content").send_keys(_write(tmp_path, "photo.png", photo()))
    _id(browser, "styles").send_keys(
        "\n".join([_write(tmp_path, "a.png", painting(((200, 0, 0),))), _write(tmp_path, "b.png", painting(((0, 0, 200),)))])
    )  # fmt: skip
    wait_for(browser, lambda d: len(_css(d, ".painting")) == 2)
    _set_range(browser, _id(browser, "weight-1"), "0.5")
    _id(browser, "stylize-button").click()
    wait_for(browser, lambda d: _id(d, "stylize-status").text == "Done.")
    job_id = _job_ids(url)[0]
    browser.refresh()
    card = f'#jobs-list [data-job="{job_id}"]'
    wait_for(browser, lambda d: _css(d, f"{card} button"))
    assert _css(browser, ".painting") == []
    [b for b in _css(browser, f"{card} button") if b.text == "Open"][0].click()
    wait_for(browser, lambda d: _id(d, "stylize-status").text.startswith("Reopened with its photo"))
    assert [p.text for p in _css(browser, ".painting-name")] == [
        "Painting 1: a.png",
        "Painting 2: b.png",
    ]
    assert _id(browser, "weight-0-value").text == "67 % of the mix"
    assert _id(browser, "content-name").text.startswith("photo.png")
    assert _id(browser, "compare-before").is_displayed()


def test_the_gallery_is_paged_and_does_not_poll_when_all_is_done(browser, tmp_path):
    """Ten jobs: the first page shows eight (thumbnails fetched for those only), Show
    more the rest; idle, the page sends nothing more."""
    fakes = Fakes()
    recorder = Recorder(create_app(make_settings(), model_entries=fakes.entries()))
    with served(recorder) as url:
        for seed in range(10):
            request = urllib.request.Request(
                url + "/v1/generate",
                data=json.dumps({"prompt": "a red circle", "seed": seed}).encode(),
                headers={"Content-Type": "application/json", "Prefer": "respond-async"},
            )
            urllib.request.urlopen(request, timeout=10)
        wait_until(lambda: all(_job(url, i)["state"] == "succeeded" for i in _job_ids(url)))
        _open(browser, url)
        wait_for(browser, lambda d: len(_css(d, "#jobs-list .shot img")) == 8)
        assert len(_css(browser, "#jobs-list .card")) == 8
        more = _id(browser, "jobs-more")
        assert more.is_displayed()
        time.sleep(3)
        listed = recorder.count("GET", "/v1/jobs")  # the list and the thumbnails
        thumbnails = sum(
            1
            for m, p in recorder.requests
            if p.startswith("/v1/jobs/") and p.endswith("/thumbnail")
        )
        assert thumbnails == 8
        assert not any(p.endswith("/result") for m, p in recorder.requests)
        time.sleep(3)
        assert recorder.count("GET", "/v1/jobs") == listed  # no polling
        asked = len(recorder.listings)
        more.click()
        wait_for(browser, lambda d: len(_css(d, "#jobs-list .card")) == 10)
        assert not more.is_displayed()
        # the next page alone was asked for, from where the first ended
        assert recorder.listings[asked:] == ["limit=8&offset=8"]


# ---------------------------------------------------------------- keyboard, axe, screens
CONTROLS = "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])"


def _controls(driver) -> list[str]:
    """Every visible, enabled control, by a description (id or text)."""
    return driver.execute_script(
        """
        return [...document.querySelectorAll(arguments[0])]
          .filter((e) => !e.disabled && e.offsetParent !== null && getComputedStyle(e).visibility !== 'hidden')
          .map((e) => e.id || e.getAttribute('aria-label') || (e.textContent.trim() + '@' + (e.closest('[id]')?.id ?? '')));
        """,
        CONTROLS,
    )


def _tab_through(driver, limit: int = 200) -> list[str]:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    describe = (
        "const e = document.activeElement;"
        "return e === document.body ? null : (e.id || e.getAttribute('aria-label') ||"
        " (e.textContent.trim() + '@' + (e.closest('[id]')?.id ?? '')));"
    )
    driver.execute_script("window.scrollTo(0, 0); document.querySelector('.skip').focus();")
    reached: list[str] = [driver.execute_script(describe)]  # the first control of the page
    for _ in range(limit):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        here = driver.execute_script(describe)
        if here is None or (reached and here == reached[0]):
            break
        reached.append(here)
    return reached


def test_keyboard_alone_reaches_every_control_and_does_the_work(browser, studio, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    url, recorder = studio
    _open(browser, url)
    _wait_samples(browser)

    def press(*keys: str) -> None:
        ActionChains(browser).send_keys(*keys).perform()

    def tab_to(predicate, limit: int = 150) -> Any:
        for _ in range(limit):
            press(Keys.TAB)
            active = browser.switch_to.active_element
            if predicate(active):
                return active
        raise AssertionError("never reached")

    # choose a sample pair, stylize and compare with the keyboard only
    browser.execute_script("document.activeElement?.blur(); window.scrollTo(0, 0);")
    first = tab_to(lambda e: "sample" in (e.get_attribute("class") or ""))
    press(Keys.ENTER)
    wait_for(browser, lambda d: first.get_attribute("aria-pressed") == "true")
    tab_to(lambda e: e.get_attribute("title") == "Tide")
    press(Keys.SPACE)
    wait_for(browser, lambda d: len(_css(d, ".painting")) == 1)
    tab_to(lambda e: e.get_attribute("id") == "stylize-button")
    press(Keys.ENTER)
    wait_for(browser, lambda d: _id(d, "stylize-status").text == "Done.")
    slider = tab_to(lambda e: e.get_attribute("id") == "compare-slider")
    press(Keys.ARROW_LEFT * 3)
    assert slider.get_attribute("value") == "47"
    # the focus is visible: a 3 px outline
    outline = browser.execute_script("const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth];")  # fmt: skip
    assert outline[0] != "none" and float(outline[1].rstrip("px")) >= 2

    # Tab reaches every control there is now (samples, paintings, options, result,
    # generate, the gallery's buttons), in one round. The gallery first settles: every
    # job shown finished and no listing under way or due (a listing would redraw the
    # cards, and their buttons, under the walk), twice in a row a moment apart.
    settled = (
        "const list = document.getElementById('jobs-list');"
        "const cards = [...list.querySelectorAll('.card')];"
        "return list.dataset.pending === 'false' && cards.length > 0"
        " && cards.every((c) => c.dataset.state === 'succeeded');"
    )

    def gallery_settled(driver) -> bool:
        if not driver.execute_script(settled):
            return False
        time.sleep(0.3)
        return bool(driver.execute_script(settled))

    wait_for(browser, gallery_settled)
    controls = _controls(browser)
    reached = _tab_through(browser)
    missing = [c for c in controls if c not in reached]
    assert not missing, (missing, reached)
    assert len(controls) > 30
    # every control has a name (a label or its text)
    unnamed = browser.execute_script(
        """
        return [...document.querySelectorAll('input, select, button')].filter((e) => {
          if (e.type === 'hidden') return false;
          const labelled = (e.labels && e.labels.length) || e.getAttribute('aria-label') || e.getAttribute('aria-labelledby');
          return !labelled && !e.textContent.trim();
        }).map((e) => e.outerHTML.slice(0, 80));
        """
    )
    assert unnamed == []


def test_no_serious_accessibility_violations_with_axe(browser, studio, tmp_path, shots, capsys):
    url, _ = studio
    _open(browser, url)
    _stylize_a_sample_pair(browser)
    _id(browser, "mask-0").send_keys(_write(tmp_path, "m.png", mask(left=True)))
    _id(browser, "prompt").send_keys("a red circle left of a blue square")
    _id(browser, "generate-button").click()
    wait_for(browser, lambda d: _id(d, "generate-status").text.startswith("Done"))
    size = _id(browser, "size")
    size.clear()
    size.send_keys("5000")
    _id(browser, "stylize-button").click()  # leaves a field's error on the page
    wait_for(browser, lambda d: _id(d, "size-error").text)
    wait_for(browser, lambda d: _css(d, ".card .shot img"))
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        set_width(browser, size)
        results = run_axe(browser)
        assert serious(results) == [], name
        with capsys.disabled():
            print(
                f"\naxe-core {results['version']} at {name} width: {len(results['violations'])} violations, none serious or critical"
            )
    reset_width(browser)


def test_screenshots_at_desktop_and_phone_widths(browser, studio, shots, capsys):
    url, _ = studio
    _open(browser, url)
    _stylize_a_sample_pair(browser)
    _css(browser, "#sample-paintings .sample")[1].click()
    wait_for(browser, lambda d: len(_css(d, ".painting")) == 2)
    _id(browser, "prompt").send_keys("two green triangles and a yellow circle")
    number = _id(browser, "num-images")
    number.clear()
    number.send_keys("4")
    _id(browser, "generate-button").click()
    wait_for(browser, lambda d: _id(d, "generate-status").text.startswith("Done"))
    wait_for(browser, lambda d: len(_css(d, ".card .shot img")) >= 2)
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        set_width(browser, size)
        browser.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.3)
        # nothing wider than the screen: no sideways scrolling
        assert browser.execute_script("return document.documentElement.scrollWidth;") <= size[0]
        data = full_page_png(browser)
        (shots / f"{name}.png").write_bytes(data)
        assert Image.open(io.BytesIO(data)).size[0] == size[0]
    reset_width(browser)
    with capsys.disabled():
        print(f"\nscreenshots of the page: {shots}")
