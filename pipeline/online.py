"""Reading committed entries from running members over the public API.

Ranges come as stored bytes (`Accept: application/vnd.raftlog.entries`) and are
decoded and CRC-checked here, so a reader costs the node a file read and a
socket write, not a JSON rendering. A member that fails mid-range is left for
the next one, which resumes at the first entry not yet delivered.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa

from raftlog.pipeline.entries import Decoder
from raftlog.pipeline.options import Access, PipelineError
from raftlog.storage.codec import HEADER, HEADER_SIZE, Stamp

log = logging.getLogger("raftlog.pipeline")

ENTRIES_CONTENT_TYPE = "application/vnd.raftlog.entries"  # the public API's bulk read format
FINAL_STATUSES = (400, 404, 410)  # bad request, not committed, cleaned: another member says the same
ROUNDS = 3  # times every member is tried before a range read gives up
RETRY_PAUSE_S = 0.5


class MemberFailedError(RuntimeError):
    """One member could not serve a read; another may."""


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the members said when a read was planned."""

    urls: tuple[str, ...]  # the given URLs first, then other members' client URLs
    begin_index: int
    committed_index: int  # the highest any member reported: the leader's


def discover(urls: Sequence[str], timeout_s: float, access: Access) -> ClusterView:
    """Ask the members for the cluster's state; fails only when none of them answers."""
    failures = []
    for url in urls:
        try:
            response = _http(access).get(f"{url}/v1/cluster", timeout=timeout_s, headers=access.headers())
            response.raise_for_status()
            status = response.json()
        except httpx.HTTPStatusError as exc:
            failures.append(f"{url}: {exc.response.status_code} {_reason(exc.response)}")
            continue
        except (httpx.HTTPError, ValueError) as exc:
            failures.append(f"{url}: {exc}")
            continue
        members = status.get("members", [])
        found = [m["client_url"].rstrip("/") for m in members if m.get("reachable") and m.get("client_url")]
        committed = max([status["committed_index"]] + [m["committed_index"] for m in members
                                                        if m.get("committed_index") is not None])
        return ClusterView(tuple(dict.fromkeys([*urls, *found])), status["begin_index"], committed)
    raise PipelineError("raftlog: no member answered at " + "; ".join(failures))


def consumer_position(urls: Sequence[str], name: str, timeout_s: float, access: Access) -> int | None:
    """Named consumer `name`'s committed position (None: it has none yet), from the first member that answers."""
    return _consumer_call(urls, "GET", name, timeout_s, access)


def commit_consumer(urls: Sequence[str], name: str, position: int, timeout_s: float, access: Access) -> None:
    """Commit `position` for consumer `name` (the group keeps it in its log), through the first member that answers."""
    _consumer_call(urls, "PUT", name, timeout_s, access, json={"position": position})


def _consumer_call(urls: Sequence[str], method: str, name: str, timeout_s: float, access: Access,
                   **kwargs: Any) -> int | None:
    failures = []
    for url in urls:
        try:
            response = _http(access).request(method, f"{url}/v1/consumers/{name}", timeout=timeout_s,
                                             headers=access.headers(), **kwargs)
            if method == "GET" and response.status_code == 404:
                return None
            response.raise_for_status()
            return int(response.json()["position"])
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code < 500:  # no other member would answer otherwise
                raise PipelineError(f"raftlog: consumer {name}: {exc.response.status_code} "
                                    f"{_reason(exc.response)}") from None
            failures.append(f"{url}: {exc.response.status_code} {_reason(exc.response)}")
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            failures.append(f"{url}: {exc}")
    raise PipelineError(f"raftlog: consumer {name}: no member answered: " + "; ".join(failures))


def read_range(urls: Sequence[str], start: int, end: int, *, text: bool, batch_rows: int,
               timeout_s: float, access: Access) -> Iterator[pa.RecordBatch]:
    """Entries start..end (inclusive, committed) as record batches, from the first member that serves
    them; on a member's failure the rest comes from the next one. It gives up when every member
    failed ROUNDS times in a row without progress, or at once on an answer no member would change."""
    decoder = Decoder(start, None, text=text, head_stamp=lambda index: _head_stamp(urls, index, timeout_s, access))
    failures: list[str] = []
    attempt = 0
    while True:
        url = urls[attempt % len(urls)]
        before = decoder.next_index
        try:
            yield from _fetch(url, decoder, end, batch_rows, timeout_s, access)
            return
        except MemberFailedError as exc:
            failures.append(str(exc))
            log.warning("raftlog: %s; trying the next member", exc)
        if decoder.next_index > before:
            failures.clear()  # it was getting on: a new run of attempts
        attempt += 1
        if len(failures) >= ROUNDS * len(urls):
            raise RuntimeError(f"raftlog: entries {decoder.next_index}..{end} could not be read: "
                               + "; ".join(failures[-len(urls):]))
        if attempt % len(urls) == 0:
            time.sleep(RETRY_PAUSE_S)


_clients: dict[str | None, httpx.Client] = {}


def _http(access: Access) -> httpx.Client:
    """One client per process and CA, kept across partitions: Spark reuses its Python workers, and a
    new client (its TLS context, its connections) costs more than reading a small partition."""
    client = _clients.get(access.ca)
    if client is None:
        verify = ssl.create_default_context(cafile=access.ca) if access.ca else True
        client = _clients[access.ca] = httpx.Client(verify=verify, limits=httpx.Limits(max_keepalive_connections=8))
    return client


def _head_stamp(urls: Sequence[str], index: int, timeout_s: float, access: Access) -> Stamp:
    """The stamp of entry `index`, the head of a producer's batch a range begins inside: as the
    first member that answers says it."""
    failures = []
    for url in urls:
        try:
            response = _http(access).get(f"{url}/v1/entries/{index}", timeout=timeout_s,
                                         headers={"accept": "application/octet-stream", **access.headers()})
            if response.status_code == 200:
                said = response.headers
                return Stamp(int(said["x-raftlog-producer-id"]), int(said["x-raftlog-producer-epoch"]),
                             int(said["x-raftlog-sequence"]))
            failures.append(f"{url} answered {response.status_code}: {_reason(response)}")
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            failures.append(f"{url}: {exc!r}")
    raise RuntimeError(f"raftlog: the stamp of entry {index} could not be read: " + "; ".join(failures))


def _fetch(url: str, decoder: Decoder, end: int, batch_rows: int, timeout_s: float,
           access: Access) -> Iterator[pa.RecordBatch]:
    """Read from one member until `end` is delivered; batches already yielded stay delivered."""
    client = _http(access)
    while decoder.next_index <= end:
        start = decoder.next_index
        params: dict[str, str | int] = {"start": start, "limit": end - start + 1, "consistency": "linearizable"}
        try:
            with client.stream("GET", f"{url}/v1/entries", params=params, timeout=timeout_s,
                               headers={"accept": ENTRIES_CONTENT_TYPE, **access.headers()}) as response:
                if response.status_code != 200:
                    response.read()
                    reason = f"{url} answered {response.status_code}: {_reason(response)}"
                    if response.status_code in FINAL_STATUSES:
                        raise RuntimeError(f"raftlog: entries {start}..{end}: {reason}")
                    raise MemberFailedError(reason)
                if response.headers.get("content-type", "").split(";")[0] != ENTRIES_CONTENT_TYPE:
                    raise MemberFailedError(f"{url} does not serve {ENTRIES_CONTENT_TYPE}")
                yield from _decode_stream(url, response.iter_raw(), decoder, batch_rows)
        except httpx.HTTPError as exc:
            raise MemberFailedError(f"{url}: {exc!r}") from exc
        if decoder.rows:
            yield decoder.batch()
        if decoder.next_index == start:
            raise MemberFailedError(f"{url} returned nothing from index {start}")


def _decode_stream(url: str, chunks: Iterator[bytes], decoder: Decoder, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Decode entries as the bytes arrive. The bytes of an entry cut by a chunk boundary wait in
    `pending` until the whole entry is there, so each byte is copied once more at most."""
    pending = bytearray()
    need = 0  # bytes `pending` must hold before it is worth decoding
    for chunk in chunks:
        if pending:
            pending += chunk
            if len(pending) < need:
                continue
            data = bytes(pending)
            pending.clear()
        else:
            data = chunk
        used, stop = decoder.feed(data, 0, len(data), None)
        if stop is not None and stop.damaged:
            raise MemberFailedError(f"{url} sent a damaged entry {decoder.next_index}: {stop.reason}")
        if used < len(data):
            pending += data[used:]
            need = HEADER_SIZE if len(pending) < HEADER_SIZE else HEADER.unpack_from(pending)[1]
        if decoder.full(batch_rows):
            yield decoder.batch()
    if pending:
        raise MemberFailedError(f"{url} ended its answer in the middle of entry {decoder.next_index}")


def _reason(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
