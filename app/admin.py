"""The admin status page at `/`: one self-contained HTML file shipped in the package.

It reads `/v1/cluster` and `/metrics` once a second from whichever node
serves it, so it works the same on the leader and on any follower. Its
Content-Security-Policy allows its own inline script and style, by hash, and
calls to the member that served it: nothing else runs or loads there.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from raftlog.api.browser import page_policy

PAGE = files("raftlog.app") / "admin" / "index.html"


def install_admin_page(app: FastAPI) -> None:
    html = PAGE.read_text(encoding="utf-8")
    headers = {"Cache-Control": "no-cache", "Content-Security-Policy": page_policy(html)}

    @app.get("/", include_in_schema=False)
    async def admin_page() -> HTMLResponse:
        return HTMLResponse(html, headers=headers)
