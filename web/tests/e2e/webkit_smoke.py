"""The page's smoke test in WebKit (Safari's engine): load it, play the race, switch X-ray versions,
hover a block. Driven by Selenium through Debian's WebKitWebDriver (package webkit2gtk-driver), whose
MiniBrowser needs a display: without $DISPLAY the script re-runs itself under xvfb-run (package xvfb).
Serves the built dist/ with `vite preview` on a free loopback port, with the committed data.

Usage (after `vite build`; `make -C web test` runs it): python tests/e2e/webkit_smoke.py
Env: WEBKIT_DRIVER (default /usr/bin/WebKitWebDriver), MINIBROWSER (default: Debian's path).
Prints one line per step and exits 1 on the first failure.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

WEB = Path(__file__).resolve().parents[2]
DRIVER = os.environ.get("WEBKIT_DRIVER", "/usr/bin/WebKitWebDriver")
BROWSERS = sorted(glob.glob("/usr/lib/*/webkit2gtk-4.*/MiniBrowser"))
MINIBROWSER = os.environ.get("MINIBROWSER", BROWSERS[-1] if BROWSERS else "")


def fail(msg: str) -> None:
    print(f"webkit: FAIL {msg}", file=sys.stderr)
    sys.exit(1)


def wait(what: str, fn, timeout: float = 15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = fn()
        except Exception:  # noqa: BLE001  (the page is still loading: retry until the deadline)
            v = None
        if v:
            return v
        time.sleep(0.1)
    fail(f"timed out after {timeout:.0f} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    if not (WEB / "dist" / "index.html").is_file():
        fail("dist/ is missing: run `vite build` first")
    for path, pkg in ((DRIVER, "webkit2gtk-driver"), (MINIBROWSER, "webkit2gtk-driver (its MiniBrowser)")):
        if not path or not os.access(path, os.X_OK):
            fail(f"{path or 'MiniBrowser'} not found: install {pkg} (`make deps`)")
    if not os.environ.get("DISPLAY"):
        if not shutil.which("xvfb-run"):
            fail("no $DISPLAY and no xvfb-run: install xvfb (`make deps`)")
        os.execvp("xvfb-run", ["xvfb-run", "-a", sys.executable, *sys.argv])
    try:
        from selenium import webdriver
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
        from selenium.webdriver.webkitgtk.service import Service
    except ImportError:
        fail(f"selenium is not importable by {sys.executable}: `make install` (pyproject's dev extra)")

    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    server = subprocess.Popen([str(WEB / "node_modules" / ".bin" / "vite"), "preview", "--host", "127.0.0.1", "--port", str(port),
                               "--strictPort", "--bypass-lock"], cwd=WEB, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    driver = None
    try:
        wait("vite preview", lambda: urllib.request.urlopen(base, timeout=1).status == 200)
        opts = webdriver.WebKitGTKOptions()
        opts.binary_location = MINIBROWSER
        opts.add_argument("--automation")
        driver = webdriver.WebKitGTK(options=opts, service=Service(executable_path=DRIVER))
        driver.set_window_size(1280, 900)
        js = driver.execute_script
        ua = js("return navigator.userAgent")
        print(f"webkit: {ua}")

        driver.get(base)
        wait("the page to load its data", lambda: js("return document.body.dataset.ready === '1'"))
        wait("the first Gantt frame", lambda: js("return Number(document.querySelector('#gantt').dataset.draws) > 0"))
        if js("return !document.querySelector('#status').hidden"):
            fail("the page says: " + js("return document.querySelector('#status').textContent"))
        errors = js("return [...document.querySelectorAll('.error:not([hidden])')].map(e => e.textContent)")
        if errors:
            fail(f"error boxes on the page: {errors}")
        head = driver.find_element(By.ID, "headline").text
        print(f"webkit: loaded; headline: {head}")

        lane = "#race .lane[data-lane='monolith'] .count"
        driver.find_element(By.ID, "race-play").click()
        n = wait("the race's monolith lane to count tokens",
                 lambda: (lambda t: int(t.split(" ")[0]) if t and int(t.split(" ")[0]) > 0 else None)(
                     js(f"return document.querySelector(\"{lane}\")?.textContent")))
        driver.find_element(By.ID, "race-play").click()
        print(f"webkit: race played ({n} tokens in the monolith lane)")

        v0, d0 = js("return [document.querySelector('#xray-version').selectedOptions[0].textContent, Number(document.querySelector('#gantt').dataset.draws)]")
        driver.find_element(By.ID, "xray-next").click()
        time.sleep(0.5)
        if js("return !document.querySelector('#trace-error').hidden"):
            fail("switching versions: " + js("return document.querySelector('#trace-error').textContent"))
        wait("the Gantt to draw the next version",
             lambda: js("return document.querySelector('#xray-version').selectedOptions[0].textContent !== arguments[0]"
                        " && Number(document.querySelector('#gantt').dataset.draws) > arguments[1]", v0, d0))
        v1 = js("return document.querySelector('#xray-version').selectedOptions[0].textContent")
        print(f"webkit: switched versions {v0} -> {v1}")

        canvas = driver.find_element(By.ID, "gantt")
        js("arguments[0].scrollIntoView({block: 'center'})", canvas)
        w, h = canvas.size["width"], canvas.size["height"]
        tip = None
        for i in range(24):  # rows of blocks: some y positions fall on a gap between SMs
            ActionChains(driver).move_to_element_with_offset(canvas, int(w * 0.4 - w / 2), int((0.08 + 0.035 * i) * h - h / 2)).perform()
            if js("return !document.querySelector('#gantt-tip').hidden"):
                tip = driver.find_element(By.ID, "gantt-tip").text
                break
        if not tip:
            fail("hovering the Gantt showed no tooltip")
        for k in ("phase", "layer", "block", "SM"):
            if k not in tip:
                fail(f"the tooltip lacks {k!r}: {tip!r}")
        print(f"webkit: hover tooltip: {' '.join(tip.split())[:100]}")
        print("webkit: PASS load, race, version switch, hover")
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
