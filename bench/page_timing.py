#!/usr/bin/env python3
"""The dashboard's task-list page in a real browser (docs/architecture.md, "The
dashboard's task-list page"): the server's answer time and Chromium's
DOMContentLoaded and load, for the page of a list and for one wave of it.

  page_timing.py BASE LIST_ID [ROUNDS]

Runs with the UI test venv's Playwright (target/ui-venv, .ci/ui.sh) and Debian's
chromium (CHROMIUM, default /usr/bin/chromium). Prints one `key=value` line per
page: the median over ROUNDS (default 5) fresh page loads."""
import json
import os
import statistics
import sys
import time
import urllib.request

from playwright.sync_api import sync_playwright


def server_ms(url):
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as r:
        r.read()
    return (time.monotonic() - t0) * 1000


def main():
    base, list_id = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    pages = {"list": f"{base}/ui/task-lists/{list_id}", "wave": f"{base}/ui/task-lists/{list_id}?wave=2"}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
        for name, url in pages.items():
            srv, dcl, load = [], [], []
            for _ in range(rounds):
                srv.append(server_ms(url))
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.goto(url, wait_until="load", timeout=120_000)
                nav = page.evaluate("JSON.stringify(performance.getEntriesByType('navigation')[0])")
                nav = json.loads(nav)
                dcl.append(nav["domContentLoadedEventEnd"])
                load.append(nav["loadEventEnd"])
                page.close()
            print(f"page={name} server_ms={statistics.median(srv):.0f} "
                  f"dom_content_loaded_ms={statistics.median(dcl):.0f} load_ms={statistics.median(load):.0f} rounds={rounds}")
        browser.close()


if __name__ == "__main__":
    main()
