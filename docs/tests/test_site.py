"""The built site (``mkdocs build`` into site/), checked as a reader meets it.

The API reference holds every public name of the eight packages; and in a real browser
(Debian's headless Chromium, driven by Selenium through Debian's chromedriver) the home page
renders, the search finds ``namedarraytuple`` and rl-replay's API page lists ``ReplayBuffer``.
A screenshot of each lands in ``artifacts/docs/`` for a person to look at.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import shutil
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
SCREENSHOTS = ROOT / "artifacts" / "docs"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# Chromium as root on a machine with no network: no sandbox (root), no GPU, and none of its
# background connections (each would be refused and retried).
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
]
WAIT_S = 30


def _hook():
    """docs/hooks/api_pages.py, which knows the packages and reads their ``__all__``."""
    spec = importlib.util.spec_from_file_location("api_pages", ROOT / "docs/hooks/api_pages.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inventory() -> dict[str, str]:
    """site/objects.inv (Sphinx's inventory, which mkdocstrings writes): name -> page URL."""
    data = (SITE / "objects.inv").read_bytes()
    header_lines = 4
    body = zlib.decompress(data.split(b"\n", header_lines)[header_lines]).decode()
    entries = {}
    for line in body.splitlines():
        name, _domain_role, _priority, location = line.split(" ", 4)[:4]
        entries[name] = location
    return entries


def test_site_was_built() -> None:
    assert (SITE / "index.html").is_file(), "build the site first: mkdocs build --strict"


def test_reference_lists_every_public_name() -> None:
    hook, entries = _hook(), inventory()
    anchors = {location for location in entries.values()}
    missing = []
    for package in hook.PACKAGES:
        module = hook.module_name(package)
        names = hook.public_names(package)
        assert names, package
        missing += [
            f"{module}.{name}"
            for name in names
            if f"reference/{package}/#{module}.{name}" not in anchors
        ]
    assert not missing, f"public names with no entry in the API reference: {missing}"


def test_umbrella_page_documents_only_its_own_names() -> None:
    # (its re-exports are one name each on their home pages, linked from the umbrella's page)
    umbrella = (SITE / "reference" / "rl-suite" / "index.html").read_text()
    for package in _hook().PACKAGES[:-1]:
        assert f'href="../{package}/"' in umbrella, package


@pytest.fixture(scope="module")
def site_url() -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    for program in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(program), (
            f"{program} is missing: apt-get install chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(browser: WebDriver, selector: str, text: str = ""):
    """The first element under ``selector`` (holding ``text``) once it is visible."""
    condition = (
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text)
        if text
        else expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, selector))
    )
    WebDriverWait(browser, WAIT_S).until(condition)
    return browser.find_element(By.CSS_SELECTOR, selector)


def test_home_page_renders(browser: WebDriver, site_url: str) -> None:
    browser.get(site_url)
    heading = wait_for(browser, "article h1")
    assert heading.text == "rl-suite"
    assert "rl-suite" in browser.title
    # Material's own script ran: it draws the navigation, whose entries are links to our pages.
    navigation = [link.text for link in browser.find_elements(By.CSS_SELECTOR, ".md-nav__link")]
    assert "Getting started" in navigation, navigation
    browser.save_screenshot(str(SCREENSHOTS / "home.png"))


def test_search_finds_namedarraytuple(browser: WebDriver, site_url: str) -> None:
    browser.get(site_url)
    field = wait_for(browser, "input.md-search__input")  # (in the header, at this width)
    field.click()
    field.send_keys("namedarraytuple")
    wait_for(browser, ".md-search-result__list", "namedarraytuple")
    results = browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item")
    assert results, "the search listed nothing"
    links = [item.find_element(By.TAG_NAME, "a").get_attribute("href") for item in results]
    assert any("reference/rl-arrays/" in link for link in links), links
    browser.save_screenshot(str(SCREENSHOTS / "search-namedarraytuple.png"))


def test_replay_reference_lists_replay_buffer(browser: WebDriver, site_url: str) -> None:
    browser.get(site_url + "reference/rl-replay/")
    entry = wait_for(browser, "[id='rl_replay.ReplayBuffer']")
    assert "ReplayBuffer" in entry.text
    browser.execute_script("arguments[0].scrollIntoView();", entry)
    signature = entry.find_element(By.XPATH, "following::*[contains(@class, 'doc-signature')][1]")
    assert "ReplayBuffer(" in signature.text.replace("\n", "")
    browser.save_screenshot(str(SCREENSHOTS / "rl-replay-reference.png"))
