#!/usr/bin/env python3
"""How long the dashboard takes to draw its list pages (stdlib only).

  page_draw.py BASE COUNT

Gets each page COUNT times, one after another, and times the whole answer: a live
page is drawn again each time its change marker moves, up to twice a second while
jobs run. Prints one line a page: `page p50 p95 max` in milliseconds.
"""
import http.client
import statistics
import sys
import time
from urllib.parse import urlparse

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
    base, count = sys.argv[1], int(sys.argv[2])
    url = urlparse(base)
    for page, path in PAGES.items():
        draw_ms(url.hostname, url.port, path)  # warm-up
        times = sorted(draw_ms(url.hostname, url.port, path) for _ in range(count))
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        print(f"{page} {statistics.median(times):.2f} {p95:.2f} {times[-1]:.2f}")


if __name__ == "__main__":
    main()
