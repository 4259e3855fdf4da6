"""Prometheus metrics of one node, in a registry of its own (a test may run several nodes)."""

from __future__ import annotations

import asyncio
import bisect
import functools
import heapq
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from typing import Any

from fastapi import Query
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from starlette.types import Receive, Scope, Send

from raftlog.api.answers import ConsumerAnswer, GroupAnswer
from raftlog.api.errors import bad_request
from raftlog.raft.messages import Role
from raftlog.raft.node import RaftNode

KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
HISTORY_INTERVAL_S = 1.0
HISTORY_POINTS = 300  # five minutes
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)
SCRAPED_QUEUES = Query([], max_length=100, examples=["orders:3"], description=(
    "TOPIC:QUEUE: the consumer groups' lag in this queue too (raftlog_group_queue_lag), beside the most lagging "
    "queues' (metrics_queue_lag_series_max); repeat for more, up to 100"))


class NodeMetrics:
    def __init__(self, node: RaftNode) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.append_requests = PlainCounter("raftlog_append_requests", "Append requests answered, by outcome code",
                                            ["code"])
        self.appended_entries = PlainCounter("raftlog_appended_entries", "Entries appended through this node")
        self.appended_bytes = PlainCounter("raftlog_appended_bytes", "Body bytes appended through this node")
        self.commit_latency = PlainHistogram("raftlog_commit_latency_seconds", "From an append request to its commit",
                                             LATENCY_BUCKETS)
        self.push_latency = Histogram("raftlog_push_latency_seconds", "Push round trips to followers",
                                      ["peer"], buckets=LATENCY_BUCKETS, registry=r)
        self.pushed_bytes = Counter("raftlog_pushed_bytes", "Raw log bytes pushed to followers", ["peer"],
                                    registry=r)
        self.role_changes = Counter("raftlog_role_changes", "Role changes of this member, by new role", ["role"],
                                    registry=r)
        self.flush_seconds = Histogram("raftlog_flush_seconds", "One group-commit fdatasync round",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.http_requests = PlainCounter("raftlog_http_requests", "Public API requests, by route, method and status",
                                          ["route", "method", "status"])
        for plain in (self.append_requests, self.appended_entries, self.appended_bytes, self.commit_latency,
                      self.http_requests):
            r.register(plain)
        self.auth_failures = Counter("raftlog_auth_failures", "Calls refused for missing or wrong credentials, "
                                     "by port (client, grpc, peer) and reason (missing, invalid, forbidden)",
                                     ["port", "reason"], registry=r)
        self.loop_lag = Histogram("raftlog_event_loop_lag_seconds",
                                  "How late the node's event loop wakes a 50 ms timer", buckets=LATENCY_BUCKETS,
                                  registry=r)
        r.register(_StateCollector(node))
        # labels() costs microseconds (a lock, a str() of each value): the hot paths keep the children
        self._push_latency = functools.cache(self.push_latency.labels)
        self._pushed_bytes = functools.cache(self.pushed_bytes.labels)
        node.state.add_role_listener(lambda _term, role: self.role_changes.labels(role.value).inc())
        self.node = node
        # the admin page's charts, one point a second for HISTORY_POINTS: a page opened during an incident
        # shows what just happened
        self.history: deque[dict[str, float | None]] = deque(maxlen=HISTORY_POINTS)
        self._sampled: tuple[float, int, int, float] | None = None  # when, committed, latency count and sum
        self._groups: _GroupCollector | None = None

    def exposition(self, queues: Collection[tuple[str, int]] = ()) -> bytes:
        """What a scrape reads: every series, and the lag of each consumer group in `queues` (topic,
        queue) beside the most lagging queues'."""
        groups = self._groups
        if groups is not None:
            groups.asked = queues
        try:
            return generate_latest(self.registry)
        finally:
            if groups is not None:
                groups.asked = ()

    async def watch_loop_lag(self, interval_s: float = 0.05) -> None:
        """Sample event-loop lag: heartbeats are late by this much when the loop is busy; and, every
        HISTORY_INTERVAL_S, a point of the chart history."""
        loop = asyncio.get_running_loop()
        next_point = loop.time()
        while True:
            started = loop.time()
            await asyncio.sleep(interval_s)
            self.loop_lag.observe(max(loop.time() - started - interval_s, 0.0))
            if loop.time() >= next_point:
                next_point = loop.time() + HISTORY_INTERVAL_S
                self.sample_history(loop.time(), time.time())

    def sample_history(self, now: float, wall: float) -> None:
        """One chart point: entries committed per second, and appends' mean commit latency (ms, None
        when no append was answered) since the last point."""
        latency = self.commit_latency
        sample = (now, self.node.committed_index, sum(latency.counts), latency.sum)
        if self._sampled is not None:
            then, committed, count, total = self._sampled
            elapsed = max(now - then, 1e-9)
            answered = sample[2] - count
            self.history.append({"at_ms": round(wall * 1000),
                                 "committed_per_s": round(max(sample[1] - committed, 0) / elapsed, 1),
                                 "latency_ms": round((sample[3] - total) / answered * 1000, 3) if answered else None})
        self._sampled = sample

    def watch_limits(self, requests: Callable[[], float], body_bytes: Callable[[], float],
                     followers: Callable[[], float], follow_bytes: Callable[[], float]) -> None:
        """Gauges of what api.limits.RequestLimits and the follow streams hold, read at scrape time."""
        Gauge("raftlog_inflight_requests", "Client requests being served (max_inflight_requests)",
              registry=self.registry).set_function(requests)
        Gauge("raftlog_inflight_body_bytes", "Request body bytes held (max_inflight_body_bytes)",
              registry=self.registry).set_function(body_bytes)
        Gauge("raftlog_followers", "Follow streams and long-polls open (max_followers)",
              registry=self.registry).set_function(followers)
        Gauge("raftlog_follow_buffer_bytes", "Log bytes of follow streams' chunks not yet taken by their "
              "readers (follow_buffer_bytes_max)", registry=self.registry).set_function(follow_bytes)

    def watch_consumers(self, consumers: Callable[[], list[ConsumerAnswer]]) -> None:
        """Each named consumer's lag, in entries and bytes, read at scrape time."""
        self.registry.register(_ConsumerCollector(consumers))

    def watch_groups(self, groups: Callable[[], list[GroupAnswer]], topic_ends: Callable[[], dict[str, int]],
                     queue_series_max: int) -> None:
        """Each topic's messages and each consumer group's lag, read at scrape time; a queue's lag for a
        group only for the `queue_series_max` most lagging, and the queues a scrape asks for: 80,000
        queues must not make 80,000 series."""
        self._groups = _GroupCollector(groups, topic_ends, queue_series_max)
        self.registry.register(self._groups)

    def observe_push(self, peer: str, seconds: float, size: int) -> None:
        self._push_latency(peer).observe(seconds)
        self._pushed_bytes(peer).inc(size)


def scraped_queues(named: list[str]) -> list[tuple[str, int]]:
    """The queues a scrape names (TOPIC:QUEUE), as (topic, queue)."""
    queues = []
    for asked in named:
        topic, _, queue = asked.rpartition(":")
        if not topic or not (queue.isascii() and queue.isdigit() and len(queue) <= 9):
            raise bad_request(f"a queue is named TOPIC:QUEUE, as orders:3, not {asked[:140]!r}")
        queues.append((topic, int(queue)))
    return queues


class PlainCounter(Collector):
    """A counter kept as plain numbers, one per label set, for the metrics every request updates:
    prometheus_client's take a lock and a few calls per update. The event loop is the only
    writer, and a scrape (also on the loop) reads them."""

    def __init__(self, name: str, doc: str, labels: Sequence[str] = ()) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...] = (), amount: float = 1) -> None:
        self.values[labels] = self.values.get(labels, 0) + amount

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for labels, value in self.values.items():
            family.add_metric(list(labels), value)
        yield family


class PlainHistogram(Collector):
    """A histogram kept as plain numbers, as PlainCounter is."""

    def __init__(self, name: str, doc: str, buckets: Sequence[float]) -> None:
        self.name, self.doc, self.buckets = name, doc, buckets
        self.counts = [0] * (len(buckets) + 1)  # per bucket (upper bound included), +Inf last
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def collect(self) -> Iterator[Metric]:
        cumulative = list(itertools.accumulate(self.counts))
        bounds = [*map(floatToGoString, self.buckets), "+Inf"]
        yield HistogramMetricFamily(self.name, self.doc, buckets=list(zip(bounds, cumulative, strict=True)),
                                    sum_value=self.sum)


class _StateCollector(Collector):
    """Role, term, indices and follower lag, read from the node at scrape time."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        progress, store = self.node.snapshot(), self.node.store
        role = GaugeMetricFamily("raftlog_role", "1 for this member's current role", labels=["role"])
        for r in Role:
            role.add_metric([r.value], 1.0 if progress.role is r else 0.0)
        yield role
        for name, value, doc in (
                ("raftlog_term", progress.term, "Current term"),
                ("raftlog_begin_index", store.begin_index, "First index kept in the log"),
                ("raftlog_end_index", store.end_index, "Last index in the log"),
                ("raftlog_committed_index", progress.committed_index, "Commit index"),
                ("raftlog_applied_index", progress.applied_index, "Applied index"),
                ("raftlog_pending_appends", progress.pending_appends, "Client appends waiting for a quorum"),
                ("raftlog_disk_usage_ratio", store.disk_usage_ratio(), "Used fraction of the data directory's disk"),
                ("raftlog_disk_full", float(store.disk_full), "1 while appends are refused for a full disk"),
                ("raftlog_damaged_entries", progress.damaged_entries,
                 "Committed entries found damaged here and not yet repaired (reads of them fail)")):
            yield GaugeMetricFamily(name, doc, value=value)
        yield CounterMetricFamily("raftlog_elections_won", "Elections this member has won",
                                  value=progress.elections)
        yield CounterMetricFamily("raftlog_repaired_entries", "Damaged entries rewritten from a replica's copy",
                                  value=progress.repaired_entries)
        yield CounterMetricFamily("raftlog_scrub_passes", "Completed scrubs of the committed log",
                                  value=progress.scrubs)
        lag = GaugeMetricFamily("raftlog_follower_lag", "Entries a follower is behind (on the leader)",
                                labels=["peer"])
        inflight = GaugeMetricFamily("raftlog_push_inflight_bytes", "Log bytes pushed and not yet answered",
                                     labels=["peer"])
        for peer, follower in progress.peers.items():  # a leader's
            lag.add_metric([peer], max(store.end_index - follower.match_index, 0))
            inflight.add_metric([peer], follower.inflight_bytes)
        yield lag
        yield inflight


class _ConsumerCollector(Collector):
    def __init__(self, consumers: Callable[[], list[ConsumerAnswer]]) -> None:
        self.consumers = consumers

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily("raftlog_consumer_lag", "Committed entries after a named consumer's position",
                                labels=["consumer"])
        lag_bytes = GaugeMetricFamily("raftlog_consumer_lag_bytes", "Their bytes (absent: some were cleaned away)",
                                      labels=["consumer"])
        for consumer in self.consumers():
            lag.add_metric([consumer.name], consumer.lag)
            if consumer.lag_bytes is not None:
                lag_bytes.add_metric([consumer.name], consumer.lag_bytes)
        yield lag
        yield lag_bytes


class _GroupCollector(Collector):
    def __init__(self, groups: Callable[[], list[GroupAnswer]], topic_ends: Callable[[], dict[str, int]],
                 queue_series_max: int) -> None:
        self.groups = groups
        self.topic_ends = topic_ends
        self.queue_series_max = queue_series_max
        self.asked: Collection[tuple[str, int]] = ()  # (topic, queue): the scrape's own (NodeMetrics.exposition)

    def collect(self) -> Iterator[Metric]:
        messages = CounterMetricFamily("raftlog_topic_messages", "Messages committed to a topic: its queues' end "
                                       "offsets together", labels=["topic"])
        for topic, end in sorted(self.topic_ends().items()):
            messages.add_metric([topic], end)
        yield messages
        groups = self.groups()
        lag = GaugeMetricFamily("raftlog_group_lag", "Messages a consumer group has not read, in all its queues",
                                labels=["group"])
        queues = GaugeMetricFamily("raftlog_group_queues", "Queues a consumer group holds an offset in",
                                   labels=["group"])
        for group in groups:
            lag.add_metric([group.name], group.lag)
            queues.add_metric([group.name], len(group.queues))
        yield lag
        yield queues
        queue_lag = GaugeMetricFamily("raftlog_group_queue_lag", "A consumer group's lag in one queue: of the "
                                      "most lagging queues (metrics_queue_lag_series_max), and of those a scrape "
                                      "asks for (/metrics?queue=TOPIC:QUEUE)", labels=["group", "topic", "queue"])
        every = ((group.name, queue) for group in groups for queue in group.queues)
        shown = heapq.nlargest(self.queue_series_max, every, key=lambda pair: pair[1].lag)
        if self.asked:
            asked = set(self.asked)
            shown += [(group.name, q) for group in groups for q in group.queues if (q.topic, q.queue) in asked]
        seen = set()
        for name, queue in shown:
            labels = (name, queue.topic, str(queue.queue))
            if labels not in seen:
                seen.add(labels)
                queue_lag.add_metric(list(labels), queue.lag)
        yield queue_lag


class CountRequests:
    """ASGI middleware counting public requests by route template, method and status."""

    def __init__(self, app: Callable[..., Awaitable[None]], metrics: NodeMetrics) -> None:
        self.app = app
        self.requests = metrics.http_requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"  # bounded labels
            self.requests.inc((route, method, str(status)))
