"""Headless Chromium for the page's tests: the driver, waits, screenshots, axe-core.

Needs Debian's ``chromium`` and ``chromium-driver`` (the tests skip without them) and
Selenium; axe-core comes from the ``axe-core-python`` dev dependency, which ships
``axe.min.js`` (no network at test time).
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
HAVE_CHROMIUM = os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)

needs_chromium = pytest.mark.skipif(
    not HAVE_CHROMIUM, reason="needs Debian packages chromium and chromium-driver"
)

DESKTOP = (1280, 900)
PHONE = (390, 844)


@contextmanager
def chromium() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, condition: Callable[[Any], Any], timeout: float = 30) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def set_width(driver: Any, size: tuple[int, int]) -> None:
    """Lay the page out at ``size`` CSS pixels (a phone's: mobile emulation)."""
    width, height = size
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    driver.execute_cdp_cmd("Emulation.setScrollbarsHidden", {"hidden": True})


def reset_width(driver: Any) -> None:
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.execute_cdp_cmd("Emulation.setScrollbarsHidden", {"hidden": False})


def full_page_png(driver: Any) -> bytes:
    """The whole page (beyond the viewport) as a PNG."""
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    return base64.b64decode(shot["data"])


def screenshots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$ATELIER_SCREENSHOTS_DIR`` when set, else a pytest temporary folder."""
    chosen = os.environ.get("ATELIER_SCREENSHOTS_DIR")
    if chosen:
        folder = Path(chosen)
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return tmp_path_factory.mktemp("screenshots")


def axe_source() -> str:
    axe = pytest.importorskip("axe_core_python")
    return resources.files(axe).joinpath("axe.min.js").read_text(encoding="utf-8")


def run_axe(driver: Any) -> dict[str, Any]:
    """axe-core's results for the page as it is now (WCAG 2.x A and AA, best practices)."""
    driver.execute_script(axe_source())
    driver.set_script_timeout(60)
    results: dict[str, Any] = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        axe.run(document, {resultTypes: ['violations']})
          .then((r) => done({violations: r.violations, version: axe.version}))
          .catch((e) => done({error: String(e)}));
        """
    )
    assert "error" not in results, results
    return results


def serious(results: dict[str, Any]) -> list[str]:
    """The serious and critical violations, one line each with the elements concerned."""
    return [
        f"{v['impact']} {v['id']}: {v['help']} at "
        + ", ".join(" ".join(node["target"]) for node in v["nodes"][:5])
        for v in results["violations"]
        if v["impact"] in ("serious", "critical")
    ]
