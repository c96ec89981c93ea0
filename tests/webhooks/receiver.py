"""A webhook receiver that verifies every delivery with the `standardwebhooks` library
(PyPI), as a plangate user's would (docs/api.md, "Webhooks").

Run: python receiver.py PORT. Each webhook gets its own path, /<mode>/<name>, whose
mode says how the receiver answers:

  ok           204
  flaky        every odd attempt of an event (1st, 3rd, ...) 500, the others 200:
               half the attempts fail
  retry-after  the first attempt of an event 503 with `Retry-After: 5`, then 200
  gone         410 Gone
  redirect     302 to /ok/<name>-redirected (a receiver that follows it would POST there)
  hang         holds the request open for 40 s, then 200
  slow-first   the first attempt of an event hangs 40 s, then 200 at once

GET /_arrivals lists every attempt as it arrived (one still held included).
The driver registers each name's secrets first: POST /_secrets/<name> {"secrets": [..]}.
Every delivery is verified with each registered secret on its own
(`standardwebhooks.Webhook(secret).verify(body, headers)`); the log at GET /_log lists
every request with its headers, its body, which secrets verified it and what was
answered. A delivery that verifies with none is answered 400 and logged so.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

LOCK = threading.Lock()
SECRETS: dict[str, list[str]] = {}
LOG: list[dict] = []
# Every attempt as it arrives, before it is answered (a held one included).
ARRIVALS: list[dict] = []
ATTEMPTS: dict[tuple[str, str], int] = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self):
        if self.path in ("/_log", "/_arrivals"):
            with LOCK:
                data = json.dumps(LOG if self.path == "/_log" else ARRIVALS).encode()
            self._answer(200, data, {"Content-Type": "application/json"})
        else:
            self._answer(404)

    def do_POST(self):
        arrived = time.time()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        parts = self.path.strip("/").split("/")
        if parts[0] == "_secrets" and len(parts) == 2:
            with LOCK:
                SECRETS[parts[1]] = json.loads(body)["secrets"]
            self._answer(204)
            return
        if len(parts) != 2:
            self._answer(404)
            return
        mode, name = parts
        headers = {k.lower(): v for k, v in self.headers.items()}
        msg_id = headers.get("webhook-id", "")
        verified = []
        errors = []
        with LOCK:
            secrets = list(SECRETS.get(name, []))
        for i, secret in enumerate(secrets):
            try:
                Webhook(secret).verify(body, headers)
                verified.append(i)
            except Exception as e:  # noqa: BLE001 - any failure is "not verified"
                errors.append(f"secret {i}: {e}")
        with LOCK:
            ARRIVALS.append({"name": name, "id": msg_id, "at": time.time()})
            key = (name, msg_id)
            ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
            attempt = ATTEMPTS[key]
        status, extra, held = 204, {}, False
        if not verified:
            status = 400
        elif mode == "flaky":
            status = 500 if attempt % 2 == 1 else 200
        elif mode == "retry-after":
            if attempt == 1:
                status, extra = 503, {"Retry-After": "5"}
            else:
                status = 200
        elif mode == "gone":
            status = 410
        elif mode == "redirect":
            status, extra = 302, {"Location": f"/ok/{name}-redirected"}
        elif mode == "hang" or (mode == "slow-first" and attempt == 1):
            time.sleep(40)
            status = 200
            held = True
        entry = {
            "mode": mode,
            "name": name,
            "id": msg_id,
            "timestamp": headers.get("webhook-timestamp"),
            "signature": headers.get("webhook-signature"),
            "content_type": headers.get("content-type"),
            "body": body.decode(errors="replace"),
            "verified_with": verified,
            "errors": errors,
            "attempt": attempt,
            "answered": status,
            # Answered only after the sender had given up (its timeout, or a kill).
            "held": held,
            "received_at": arrived,
        }
        with LOCK:
            LOG.append(entry)
        try:
            # A 204 has no body (bytes after it would be read as the next answer).
            body = b"" if status == 204 else b'{"ok": true}' if status < 300 else b"nope"
            self._answer(status, body, extra)
        except (BrokenPipeError, ConnectionResetError):
            pass


def main() -> None:
    port = int(sys.argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"receiver on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
