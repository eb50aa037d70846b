"""Headless Chromium for the benchmarks that time a page in a browser (Debian's chromium and its driver).

One driver set-up for every benchmark that opens a page, so that each times the same browser the same way.
"""

from __future__ import annotations

import os
import time

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: The script that says a page has loaded.
LOADED_JS = "return document.readyState === 'complete'"
#: Seconds a page may take before the benchmark gives up on it.
TIMEOUT_S = 600


def load_s(url: str, ready_js: str = LOADED_JS) -> float | None:
    """Seconds from asking headless Chromium for `url` until `ready_js` returns true; None without chromium."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        start = time.perf_counter()
        driver.get(url)
        WebDriverWait(driver, TIMEOUT_S).until(lambda b: b.execute_script(ready_js))
        return time.perf_counter() - start
    finally:
        driver.quit()
