"""The `raftlog` command's clients' one way to call a member: its client URL, a token and a CA when
given, errors as one line (ClientError)."""

from __future__ import annotations

import argparse
import ssl
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


class ClientError(Exception):
    """An error answer or no answer from the node; printed as one line."""


def request(args: argparse.Namespace, method: str, url: str, headers: dict[str, str] | None = None,
            **kwargs: Any) -> httpx.Response:
    import httpx  # the client commands' alone: a node does not pay for it at start

    headers = {**(headers or {}), **({"authorization": f"Bearer {args.token}"} if args.token else {})}
    verify = ssl.create_default_context(cafile=str(args.ca)) if args.ca else True
    try:
        response = httpx.request(method, url, headers=headers, verify=verify, timeout=10.0, **kwargs)
    except httpx.HTTPError as exc:
        raise ClientError(f"no answer from {url}: {exc}") from None
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            raise ClientError(f"{response.status_code} {error['code']}: {error['message']}")
        except (ValueError, KeyError, TypeError):
            raise ClientError(f"HTTP {response.status_code}: {response.text[:200]}") from None
    return response


def dash(value: object) -> str:
    return "-" if value is None else str(value)


def read_bodies(given: list[str], lines: bool) -> list[bytes]:
    """The bodies given as arguments, else stdin's: one a line (`lines`), or all of it as one."""
    if given:
        return [body.encode() for body in given]
    if lines:
        return [line for line in sys.stdin.buffer.read().splitlines() if line]
    return [sys.stdin.buffer.read()]
