#!/usr/bin/env python3
"""Load driver for bench/claims.sh (stdlib only): a fleet of agents on one task list.

  claims.py create BASE N                 create an N-task list; prints its id and
                                          the seconds the create took
  claims.py claims BASE LIST CLAIMERS S   CLAIMERS threads loop claim -> PATCH done
                                          for S seconds (or until the list is done)
  claims.py cascade BASE LIST WRITERS S   WRITERS threads, half claiming and
                                          completing, half abandoning a pending task
                                          (a cascade over its descendants)
  claims.py wakeup BASE_A BASE_B ROUNDS   a long-poll `ready?wait=` on replica B for
                                          a task that waits on one running on A:
                                          from the `PATCH done` sent to A to B's
                                          answer, p50/p95 over ROUNDS
  claims.py wakeup BASE_A BASE_B ROUNDS stream
                                          the same, with B following the list's
                                          event stream until the `done` arrives

Every thread keeps one keep-alive connection. Prints one line of figures
(`key=value`) for claims.sh to tabulate; any non-2xx answer (other than the 409s
a cascade race can give) counts as an error.
"""
import json
import random
import socket
import sys
import threading
import time
from urllib.parse import urlparse


class Client:
    """One keep-alive HTTP/1.1 connection on a raw socket: the load generator shares
    the two cores with the server and Postgres, and `http.client` (header parsing
    by `email.parser`) spent about a tenth of them; this reads the status line and
    `content-length` only."""

    def __init__(self, base):
        u = urlparse(base)
        self.host, self.port = u.hostname, u.port
        self.sock = None

    def connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A bytearray grows in place: `bytes +=` copied the whole answer at every
        # read, quadratic in its size (a 100,000-task create answers tens of MB).
        self.buf = bytearray()

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-length: {len(data)}\r\n"
        if body is not None:
            head += "content-type: application/json\r\n"
        request = head.encode() + b"\r\n" + data
        for attempt in range(2):
            try:
                if self.sock is None:
                    self.connect()
                self.sock.sendall(request)
                return self.response()
            except (ConnectionError, OSError):
                if self.sock is not None:
                    self.sock.close()
                self.sock = None
                if attempt:
                    raise

    def response(self):
        while b"\r\n\r\n" not in self.buf:
            self.recv()
        end = self.buf.index(b"\r\n\r\n")
        head = bytes(self.buf[:end])
        del self.buf[:end + 4]
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buf) < length:
            self.recv()
        payload = bytes(self.buf[:length])
        del self.buf[:length]
        return status, payload

    def recv(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk


def task_list(n):
    """N tasks in 10 waves; each task after the first wave depends on two tasks of
    the wave before (like a real plan), every task writes its own file."""
    waves = 10
    per = max(n // waves, 1)
    tasks = []
    for p in range(n):
        wave = min(p // per, waves - 1) + 1
        first_prev = (wave - 2) * per
        deps = [] if wave == 1 else [f"T{first_prev + (p + k) % per}" for k in range(2)]
        tasks.append({
            "task_id": f"T{p}", "assigned_persona": "backend" if p % 4 else "qa",
            "parallel_group": wave, "depends_on": deps,
            "reads": [f"src/mod{p % 10}.rs"], "writes": [f"src/part{p}.rs"],
            "description": f"Implement part {p} of the feature.",
        })
    return {"project_id": "bench", "created_by": "bench", "tasks": tasks,
            "existing_files": [f"src/mod{i}.rs" for i in range(10)]}


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def create(base, n):
    c = Client(base)
    body = task_list(n)
    t0 = time.monotonic()
    status, payload = c.call("POST", "/v1/task-lists", body)
    secs = time.monotonic() - t0
    if status != 201:
        raise SystemExit(f"create: {status} {payload[:300]!r}")
    print(json.loads(payload)["id"], f"{secs:.3f}")


def claims(base, list_id, claimers, seconds):
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    claim_ms, done, errors, finished = [], [0], [0], [False]

    def agent(i):
        c = Client(base)
        holder = f"agent-{i}"
        while time.monotonic() < deadline and not finished[0]:
            t0 = time.monotonic()
            status, payload = c.call("POST", f"/v1/task-lists/{list_id}/claim", {"holder": holder})
            ms = (time.monotonic() - t0) * 1000
            if status != 200:
                with lock:
                    errors[0] += 1
                time.sleep(0.05)
                continue
            answer = json.loads(payload)
            with lock:
                claim_ms.append(ms)
            task = answer.get("task")
            if task is None:
                if answer["next"] in ("done", "blocked"):
                    finished[0] = True
                    return
                time.sleep(0.005)
                continue
            status, payload = c.call("PATCH", f"/v1/tasks/{task['id']}",
                                     {"status": "done", "holder": holder})
            with lock:
                if status == 200:
                    done[0] += 1
                else:
                    errors[0] += 1

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(claimers)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    print(f"tasks_per_s={done[0] / elapsed:.1f} done={done[0]} claims={len(claim_ms)} "
          f"claim_p50_ms={pct(claim_ms, 50):.1f} claim_p99_ms={pct(claim_ms, 99):.1f} "
          f"errors={errors[0]} seconds={elapsed:.1f}")


def cascade(base, list_id, writers, seconds):
    c = Client(base)
    status, payload = c.call("GET", f"/v1/task-lists/{list_id}")
    ids = [t["id"] for t in json.loads(payload)["tasks"]]
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    cascade_ms, other_ms, errors = [], [], [0]

    def claimer(i):
        c = Client(base)
        holder = f"agent-{i}"
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            status, payload = c.call("POST", f"/v1/task-lists/{list_id}/claim",
                                     {"holder": holder, "mode": "pipeline"})
            if status != 200:
                with lock:
                    errors[0] += 1
                continue
            answer = json.loads(payload)
            task = answer.get("task")
            if task is None:
                if answer["next"] in ("done", "blocked"):
                    return
                time.sleep(0.01)
                continue
            status, _ = c.call("PATCH", f"/v1/tasks/{task['id']}", {"status": "done", "holder": holder})
            with lock:
                other_ms.append((time.monotonic() - t0) * 1000)
                # 409: a cascade abandoned the task between the claim and the PATCH.
                if status not in (200, 409):
                    errors[0] += 1

    def abandoner(i):
        c = Client(base)
        rng = random.Random(i)
        while time.monotonic() < deadline:
            task = rng.choice(ids)
            t0 = time.monotonic()
            status, _ = c.call("PATCH", f"/v1/tasks/{task}",
                               {"status": "abandoned", "abandon_category": "scope", "force": True})
            ms = (time.monotonic() - t0) * 1000
            with lock:
                if status == 200:
                    cascade_ms.append(ms)
                elif status != 409:  # already terminal
                    errors[0] += 1
            time.sleep(0.02)

    threads = [threading.Thread(target=claimer if i % 2 else abandoner, args=(i,))
               for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"cascades={len(cascade_ms)} cascade_p50_ms={pct(cascade_ms, 50):.1f} "
          f"cascade_p99_ms={pct(cascade_ms, 99):.1f} claim_done_p99_ms={pct(other_ms, 99):.1f} "
          f"errors={errors[0]}")


def wakeup(base_a, base_b, rounds, stream=False):
    a = Client(base_a)
    ms = []
    for r in range(rounds):
        body = {"project_id": "bench", "created_by": "bench", "tasks": [
            {"task_id": "T1", "assigned_persona": "dev", "parallel_group": 1, "depends_on": [],
             "reads": [], "writes": ["a.rs"], "description": "first"},
            {"task_id": "T2", "assigned_persona": "dev", "parallel_group": 2, "depends_on": ["T1"],
             "reads": [], "writes": ["b.rs"], "description": "second"}]}
        status, payload = a.call("POST", "/v1/task-lists", body)
        list_id = json.loads(payload)["id"]
        status, payload = a.call("POST", f"/v1/task-lists/{list_id}/claim", {"holder": "w"})
        task = json.loads(payload)["task"]["id"]
        answered = {}

        def poll():
            b = Client(base_b)
            status, payload = b.call("GET", f"/v1/task-lists/{list_id}/ready?wait=10")
            answered["at"] = time.monotonic()
            answered["next"] = json.loads(payload)["next"]

        def follow():
            # The list's event stream on the other replica, until T1's `done`.
            import http.client
            import urllib.parse
            u = urllib.parse.urlparse(base_b)
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            conn.request("GET", f"/v1/task-lists/{list_id}/events")
            response = conn.getresponse()
            ready.set()
            while True:
                line = response.readline().decode()
                if line.startswith("data:") and '"to_status":"done"' in line:
                    answered["at"] = time.monotonic()
                    answered["next"] = "dispatch"
                    break
            conn.close()

        ready = threading.Event()

        t = threading.Thread(target=follow if stream else poll)
        t.start()
        if stream:
            ready.wait(10)
        time.sleep(0.3)  # the long-poll is waiting
        sent = time.monotonic()
        a.call("PATCH", f"/v1/tasks/{task}", {"status": "done", "holder": "w"})
        t.join()
        if answered.get("next") != "dispatch":
            raise SystemExit(f"round {r}: the long-poll answered {answered}")
        ms.append((answered["at"] - sent) * 1000)
    print(f"wakeup_p50_ms={pct(ms, 50):.1f} wakeup_p95_ms={pct(ms, 95):.1f} rounds={rounds}"
          + (" via=event-stream" if stream else " via=ready?wait="))


if __name__ == "__main__":
    cmd, base = sys.argv[1], sys.argv[2]
    if cmd == "create":
        create(base, int(sys.argv[3]))
    elif cmd == "claims":
        claims(base, sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    elif cmd == "wakeup":
        wakeup(base, sys.argv[3], int(sys.argv[4]), stream=len(sys.argv) > 5 and sys.argv[5] == "stream")
    elif cmd == "cascade":
        cascade(base, sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    else:
        raise SystemExit(__doc__)
