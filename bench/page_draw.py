#!/usr/bin/env python3
"""How long the dashboard takes to draw its list pages (stdlib only).

  page_draw.py BASE COUNT

Gets each page COUNT times, one after another, and times the whole answer: a live
page is drawn again each time its change marker moves, up to twice a second while
jobs run. Prints one line a page: `page p50 p95 max` in milliseconds.
"""
import http.client
import time

from live_marker import report

PAGES = {
    "overview": "/ui/",
    "jobs": "/ui/jobs",
    "jobs:project": "/ui/jobs?project=project-7",
    "jobs:degraded": "/ui/jobs?status=degraded",
    "jobs:search": "/ui/jobs?q=phase-2",
}


def draw_ms(host, port, path):
    conn = http.client.HTTPConnection(host, port, timeout=60)
    start = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - start) * 1000
    conn.close()
    if response.status != 200:
        raise SystemExit(f"{path}: {response.status} {body[:200]!r}")
    return elapsed


def main():
    report(PAGES.items(), draw_ms)


if __name__ == "__main__":
    main()
