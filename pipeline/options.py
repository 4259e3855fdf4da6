"""The `raftlog` data source's options, checked once, on the driver, before anything is read."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_PARTITION_SIZE = 250_000  # entries per partition when neither size nor count is given (a task costs ~0.2 s)
DEFAULT_BATCH_ROWS = 50_000  # rows per Arrow record batch handed to Spark
DEFAULT_TIMEOUT_S = 30.0


NAMES = {name.lower(): name for name in (  # Spark hands option names over in lower case
    "url", "path", "startIndex", "endIndex", "partitionSize", "numPartitions", "maxEntriesPerTrigger", "timeout",
    "decode", "batchRows", "committedOnly", "onCorrupt", "token", "ca", "control", "consumer")}
SHARED_OPTIONS = frozenset({"decode", "batchrows", "control"})
ONLINE_OPTIONS = SHARED_OPTIONS | {"url", "startindex", "endindex", "partitionsize", "numpartitions",
                                   "maxentriespertrigger", "timeout", "token", "ca", "consumer"}
OFFLINE_OPTIONS = SHARED_OPTIONS | {"path", "committedonly", "oncorrupt"}


class PipelineError(ValueError):
    """Options or inputs the pipeline cannot work with; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Access:
    """How to reach members that check tokens or serve HTTPS: options `token` and `ca`, else
    $RAFTLOG_TOKEN and $RAFTLOG_CA where the read is planned (the variable keeps the token out of
    the options, which Spark may show in plans and logs)."""

    token: str | None = field(default=None, repr=False)
    ca: str | None = None  # a PEM file of the CA that signs the members' certificates

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    urls: tuple[str, ...] = ()  # online: members' client URLs
    path: str | None = None  # offline: a node's data directory
    start_index: int | None = None
    end_index: int | None = None
    partition_size: int | None = None
    num_partitions: int | None = None
    text: bool = False  # decode=utf-8: add body_text
    max_entries_per_trigger: int | None = None
    committed_only: bool = False  # offline: stop at the checkpoint's committed index
    mark_corrupt: bool = False  # offline: onCorrupt=mark keeps damaged entries as flagged rows
    batch_rows: int = DEFAULT_BATCH_ROWS
    timeout_s: float = DEFAULT_TIMEOUT_S
    access: Access = Access()  # online: the API token and the CA of HTTPS members
    control: bool = False  # also the bookkeeping entries (consumer, producer_session, cluster_version)
    consumer: str | None = None  # a stream: resume after this named consumer's position, commit it per micro-batch

    @property
    def offline(self) -> bool:
        return self.path is not None

    def split(self, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end] (inclusive) cut into partition ranges, by size or by count."""
        count = end - start + 1
        if count <= 0:
            return []
        parts = self.num_partitions or -(-count // (self.partition_size or DEFAULT_PARTITION_SIZE))
        size = -(-count // parts)  # even ranges: no small last partition costing a task of its own
        return [(first, min(first + size - 1, end)) for first in range(start, end + 1, size)]


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Spark's options (case-insensitive names, string values) as ReadOptions, or a PipelineError."""
    given = {k.lower(): v for k, v in options.items()}
    if "paths" in given:
        raise PipelineError("raftlog: one data directory per read (load(path) with one path)")
    unknown = sorted(set(given) - ONLINE_OPTIONS - OFFLINE_OPTIONS)
    if unknown:
        raise PipelineError(f"raftlog: unknown option {', '.join(unknown)} (known: {', '.join(NAMES.values())})")
    url, path = given.pop("url", None), given.pop("path", None)
    misplaced = sorted(set(given) - (ONLINE_OPTIONS if path is None else OFFLINE_OPTIONS))
    if misplaced and (url is None) != (path is None):
        raise PipelineError(f"raftlog: option {', '.join(NAMES[m] for m in misplaced)} is not for a read of "
                            f"{'a data directory' if path is not None else 'a running cluster'}")
    if (url is None) == (path is None):
        raise PipelineError("raftlog: give either option 'url' (members' client URLs, comma-separated) "
                            "or 'path' (a node's data directory), not both or neither")
    urls = tuple(u.strip().rstrip("/") for u in (url or "").split(",") if u.strip())
    if url is not None and not urls:
        raise PipelineError("raftlog: option 'url' names no URL")
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise PipelineError(f"raftlog: {u!r} is not an http:// or https:// URL")
    decode = given.pop("decode", None)
    if decode is not None and decode.lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise PipelineError(f"raftlog: decode={decode!r} is not supported (only utf-8)")
    on_corrupt = given.pop("oncorrupt", "fail").lower()
    if on_corrupt not in ("fail", "mark"):
        raise PipelineError(f"raftlog: onCorrupt must be 'fail' or 'mark', not {on_corrupt!r}")
    parsed = ReadOptions(
        urls=urls, path=path,
        start_index=_int(given, "startindex", 0), end_index=_int(given, "endindex", 0),
        partition_size=_int(given, "partitionsize", 1), num_partitions=_int(given, "numpartitions", 1),
        text=decode is not None,
        max_entries_per_trigger=_int(given, "maxentriespertrigger", 1),
        committed_only=_bool(given, "committedonly"), mark_corrupt=on_corrupt == "mark",
        batch_rows=_int(given, "batchrows", 1) or DEFAULT_BATCH_ROWS, control=_bool(given, "control"),
        consumer=given.get("consumer") or None,
        timeout_s=_float(given, "timeout", DEFAULT_TIMEOUT_S),
        access=Access(given.get("token") or os.environ.get("RAFTLOG_TOKEN") or None,
                      given.get("ca") or os.environ.get("RAFTLOG_CA") or None) if path is None else Access())
    ca = parsed.access.ca
    if ca is not None and not (os.path.isfile(ca) and os.access(ca, os.R_OK)):
        source = "option ca" if given.get("ca") else "$RAFTLOG_CA"
        raise PipelineError(f"raftlog: {source}: {ca} is not a readable file (the CA of the members' certificates)")
    if parsed.partition_size is not None and parsed.num_partitions is not None:
        raise PipelineError("raftlog: give partitionSize or numPartitions, not both")
    if (parsed.start_index is not None and parsed.end_index is not None
            and parsed.start_index > parsed.end_index):
        raise PipelineError(f"raftlog: startIndex {parsed.start_index} is above endIndex {parsed.end_index}")
    return parsed


def _int(given: dict[str, str], name: str, minimum: int) -> int | None:
    raw = given.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise PipelineError(f"raftlog: option {NAMES[name]} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise PipelineError(f"raftlog: option {NAMES[name]} must be at least {minimum}, not {value}")
    return value


def _float(given: dict[str, str], name: str, default: float) -> float:
    raw = given.get(name)
    try:
        value = default if raw is None else float(raw)
    except ValueError:
        raise PipelineError(f"raftlog: option {NAMES[name]} must be a number, not {raw!r}") from None
    if value <= 0:
        raise PipelineError(f"raftlog: option {NAMES[name]} must be positive, not {value}")
    return value


def _bool(given: dict[str, str], name: str) -> bool:
    raw = given.get(name, "false").lower()
    if raw not in ("true", "false"):
        raise PipelineError(f"raftlog: option {NAMES[name]} must be true or false, not {raw!r}")
    return raw == "true"
