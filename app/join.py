"""`raftlog serve --join URL`: a new member asks the group to add it as a learner.

The group answers once the change is committed, with the configuration that
holds the new member; the member saves it in its checkpoint and starts from it
(never from its `peers` setting, which names only itself: a group of one of its
own). A member the group already holds at the same peer address (a join asked
again after a crash) takes the group's configuration as it is.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

from app.settings import NodeSettings, SettingsError
from raft.membership import Configuration, MembershipError

log = logging.getLogger("raftlog.join")

JOIN_TIMEOUT_S = 60.0  # the group may be electing a leader, or refusing while another change commits
RETRY_S = 1.0
CALL_TIMEOUT_S = 15.0  # the add answers once committed: a quorum's round trips, forwarded to the leader
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
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    async with httpx.AsyncClient(timeout=CALL_TIMEOUT_S, headers=headers) as client:
        while True:
            try:
                answer = await client.post(f"{url}/v1/cluster/members", json=me)
                if answer.status_code == 409 and _code(answer) == "MEMBER_EXISTS":
                    answer = await client.get(f"{url}/v1/cluster/members")
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
