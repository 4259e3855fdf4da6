"""Errors of the public API: one JSON shape, a DLedger code name, an HTTP status per case.

    ApiError(code, message, leader, status)
        raised by routes, or translated from lower layers by `api_error`:
        RaftError       -> its code (NOT_LEADER, LEADER_PENDING_FULL, ...)
        MembershipError -> the refusal's code (MEMBER_EXISTS, CHANGE_IN_FLIGHT, ...; UNKNOWN_MEMBER is 404)
        StorageError    -> DISK_FULL, INDEX_OUT_OF_RANGE, INDEX_LESS_THAN_LOCAL_BEGIN, DISK_ERROR

Every error answers `{"error": {"code": "<name>", "message": "...", "leader": "n1" | null}}`.
An unexpected exception answers INTERNAL_ERROR with an incident id that the
member logs beside the exception: its text may name files, addresses or data
that are no client's business. The traceback is logged at most once a second
per exception type, the next line counting those left out, so a client that
causes one per request cannot fill the disk. A client that left in the middle
of its body (starlette's ClientDisconnect: a cut slow upload) is no incident.
AnswerErrors answers whatever an ASGI app raises so, before the server sees it.
"""

from __future__ import annotations

import logging
import secrets

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raftlog.api.log_throttle import LogThrottle, since_last
from raftlog.raft.errors import RaftError
from raftlog.raft.membership import MembershipError
from raftlog.raft.messages import Code
from raftlog.storage.errors import (
    DiskFullError,
    EntryTooLargeError,
    IndexCleanedError,
    IndexOutOfRangeError,
    StorageError,
)

# The HTTP status of each code a client can meet; openapi.yaml documents the same table.
STATUS = {
    Code.UNEXPECTED_ARGUMENT: 400,
    Code.REQUEST_WITH_EMPTY_BODYS: 400,
    Code.UNKNOWN_MEMBER: 400,
    Code.INVALID_TOPIC: 400,
    Code.KEYS_IN_SEVERAL_QUEUES: 400,
    Code.UNAUTHENTICATED: 401,
    Code.PERMISSION_DENIED: 403,
    Code.ORIGIN_NOT_ALLOWED: 403,
    Code.NOT_PRODUCER_OWNER: 403,
    Code.TOPIC_NOT_WRITABLE: 403,
    Code.TOPIC_NOT_READABLE: 403,
    Code.INDEX_OUT_OF_RANGE: 404,
    Code.CONSUMER_NOT_FOUND: 404,
    Code.TOPIC_NOT_FOUND: 404,
    Code.FALL_BEHIND_TOO_MUCH: 409,
    Code.MEMBER_EXISTS: 409,
    Code.ALREADY_VOTER: 409,
    Code.LAST_VOTER: 409,
    Code.CHANGE_IN_FLIGHT: 409,
    Code.LEARNER_BEHIND: 409,
    Code.QUORUM_AT_RISK: 409,
    Code.SECRET_REQUIRED: 409,
    Code.OUT_OF_ORDER_SEQUENCE: 409,
    Code.PRODUCER_FENCED: 409,
    Code.CONSUMER_CONFLICT: 409,
    Code.CONSUMERS_FULL: 409,
    Code.CONSUMER_POSITION_PAST_END: 409,
    Code.UNKNOWN_PRODUCER: 409,
    Code.PRODUCERS_FULL: 409,
    Code.CLUSTER_VERSION_TOO_LOW: 409,
    Code.TOPIC_EXISTS: 409,
    Code.TOPICS_FULL: 409,
    Code.INDEX_LESS_THAN_LOCAL_BEGIN: 410,
    Code.MESSAGE_TOO_LARGE: 413,
    Code.HOST_NOT_ALLOWED: 421,
    Code.INTERNAL_ERROR: 500,
    Code.DISK_ERROR: 500,
    Code.NETWORK_ERROR: 502,
    Code.NOT_LEADER: 503,
    Code.LEADER_PENDING_FULL: 503,
    Code.LEADER_TRANSFERRING: 503,
    Code.SERVER_BUSY: 503,
    Code.TIMEOUT: 504,
    Code.WAIT_QUORUM_ACK_TIMEOUT: 504,
    Code.TERM_CHANGED: 504,  # leadership was lost after the entry was written: it may still commit
    Code.DISK_FULL: 507,
}
RETRY_LATER = frozenset(code for code, status in STATUS.items() if status == 503)
RETRY_AFTER_S = 1

log = logging.getLogger("raftlog.api")
INCIDENTS = LogThrottle()  # an incident's traceback is logged at most once a second per exception type


class ApiError(Exception):
    def __init__(self, code: Code, message: str, leader: str | None = None, status: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.leader = leader
        self.status = status or STATUS.get(code, 500)

    def body(self) -> dict[str, object]:
        return {"error": {"code": self.code.name, "message": self.message, "leader": self.leader}}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_S)} if self.code in RETRY_LATER else {}


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers())


def bad_request(message: str) -> ApiError:
    return ApiError(Code.UNEXPECTED_ARGUMENT, message)


def too_large(message: str) -> ApiError:
    """413: an entry over max_entry_bytes or a request over max_request_bytes."""
    return ApiError(Code.UNEXPECTED_ARGUMENT, message, status=413)


def api_error(exc: Exception, leader: str | None = None) -> ApiError:
    """Translate an error from the layers below into its public form."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RaftError):
        return ApiError(exc.code, str(exc), exc.leader_id or leader)
    if isinstance(exc, MembershipError):  # the refusals share their names with codes; an unknown member is 404
        code = Code.__members__.get(exc.reason.name, Code.UNEXPECTED_ARGUMENT)
        return ApiError(code, str(exc), leader, status=404 if code is Code.UNKNOWN_MEMBER else None)
    if isinstance(exc, DiskFullError):
        return ApiError(Code.DISK_FULL, str(exc), leader)
    if isinstance(exc, EntryTooLargeError):
        return too_large(str(exc))
    if isinstance(exc, IndexCleanedError):
        return ApiError(Code.INDEX_LESS_THAN_LOCAL_BEGIN, str(exc), leader)
    if isinstance(exc, IndexOutOfRangeError):
        return ApiError(Code.INDEX_OUT_OF_RANGE, str(exc), leader)
    if isinstance(exc, StorageError):
        return ApiError(Code.DISK_ERROR, str(exc), leader)
    if isinstance(exc, ClientDisconnect):  # nobody reads the answer; a cut slow upload is no fault of ours
        return ApiError(Code.UNEXPECTED_ARGUMENT, "the client left before its request's body had arrived", leader)
    incident = secrets.token_hex(6)
    kind = type(exc).__qualname__
    held_back = INCIDENTS.admit(kind)
    if held_back is not None:  # a traceback per kind a second, however often a client causes it
        log.error("incident %s: an unexpected error answering a request%s", incident,
                  since_last(held_back, f"{kind} incidents"), exc_info=exc)
    return ApiError(Code.INTERNAL_ERROR, f"an unexpected error on this member (incident {incident}: its log "
                    "has the details)", leader)


class AnswerErrors:
    """An ASGI app's exceptions answered in the one shape (api_error: an incident, or a client that
    left). Starlette's handler of Exception would answer too, then raise it again so that the
    server logs its traceback: one per request, past api_error's limit on incidents' logs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:  # too late for an answer: the server cuts the connection
                raise
            await error_response(api_error(exc))(scope, receive, send)
