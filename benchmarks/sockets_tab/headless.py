"""Locust's web UI in a real browser: headless Chromium, driven with selenium.

    python -m benchmarks.sockets_tab.headless [--results results] [--users 20] [--seconds 15]

With a stage up (`python -m benchmarks.lab up N`), it opens the UI, starts a
swarm through the form (the stage's classes preselected), opens the Sockets
tab, waits, and saves a screenshot of it to results/up/<stage>/sockets-tab.png;
then stops the swarm. tests/lab/test_ui.py drives the same functions.

REQUIREMENTS: Debian's `chromium` and `chromium-driver` (`make setup` installs
them where apt has them: Makefile BROWSER_TOOLS), selenium (requirements.txt). No network: the
driver is Debian's, never downloaded by Selenium Manager.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks.run import results

CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1400,1100")
INSTALL = "apt-get install chromium chromium-driver  (or `make setup`, which does it)"
TAB_KEY = "sockets"


class BrowserMissing(RuntimeError):
    """No browser here that can start: said once, and the run goes on without pictures."""


def find_browser() -> tuple[str, str]:
    """(chromium, chromedriver) paths, or BrowserMissing with the install command."""
    try:
        import selenium  # noqa: F401
    except ImportError as e:
        raise BrowserMissing("selenium is not installed: pip install -r requirements.txt") from e
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        missing = [n for n, p in (("chromium", chromium), ("chromedriver", driver)) if not p]
        raise BrowserMissing(f"{' and '.join(missing)} not found. Install: {INSTALL}")
    try:  # selenium reaches its chromedriver at `localhost`: a bare image may not name it
        socket.getaddrinfo("localhost", None)
    except OSError as e:
        raise BrowserMissing("`localhost` does not resolve here (no line for it in /etc/hosts, "
                             "as in a bare image), so chromedriver cannot be reached: add "
                             "`127.0.0.1 localhost` to /etc/hosts") from e
    return chromium, driver


@contextmanager
def chromium():
    """A headless Chromium with a fresh profile, quit (and its profile removed) after."""
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = find_browser()
    with tempfile.TemporaryDirectory(prefix="ftl-chromium-") as profile:
        opts = webdriver.ChromeOptions()
        opts.binary_location = binary
        for arg in (*CHROMIUM_ARGS, f"--user-data-dir={profile}"):
            opts.add_argument(arg)
        try:
            driver = webdriver.Chrome(service=Service(executable_path=driver_path),
                                      options=opts)
        except WebDriverException as e:
            raise BrowserMissing(f"the browser did not start: {e.msg}") from e
        try:
            yield driver
        finally:
            driver.quit()


def _wait(what, seconds: float, message: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = what()
        except Exception:  # the page is re-rendering; try again
            found = None
        if found:
            return found
        time.sleep(0.3)
    raise TimeoutError(message)


def start_swarm(driver, url: str, users: int = 20, spawn_rate: int = 10) -> None:
    """Open the UI and start a swarm through its form. After a test has stopped, Locust's
    UI shows a New button instead of the form (a second call, or a test started and
    stopped in the UI): it is clicked, and its form used."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def form_or_new():
        forms = driver.find_elements(By.CSS_SELECTOR, "form")
        if forms:
            return forms[0]
        for button in driver.find_elements(By.XPATH, "//button[normalize-space()='New']"):
            button.click()  # opens the form; the next try finds it
        return None

    driver.get(url)
    form = _wait(form_or_new, 30,
                 f"no start form at {url}: Locust's UI shows neither its form nor a New "
                 "button (is a test running? stop it in the UI, or restart `lab up`)")
    for name, value in (("userCount", users), ("spawnRate", spawn_rate)):
        field = form.find_element(By.NAME, name)
        field.send_keys(Keys.CONTROL, "a")  # clear() leaves React's value in place
        field.send_keys(str(value))
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _wait(lambda: driver.find_elements(By.XPATH, "//*[@role='tab']"), 30,
          "the swarm did not start: no tabs after Start")


def open_sockets_tab(driver) -> None:
    from selenium.webdriver.common.by import By

    tab = _wait(lambda: driver.find_element(By.XPATH, "//*[@role='tab'][.//text()='Sockets']"),
                30, "no Sockets tab (is benchmarks/sockets_tab/plugin.py loaded with "
                "--sockets-csv?)")
    tab.click()
    _wait(lambda: driver.find_elements(By.ID, "sockets-chart-svg"), 30,
          "the Sockets tab shows no chart")


def table(driver) -> dict[str, list[str]]:
    """The Sockets tab's table: first cell -> the row's cells."""
    from selenium.webdriver.common.by import By

    rows = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "table tbody tr"):
        cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        if cells:
            rows[cells[0]] = cells
    return rows


def wait_for_table(driver, seconds: float = 30) -> dict[str, list[str]]:
    """The tab's table once it has its rows (it fills on the UI's next poll)."""
    return _wait(lambda: table(driver), seconds, "the Sockets tab's table stayed empty")


def redis_time_wait(driver) -> int:
    """TIME_WAIT toward Redis as the tab shows it (the row `class redis: app -> ...`)."""
    def read():
        for name, cells in table(driver).items():
            if name.startswith("class redis:") and cells[1].strip().isdigit():
                return cells[1]
        return None
    return int(_wait(read, 30, "no TIME_WAIT toward Redis in the Sockets tab"))


def wait_for_status(driver, status: str, seconds: float = 30) -> None:
    """Until the header's Status reads `status` (e.g. STOPPED)."""
    from selenium.webdriver.common.by import By

    _wait(lambda: status in driver.find_element(By.TAG_NAME, "header").text.upper(),
          seconds, f"Locust's status never read {status}")


# Locust's header: each figure is a label element followed by its value.
_SET_HEADER = """
const header = document.querySelector('header');
for (const [label, value] of Object.entries(arguments[0])) {
  for (const el of header.querySelectorAll('*')) {
    if (el.children.length === 0 && el.textContent.trim() === label && el.nextElementSibling) {
      el.nextElementSibling.textContent = value;
    }
  }
}
"""


def show_in_header(driver, figures: dict[str, str]) -> None:
    """Write figures into Locust's header ({"RPS": "40.1", "Failures": "92%"})."""
    driver.execute_script(_SET_HEADER, figures)


def wait_for_graphs(driver, count: int, seconds: float = 30) -> None:
    """Until Prometheus's graph page (its classic UI, Debian's) has drawn `count` panels'
    lines (rickshaw's SVG paths)."""
    from selenium.webdriver.common.by import By

    _wait(lambda: len(driver.find_elements(By.CSS_SELECTOR, "div.graph svg path")) >= count,
          seconds, f"Prometheus's graph page drew fewer than {count} lines")


def header_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "header").text


def stop_swarm(driver, wait: float = 0) -> None:
    """Click Stop (waiting up to `wait` seconds for the button to be drawn)."""
    from selenium.webdriver.common.by import By

    def buttons():
        return driver.find_elements(By.XPATH, "//button[normalize-space()='Stop']")
    for button in _wait(buttons, wait, "no Stop button") if wait else buttons():
        button.click()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sockets_tab.headless",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(results.RESULTS),
                   help="results folder of the `lab up` to open")
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--seconds", type=float, default=15, help="load before the screenshot")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    state_file = results.up_state(Path(args.results))
    if not state_file.exists() or "ui_url" not in results.read_json(state_file):
        print("headless: no stage is up. Start one: python -m benchmarks.lab up 0",
              file=sys.stderr)
        return 2
    state = results.read_json(state_file)
    out = Path(state["sockets_csv"]).parent / results.SOCKETS_SCREENSHOT
    try:
        with chromium() as driver:
            start_swarm(driver, state["ui_url"], users=args.users)
            open_sockets_tab(driver)
            time.sleep(args.seconds)
            driver.save_screenshot(str(out))
            stop_swarm(driver)
    except BrowserMissing as e:
        print(f"headless: {e}", file=sys.stderr)
        return 2
    print(results.rel(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
