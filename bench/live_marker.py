#!/usr/bin/env python3
"""How long a live list page waits for its stream's first event (stdlib only).

  live_marker.py BASE COUNT

For each live page (overview, jobs, runs, tracks), opens `/ui/live/{page}/events`
COUNT times, one after another, and times the first event (`ready`): the server
reads the page's change marker once before sending it, and an open page reads it
again twice a second. Prints one line a page: `page p50 p95 max` in milliseconds.
"""
import http.client
import statistics
import sys
import time
from urllib.parse import urlparse


def first_event_ms(host, port, path):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    start = time.perf_counter()
    conn.request("GET", path, headers={"accept": "text/event-stream"})
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit(f"{path}: {response.status} {response.read()[:200]!r}")
    seen = b""
    while b"\n\n" not in seen:
        chunk = response.fp.read1(4096)
        if not chunk:
            raise SystemExit(f"{path}: the stream ended before its first event")
        seen += chunk
    elapsed = (time.perf_counter() - start) * 1000
    conn.close()
    if b"event: ready" not in seen:
        raise SystemExit(f"{path}: the first event is not ready: {seen!r}")
    return elapsed


def report(pages, measure):
    """For each `(page, path)`: one warm-up, then COUNT timings of `measure(host,
    port, path)` one after another; prints `page p50 p95 max` in milliseconds."""
    base, count = sys.argv[1], int(sys.argv[2])
    url = urlparse(base)
    for page, path in pages:
        measure(url.hostname, url.port, path)  # warm-up
        times = sorted(measure(url.hostname, url.port, path) for _ in range(count))
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        print(f"{page} {statistics.median(times):.2f} {p95:.2f} {times[-1]:.2f}")


def main():
    pages = [(page, f"/ui/live/{page}/events") for page in ["overview", "jobs", "runs", "tracks"]]
    report(pages, first_event_ms)


if __name__ == "__main__":
    main()
