"""The admin status page at `/`: one self-contained HTML file shipped in the package.

It reads `/v1/cluster` and `/metrics` once a second from whichever node
serves it, so it works the same on the leader and on any follower.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

PAGE = files("app") / "admin" / "index.html"


def install_admin_page(app: FastAPI) -> None:
    html = PAGE.read_text(encoding="utf-8")

    @app.get("/", include_in_schema=False)
    async def admin_page() -> HTMLResponse:
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})
