"""`raftlog serve --join URL`: a new member asks the group to add it as a learner.

The group answers once the change is committed, with the configuration that
holds the new member; the member saves it in its checkpoint and starts from it
(never from its `peers` setting, which names only itself: a group of one of its
own). A member the group already holds at the same peer address (a join asked
again after a crash) takes the group's configuration as it is.

Over https the member asked is checked against the group's own CA (join_ca,
else peer_tls_ca), not only the system's; an answer is read up to
ANSWER_BYTES_MAX; a token about to go beyond loopback in cleartext is said so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from raftlog.api.auth import is_loopback
from raftlog.api.browser import host_name
from raftlog.app.settings import NodeSettings, SettingsError
from raftlog.raft.membership import Configuration, MembershipError

log = logging.getLogger("raftlog.join")

JOIN_TIMEOUT_S = 60.0  # the group may be electing a leader, or refusing while another change commits
RETRY_S = 1.0
CALL_TIMEOUT_S = 15.0  # the add answers once committed: a quorum's round trips, forwarded to the leader
ANSWER_BYTES_MAX = 1 << 20  # a configuration of many members is a few KiB
RETRY_CODES = frozenset({"NOT_LEADER", "CHANGE_IN_FLIGHT", "LEADER_TRANSFERRING", "SERVER_BUSY", "NETWORK_ERROR",
                         "WAIT_QUORUM_ACK_TIMEOUT", "TERM_CHANGED", "TIMEOUT"})


async def join_group(settings: NodeSettings) -> Configuration:
    """The committed configuration that holds this member, as the group answered it; SettingsError
    with one line when the group refuses."""
    assert settings.join is not None
    url = settings.join.rstrip("/")
    headers = {} if settings.join_token is None else {
        "authorization": f"Bearer {settings.join_token.get_secret_value()}"}
    me = {"id": settings.id, "peer_address": settings.advertised_peer_address, "client_url": settings.client_url,
          "grpc_address": settings.grpc_address, "learner": True}
    host = host_name(urlsplit(url).netloc)
    if headers and url.startswith("http://") and not is_loopback(host):
        log.warning("join %s: the join token goes to %s in cleartext: anyone who sees the traffic can take an "
                    "admin token; join through the member's https:// URL", url, host)
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    async with httpx.AsyncClient(timeout=CALL_TIMEOUT_S, headers=headers, verify=settings.join_tls()) as client:
        while True:
            try:
                answer = await _call(client, "POST", f"{url}/v1/cluster/members", json=me)
                if answer.status_code == 409 and _code(answer) == "MEMBER_EXISTS":
                    answer = await _call(client, "GET", f"{url}/v1/cluster/members")
                    configuration = _configuration(answer, url)
                    held = configuration.member(settings.id)
                    if held is None or held.address != me["peer_address"]:
                        raise SettingsError(f"join {url}: {_message(answer) or 'the id or address is taken'}; the "
                                            f"group holds {held.address if held else 'another member there'}")
                    log.info("%s is a member of the group already (entry %d)", settings.id, configuration.index)
                    return configuration
                if answer.status_code == 201:
                    configuration = _configuration(answer, url)
                    log.info("%s joined the group as a learner (entry %d)", settings.id, configuration.index)
                    return configuration
                if _code(answer) not in RETRY_CODES:
                    raise SettingsError(f"join {url}: HTTP {answer.status_code} {_code(answer) or ''}: "
                                        f"{_message(answer) or answer.text[:200]}")
                reason = f"{_code(answer)}: {_message(answer)}"
            except httpx.HTTPError as exc:
                reason = f"no answer ({exc})"
            if time.monotonic() + RETRY_S > deadline:
                raise SettingsError(f"join {url}: the group did not add this member in {JOIN_TIMEOUT_S:.0f} s "
                                    f"(last: {reason})")
            log.warning("join %s: %s; asking again", url, reason)
            await asyncio.sleep(RETRY_S)


async def _call(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """The answer, its body read up to ANSWER_BYTES_MAX: a member that is not what it claims cannot
    fill this one's memory."""
    async with client.stream(method, url, **kwargs) as answer:
        body = bytearray()
        async for part in answer.aiter_bytes():  # decoded: a compressed bomb is counted as it opens
            body += part
            if len(body) > ANSWER_BYTES_MAX:
                raise SettingsError(f"join {url}: the answer is over {ANSWER_BYTES_MAX} bytes; is it a raftlog "
                                    "member?")
    return httpx.Response(answer.status_code, content=bytes(body), request=answer.request)


def _configuration(answer: httpx.Response, url: str) -> Configuration:
    try:
        return Configuration.decode_with_index(answer.content)
    except MembershipError as exc:
        raise SettingsError(f"join {url}: the answer is not a configuration ({exc})") from None


def _code(answer: httpx.Response) -> str | None:
    try:
        return str(answer.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def _message(answer: httpx.Response) -> str | None:
    try:
        return str(answer.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return None
