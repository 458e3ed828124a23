"""A headless Chromium driven through Selenium and Debian's chromedriver (no browser downloads), and Swagger
UI as a person uses it: expand an operation, "Try it out", fill a parameter, pick an example, "Execute",
read the response panel."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = ("/usr/bin/chromium", "chromium")
CHROMEDRIVER = ("/usr/bin/chromedriver", "chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1000"]
WAIT = 30
POLL = 0.02
EXAMPLES_SELECT = ".opblock-section-request-body select.examples-select-element"


def _which(candidates: tuple[str, ...]) -> str | None:
    for c in candidates:
        found = shutil.which(c)
        if found:
            return found
    return None


def start_chromium():
    """A fresh Chromium (its own profile directory), or a skip saying what is missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (it is in the test extra: pip install -e '.[test]')")
    binary, driver = _which(CHROMIUM), _which(CHROMEDRIVER)
    if binary is None or driver is None:
        pytest.skip("chromium and chromedriver are not on PATH: install Debian's chromium and chromium-driver "
                    "packages (python3 dev.py test does so when run as root with apt-get available)")
    profile = tempfile.mkdtemp(prefix="gradserve-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    try:
        browser = webdriver.Chrome(service=Service(driver), options=options)
    except Exception as exc:  # noqa: BLE001 - any failure to start the browser is a reason to skip
        shutil.rmtree(profile, ignore_errors=True)
        pytest.skip(f"headless chromium did not start: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    browser.set_page_load_timeout(WAIT)
    browser._gradserve_profile = profile
    return browser


def stop_chromium(browser) -> None:
    profile = getattr(browser, "_gradserve_profile", None)
    browser.quit()
    if profile:
        shutil.rmtree(profile, ignore_errors=True)


class SwaggerUI:
    """The /docs page of a live server, pressed like a person presses it."""

    def __init__(self, browser, base_url: str):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.browser, self.base_url, self.By = browser, base_url, By
        # (polled every 20 ms, not selenium's default 500 ms: each Execute waits twice, for the cleared panel
        # and for the response, and the presser's ~50 presses spent most of their time asleep)
        self.wait = WebDriverWait(browser, WAIT, poll_frequency=POLL)

    def open(self) -> SwaggerUI:
        self.browser.get(f"{self.base_url}/docs")
        self.wait.until(lambda b: b.find_elements(self.By.CSS_SELECTOR, ".opblock"))
        return self

    def operation(self, operation_id: str):
        """The operation's block, expanded and in "Try it out" mode."""
        By = self.By
        block = self.wait.until(lambda b: b.find_element(By.ID, f"operations-{operation_id}"))
        if "is-open" not in block.get_attribute("class"):
            self._click(block.find_element(By.CSS_SELECTOR, ".opblock-summary-control"))
            self.wait.until(lambda b: "is-open" in block.get_attribute("class"))
        buttons = block.find_elements(By.CSS_SELECTOR, "button.try-out__btn")
        if buttons and buttons[0].text.strip().startswith("Try it out"):
            self._click(buttons[0])
        self.wait.until(lambda b: block.find_elements(By.CSS_SELECTOR, "button.execute"))
        return block

    def _click(self, element) -> None:
        self.browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
        element.click()

    def fill(self, block, name: str, value: str) -> None:
        field = block.find_element(self.By.CSS_SELECTOR, f'tr[data-param-name="{name}"] input')
        field.clear()
        field.send_keys(value)

    def choose(self, block, name: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(block.find_element(self.By.CSS_SELECTOR, f'tr[data-param-name="{name}"] select')).select_by_value(
            value)

    def examples(self, block) -> list[str]:
        select = block.find_element(self.By.CSS_SELECTOR, EXAMPLES_SELECT)
        return [o.get_attribute("value") for o in select.find_elements(self.By.TAG_NAME, "option")]

    def pick_example(self, block, key: str) -> str:
        """Select an example in the dropdown; return the request body text Swagger UI then shows."""
        from selenium.webdriver.support.ui import Select

        select = block.find_element(self.By.CSS_SELECTOR, EXAMPLES_SELECT)
        Select(select).select_by_value(key)
        self.wait.until(lambda b: Select(select).first_selected_option.get_attribute("value") == key)
        area = block.find_element(self.By.CSS_SELECTOR, "textarea.body-param__text")
        return area.get_attribute("value")

    def execute(self, block) -> tuple[int, str]:
        """Press Execute; return the status code and the response body shown in the panel."""
        By = self.By
        for clear in block.find_elements(By.CSS_SELECTOR, "button.btn-clear"):
            self._click(clear)
        self.wait.until(lambda b: not block.find_elements(By.CSS_SELECTOR, ".live-responses-table"))
        self._click(block.find_element(By.CSS_SELECTOR, "button.execute"))
        status = self.wait.until(lambda b: block.find_element(
            By.CSS_SELECTOR, ".live-responses-table tr.response .response-col_status"))
        body = block.find_elements(By.CSS_SELECTOR, ".live-responses-table .response-col_description "
                                                    ".highlight-code pre")
        text = self.browser.execute_script("return arguments[0].textContent", body[0]) if body else ""
        return int(status.text.strip().split()[0]), text

    def request_url(self, block) -> str:
        """The "Request URL" Swagger UI shows after Execute (what a person opens to see an SVG drawn: the
        panel shows an SVG response as its source text)."""
        return block.find_element(self.By.CSS_SELECTOR, ".request-url pre").text.strip()

    def screenshot(self, path: Path, block=None) -> Path:
        """A picture of the page, scrolled to the block's last response when given."""
        if block is not None:
            shown = block.find_elements(self.By.CSS_SELECTOR, ".live-responses-table")
            if shown:
                self.browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", shown[0])
        self.browser.save_screenshot(str(path))
        return path

