#!/usr/bin/env python3
"""A scripted model provider with the Anthropic Messages API's rate-limit
semantics (stdlib only): the one stand-in the CI allows.

  provider.py PORT LOG [--rpm N] [--itpm N] [--otpm N] [--burst-secs S]
              [--latency S] [--headers/--no-headers] [--spend-limit]

- POST /v1/messages answers a valid L0 review for the assignment the prompt names,
  after `--latency` seconds (±30 %).
- Three token buckets (requests, input tokens, output tokens per minute) refill
  continuously at 1/60 of the per-minute figure per second and hold
  `--burst-secs` seconds' worth. A request is admitted when each bucket holds what
  it needs (or is full); it takes 1 request, its input tokens (prompt bytes / 4)
  and its `max_tokens` of output; the unused output is given back when it ends.
  Otherwise: 429 `rate_limit_error` with `retry-after` (whole seconds, at least 1).
- Every answer carries `anthropic-ratelimit-{requests,tokens,input-tokens,
  output-tokens}-{limit,remaining,reset}` (reset in RFC 3339 with milliseconds)
  unless `--no-headers`.
- `--spend-limit`: every request is a 429 without `retry-after` saying the
  account's usage limit is reached.
- GET /stats: {"requests": [[unix_time, status], ...]} for every request seen;
  POST /limits {"rpm": N, ...} changes the limits at runtime.
Each request is also appended to LOG as `time status` lines.
"""
import argparse
import json
import math
import random
import re
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SEEN = []


class Bucket:
    def __init__(self, per_minute, burst_secs):
        self.set(per_minute, burst_secs)
        self.level = self.cap
        self.at = time.time()

    def set(self, per_minute, burst_secs):
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.cap = max(1.0, self.rate * burst_secs)

    def refill(self, now):
        self.level = min(self.cap, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait(self, need):
        want = min(need, self.cap)
        return 0.0 if self.level >= want else (want - self.level) / self.rate

    def reset_at(self, now):
        return now + max(0.0, (self.cap - self.level) / self.rate)


def rfc3339(t):
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def answer(assignment_id):
    return (
        "Here is my review.\n```\nassignment_id = %s\nchanges = []\n"
        "dependency_corrections = []\nwp_proposal_adjustments = []\n```\nDone." % assignment_id
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("log")
    p.add_argument("--rpm", type=float, default=600)
    p.add_argument("--itpm", type=float, default=2_000_000)
    p.add_argument("--otpm", type=float, default=20_000_000)
    p.add_argument("--burst-secs", type=float, default=1.0)
    p.add_argument("--latency", type=float, default=3.0)
    p.add_argument("--no-headers", action="store_true")
    p.add_argument("--spend-limit", action="store_true")
    a = p.parse_args()
    buckets = {
        "requests": Bucket(a.rpm, a.burst_secs),
        "input-tokens": Bucket(a.itpm, a.burst_secs),
        "output-tokens": Bucket(a.otpm, a.burst_secs),
    }
    log = open(a.log, "a", buffering=1)

    def headers(now):
        if a.no_headers:
            return {}
        h = {}
        for name, b in buckets.items():
            h[f"anthropic-ratelimit-{name}-limit"] = str(int(b.per_minute))
            h[f"anthropic-ratelimit-{name}-remaining"] = str(max(0, int(b.level)))
            h[f"anthropic-ratelimit-{name}-reset"] = rfc3339(b.reset_at(now))
        i, o = buckets["input-tokens"], buckets["output-tokens"]
        h["anthropic-ratelimit-tokens-limit"] = str(int(i.per_minute + o.per_minute))
        h["anthropic-ratelimit-tokens-remaining"] = str(max(0, int(min(i.level, o.level))))
        h["anthropic-ratelimit-tokens-reset"] = rfc3339(max(i.reset_at(now), o.reset_at(now)))
        return h

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, status, body, extra=None):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/stats":
                with LOCK:
                    self.send(200, {"requests": list(SEEN)})
            else:
                self.send(404, {})

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            if self.path == "/limits":
                change = json.loads(raw or b"{}")
                with LOCK:
                    now = time.time()
                    for key, name in (("rpm", "requests"), ("itpm", "input-tokens"), ("otpm", "output-tokens")):
                        if key in change:
                            buckets[name].refill(now)
                            buckets[name].set(float(change[key]), a.burst_secs)
                self.send(200, change)
                return
            if self.path != "/v1/messages":
                self.send(404, {})
                return
            body = json.loads(raw or b"{}")
            prompt = "".join(m.get("content", "") for m in body.get("messages", []) if isinstance(m.get("content"), str))
            match = re.search(r"Review ONE assignment of phase \S+:\s*`([^`]+)`", prompt)
            assignment = match.group(1) if match else "unknown"
            need = {"requests": 1, "input-tokens": math.ceil(len(prompt.encode()) / 4),
                    "output-tokens": int(body.get("max_tokens", 0))}
            with LOCK:
                now = time.time()
                if a.spend_limit:
                    SEEN.append([now, 429])
                    log.write(f"{now:.3f} 429\n")
                    status = 429
                    wait = None
                else:
                    for b in buckets.values():
                        b.refill(now)
                    wait = max(b.wait(need[n]) for n, b in buckets.items())
                    status = 200 if wait == 0 else 429
                    if status == 200:
                        for n, b in buckets.items():
                            b.level -= need[n]
                    SEEN.append([now, status])
                    log.write(f"{now:.3f} {status}\n")
                h = headers(now)
            if a.spend_limit:
                self.send(429, {"type": "error", "error": {"type": "rate_limit_error", "message":
                          "You have reached your specified API usage limits. You will regain access on 2027-01-01 at 00:00 UTC."}})
                return
            if status == 429:
                h["retry-after"] = str(max(1, math.ceil(wait)))
                self.send(429, {"type": "error", "error": {"type": "rate_limit_error",
                          "message": "Number of request tokens has exceeded your per-minute rate limit"}}, h)
                return
            time.sleep(max(0.05, a.latency * random.uniform(0.7, 1.3)))
            out = random.randint(50, 400)
            with LOCK:
                now = time.time()
                # Every bucket as it stands now: an answer's headers say where the
                # key stands when it is sent, as a real provider's do.
                for b in buckets.values():
                    b.refill(now)
                ob = buckets["output-tokens"]
                ob.level = min(ob.cap, ob.level + max(0, need["output-tokens"] - out))
                h = headers(now)
            self.send(200, {
                "id": "msg_scripted", "type": "message", "role": "assistant", "model": body.get("model"),
                "content": [{"type": "text", "text": answer(assignment)}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": need["input-tokens"], "output_tokens": out},
            }, h)

    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
