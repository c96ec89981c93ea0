"""Harness for the dashboard's browser tests: the real plangate binary on a real
port against a fresh SQLite file or Postgres database, and Debian's chromium
driven by Playwright (its own browser download is not used).

Environment:
  PLANGATE_BIN          the server binary (default target/debug/plangate)
  PLANGATE_TEST_PG_URL  Postgres admin URL (default postgres://postgres@127.0.0.1:5432/postgres)
  UI_TEST_OUTPUT        where screenshots go (default target/ui-tests)
  CHROMIUM              the browser (default /usr/bin/chromium)
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plangate_server import L0, ROOT, Plangate, call, start  # noqa: E402

BIN = Path(os.environ.get("PLANGATE_BIN", ROOT / "target/debug/plangate"))
OUTPUT = Path(os.environ.get("UI_TEST_OUTPUT", ROOT / "target/ui-tests"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


@dataclass
class Server(Plangate):
    token: str | None = None

    def api(self, method: str, path: str, body=None, token: str | None = None):
        """Calls the JSON API; returns (status, parsed body or text)."""
        bearer = token or self.token
        return call(method, self.base + path, body, {"Authorization": f"Bearer {bearer}"} if bearer else None)

    def ok(self, method: str, path: str, body=None):
        status, answer = self.api(method, path, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {answer}"
        return answer


CONFIG = (
    "l0_concurrency = 1\n"
    "[executors.slow]\nkind = \"command\"\n"
    f"argv = [\"{L0}\", \"sleep\", \"1.2\"]\ntimeout_secs = 60\n"
    "[executors.hang]\nkind = \"command\"\n"
    f"argv = [\"{L0}\", \"hang\"]\ntimeout_secs = 600\n"
    # Every call fails (no answer): the job still succeeds, degraded.
    "[executors.fail]\nkind = \"command\"\n"
    f"argv = [\"{L0}\", \"fail\"]\ntimeout_secs = 60\n"
    # CLI agents printing a `claude -p --output-format json` envelope: a
    # reported cost ($0.0123 per call), no cost for a model with a price
    # (priced from the table), no cost for a model without one (unknown).
    "[executors.cj]\nkind = \"command\"\noutput = \"claude-json\"\n"
    f"argv = [\"{L0}\", \"claude-json\", \"0.0123\", \"1000\", \"200\"]\ntimeout_secs = 60\n"
    "[executors.cj-priced]\nkind = \"command\"\noutput = \"claude-json\"\n"
    f"argv = [\"{L0}\", \"claude-json\", \"none\", \"1000000\", \"100000\"]\ntimeout_secs = 60\n"
    "[executors.cj-unpriced]\nkind = \"command\"\noutput = \"claude-json\"\n"
    f"argv = [\"{L0}\", \"claude-json\", \"none\", \"1000\", \"200\", \"claude-unpriced\"]\n"
    "timeout_secs = 60\n"
    "[prices.\"claude-fake\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n"
)


def start_server(backend: str, tokens: str | None = None, admin_token: str | None = None) -> Server:
    env = dict(RUST_LOG="warn", PLANGATE_API_TOKENS=tokens or "")
    started = start(BIN, backend, CONFIG, env, prefix="plangate-ui-")
    return Server(**vars(started), token=admin_token)


def stop_server(server: Server) -> None:
    server.cleanup()
    errors = server.errors()
    assert not errors, "the server logged errors:\n" + "\n".join(errors[:20])


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    return request.param


@pytest.fixture
def output(request) -> Path:
    """This test's output folder (screenshots)."""
    safe = request.node.name.replace("[", "-").replace("]", "").replace("/", "_")
    folder = OUTPUT / safe
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Watched:
    """A page whose console errors, page errors, failed requests, HTTP errors and
    dialogs are recorded, so a test can assert there were none."""

    def __init__(self, page, expected_statuses=()):
        self.page = page
        self.problems: list[str] = []
        self.dialogs: list[str] = []
        self.expected = set(expected_statuses)
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", self._failed)
        page.on("response", self._response)
        page.on("dialog", self._dialog)

    def _console(self, message):
        if message.type != "error":
            return
        # The browser logs every 4xx; the ones a test provokes on purpose are fine.
        for status in self.expected:
            if f"status of {status} " in message.text:
                return
        self.problems.append(f"console: {message.text}")

    def _failed(self, request):
        failure = request.failure or ""
        # Navigating away aborts an open event stream and a favicon still loading:
        # the browser's doing, not a failure of the page.
        # (An event stream's address may carry the page's query: `?wave=5`.)
        path = request.url.split("?", 1)[0]
        if "ERR_ABORTED" in failure and path.endswith(("/events", "/icon.svg")):
            return
        # Likewise a page's own background re-read (fetch) when a form navigates.
        if "ERR_ABORTED" in failure and request.resource_type == "fetch":
            return
        self.problems.append(f"request failed: {request.url} {failure}")

    def _response(self, response):
        if response.status >= 400 and response.status not in self.expected:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self):
        assert not self.problems, "\n".join(self.problems)
        assert not self.dialogs, f"dialogs opened: {self.dialogs}"


@contextmanager
def watched_page(browser, **options):
    """A page in a new browser context (with `options`), watched: once the
    block ends the page must have had no problem, and the context closes."""
    context = browser.new_context(**options)
    page = context.new_page()
    watched = Watched(page)
    yield page, watched
    watched.assert_clean()
    context.close()
