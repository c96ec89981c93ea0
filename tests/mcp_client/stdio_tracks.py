"""Tracks over stdio with no server at all (docs/mcp.md): `import_track` then
`track_step` through the official MCP Python SDK against `plangate mcp`, and the
default database in the user's data directory when no DATABASE_URL is set.

Called from flow.py: `await check_stdio_tracks(binary, env)`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from mcp import Client, StdioServerParameters

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(f"stdio tracks: {message}")


async def _call(client: Client, name: str, arguments: dict, expect_error: bool = False):
    result = await client.call_tool(name, arguments)
    text = "".join(block.text for block in result.content if block.type == "text")
    _check(bool(result.is_error) == expect_error, f"{name}: is_error={result.is_error}: {text[:500]}")
    return json.loads(text)


async def _import_then_step(client: Client, track_id: str) -> None:
    document = json.loads((EXAMPLES / "metadata_v1.json").read_text())
    document.pop("track_id", None)
    imported = await _call(client, "import_track", {"track_id": track_id, "metadata": document,
                                                    "project_id": "proj-stdio-tracks"})
    _check(imported["created"] is True and imported["track_id"] == track_id
           and imported["legal_next"] == [f"start {imported['current_step']}"],
           f"import {imported}")
    step = imported["current_step"]
    started = await _call(client, "track_step", {"track_id": track_id, "step": step, "action": "start",
                                                 "agent": "planner", "if_match": imported["revision"]})
    _check(started["step_status"] == "IN_PROGRESS" and started["revision"] == imported["revision"] + 1,
           f"start {started}")
    # A re-import pinned to the old revision changes nothing.
    stale = await _call(client, "import_track", {"track_id": track_id, "metadata": document,
                                                 "if_match": imported["revision"]}, expect_error=True)
    _check(stale["code"] == "stale_etag", f"stale import {stale}")
    done = await _call(client, "track_step", {"track_id": track_id, "step": step, "action": "complete",
                                              "outcome": "PASSED", "if_match": started["revision"]})
    _check(done["current_step"] != step and done["revision"] == started["revision"] + 1,
           f"complete {done}")
    bad = await _call(client, "import_track", {"track_id": "no spaces", "metadata": {}},
                      expect_error=True)
    _check(bad["code"] == "invalid_track_id", f"bad id {bad}")


async def check_stdio_tracks(binary: str, env: dict[str, str]) -> None:
    """import_track -> track_step over stdio on `env`'s database, then the same on
    the default database of a user whose HOME is a scratch directory."""
    params = StdioServerParameters(command=binary, args=["mcp"], env=env)
    async with Client(params, mode="legacy", cache=None) as client:
        await _import_then_step(client, "track-stdio-import")

    with tempfile.TemporaryDirectory(prefix="plangate-home-") as home:
        local = {k: v for k, v in env.items() if k not in ("DATABASE_URL", "XDG_DATA_HOME")}
        local["HOME"] = home
        params = StdioServerParameters(command=binary, args=["mcp"], env=local, cwd=home)
        async with Client(params, mode="legacy", cache=None) as client:
            await _import_then_step(client, "track-home")
        database = Path(home) / ".local" / "share" / "plangate" / "plangate.db"
        _check(database.is_file(), f"no database at {database}")
        _check(oct(database.parent.stat().st_mode & 0o777) == oct(0o700),
               f"{database.parent} is not private")
        _check(not (Path(home) / "plangate.db").exists(), "a plangate.db in the working directory")
