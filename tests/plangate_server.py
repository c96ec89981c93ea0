"""The real plangate server for the Python suites (tests/ui, tests/traces): one way
to start it on a free port against a fresh SQLite file or Postgres database with a
given config, to call its JSON API, and to stop it (SIGTERM, which flushes what it
holds) and drop its database.

Environment: PLANGATE_TEST_PG_URL, the Postgres admin URL
(default postgres://postgres@127.0.0.1:5432/postgres).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
L0 = ROOT / "tests/fixtures/l0/l0.sh"
PG_ADMIN = os.environ.get("PLANGATE_TEST_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")


class StartFailed(RuntimeError):
    pass


class CheckFailed(Exception):
    """A check of a driver script (tests/webhooks, tests/traces) that did not hold."""


def check(condition, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def task(task_id, wave, deps=(), reviews=None, description=None, persona="coder"):
    """A task of a task list: it writes its own file, or reviews `reviews` (and
    writes nothing)."""
    t = {
        "task_id": task_id,
        "assigned_persona": persona,
        "parallel_group": wave,
        "depends_on": list(deps),
        "reads": [],
        "writes": [f"src/{task_id.lower()}.rs"],
        "description": description or f"Do {task_id}.",
    }
    if reviews:
        t["reviews"] = reviews
        t["writes"] = []
    return t


def new_database(backend: str, work: Path, prefix: str = "plangate_test_py") -> tuple[str, str | None]:
    """`(url, name to drop)` of a fresh database: a SQLite file in `work`, or a new
    Postgres database (then its name, for `drop_database`)."""
    if backend == "sqlite":
        return f"sqlite://{work}/plangate.db", None
    name = f"{prefix}_{secrets.token_hex(6)}"
    subprocess.run(["psql", PG_ADMIN, "-qc", f"CREATE DATABASE {name}"], check=True)
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name, name


def drop_database(name: str) -> None:
    subprocess.run(["psql", PG_ADMIN, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(method: str, url: str, body=None, headers=None):
    """(status, parsed JSON or text) of one request; a JSON body when `body` is given."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@dataclass
class Plangate:
    """A running server: `base` URL, its process, its log file, the database to drop."""

    base: str
    process: subprocess.Popen
    log: Path
    drop: str | None = None

    def stop(self, timeout: float = 30) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def cleanup(self, timeout: float = 30) -> None:
        """Stops the server and drops its Postgres database, if it has one."""
        self.stop(timeout)
        if self.drop:
            drop_database(self.drop)
            self.drop = None

    def errors(self) -> list[str]:
        """The error lines and panics of its log."""
        return [
            line
            for line in self.log.read_text().splitlines()
            if '"level":"ERROR"' in line or "panicked" in line
        ]


def start(binary: Path, backend: str, config: str, env: dict[str, str], *, prefix: str = "plangate-",
          drop_env: tuple[str, ...] = (), database_url: str | None = None) -> Plangate:
    """Starts `binary serve` with `config` (TOML) on `backend` ("sqlite" or
    "postgres") and `env` over this process's environment (less the variables
    named with a prefix in `drop_env`); answers once /readyz does. With
    `database_url` it joins that database (a replica, or a restart) and drops
    nothing when it stops."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    url, drop = (database_url, None) if database_url is not None else new_database(backend, work)
    (work / "plangate.toml").write_text(config)
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(drop_env)}
    full_env.update(
        DATABASE_URL=url,
        PLANGATE_BIND=f"127.0.0.1:{port}",
        PLANGATE_CONFIG=str(work / "plangate.toml"),
        PLANGATE_LOG_FORMAT="json",
    )
    full_env.update(env)
    log = work / "server.log"
    process = subprocess.Popen([str(binary), "serve"], env=full_env, stdout=log.open("w"),
                               stderr=subprocess.STDOUT)
    server = Plangate(base=f"http://127.0.0.1:{port}", process=process, log=log, drop=drop)
    for _ in range(300):
        if process.poll() is not None:
            server.cleanup()
            raise StartFailed(f"plangate exited at start:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(server.base + "/readyz", timeout=2):
                return server
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    server.cleanup()
    raise StartFailed(f"plangate did not become ready:\n{log.read_text()}")
