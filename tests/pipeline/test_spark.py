"""The `raftlog` data source and jobs in a real Spark session against a real 3-node cluster."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftlog.app.cli import main
from raftlog.app.launcher import SMALL_FILES, LocalCluster, free_ports
from raftlog.pipeline import jobs
from raftlog.pipeline.options import parse_options
from raftlog.pipeline.source import BatchReader
from raftlog.storage.codec import HEADER_SIZE
from tests.pipeline.conftest import ENTRIES, Loaded, append, body, data_indices, read_log, signed32
from tests.pki import Pki
from tests.processes import eventually, metric

pytestmark = pytest.mark.spark


def rows_of(frame: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in frame.orderBy("index").collect()]


def expected_rows(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the data source must give for the JSON API's entries."""
    import base64

    def raw(e: dict[str, Any]) -> bytes:
        return e["body"].encode() if e["encoding"] == "utf-8" else base64.b64decode(e["body"])

    return [{"index": e["index"], "term": e["term"], "pos": e["pos"], "type": e["type"], "body": raw(e),
             "body_crc": signed32(e["body_crc"])} for e in log]


def without_chain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: bytes(v) if k == "body" else v for k, v in r.items() if k in
             ("index", "term", "pos", "type", "body", "body_crc")} for r in rows]


def entries_served(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('raftlog_http_requests_total{method="GET",route="/v1/entries",status="200"}'))


def test_a_batch_read_equals_the_log_entry_for_entry_and_followers_serve_it(spark: Any, loaded: Loaded) -> None:
    end = loaded.wait_replicated()
    before = {url: entries_served(url) for url in loaded.urls}
    frame = (spark.read.format("raftlog").option("url", loaded.urls[0]).option("numPartitions", "6")
             .option("decode", "utf-8").load())
    assert frame.rdd.getNumPartitions() == 6
    rows = rows_of(frame)
    log = read_log(loaded.urls[0])
    at = [e["index"] for e in log]  # the first leader's NOOP, then body k at at[k + 1]
    assert at == loaded.data(0, end) and at[-1] == end and len(log) >= ENTRIES
    assert without_chain(rows) == expected_rows(log)
    texts = {r["index"]: r["body_text"] for r in rows}
    assert texts[at[1]] == body(0).decode() and texts[at[6]] is None  # body 5: not UTF-8
    served = [entries_served(url) - before[url] for url in loaded.urls]
    assert all(n >= 2 for n in served), f"range reads per member: {served}"


def test_partitions_by_size_and_a_sub_range(spark: Any, loaded: Loaded) -> None:
    frame = (spark.read.format("raftlog").option("url", ",".join(loaded.urls)).option("startIndex", "100")
             .option("endIndex", "2099").option("partitionSize", "300").load())
    assert frame.rdd.getNumPartitions() == 7
    assert [r["index"] for r in frame.select("index").orderBy("index").collect()] == list(range(100, 2100))


def test_a_partition_whose_member_is_down_is_read_from_another(spark: Any, loaded: Loaded) -> None:
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"
    reader = BatchReader(parse_options({"url": ",".join([dead, *loaded.urls]), "numPartitions": "4"}))
    assert reader.partitions()[0].urls[0] == dead  # planned there first
    frame = (spark.read.format("raftlog").option("url", ",".join([dead, *loaded.urls]))
             .option("numPartitions", "4").option("endIndex", "999").load())
    assert [r["index"] for r in frame.select("index").orderBy("index").collect()] == loaded.data(0, 999)


@pytest.mark.parametrize(("options", "message"), [
    ({"url": "http://127.0.0.1:{dead}"}, "no member answered at http://127.0.0.1:"),
    ({"url": "{url}", "startIndex": "50", "endIndex": "10"}, "startIndex 50 is above endIndex 10"),
    ({"url": "{url}", "endIndex": "999999999"}, "endIndex 999999999 is not committed yet"),
    ({"path": "{tmp}"}, "is not a raftlog data directory"),
    ({"url": "{url}", "path": "{tmp}"}, "give either option 'url'"),
    ({"url": "{url}", "numPartitions": "zero"}, "numPartitions must be an integer"),
])
def test_bad_options_fail_at_planning_with_one_clear_message(spark: Any, loaded: Loaded, tmp_path: Path,
                                                             options: dict[str, str], message: str) -> None:
    values = {"dead": free_ports(1)[0], "url": loaded.urls[0], "tmp": tmp_path}
    reader = spark.read.format("raftlog")
    for name, value in options.items():
        reader = reader.option(name, value.format(**values))
    with pytest.raises(Exception, match=message):
        reader.load().count()


def test_a_stream_stopped_and_restarted_delivers_every_entry_once(spark: Any, loaded: Loaded,
                                                                  tmp_path: Path) -> None:
    def run() -> list[int]:
        stream = (spark.readStream.format("raftlog").option("url", loaded.urls[1])
                  .option("maxEntriesPerTrigger", "2500").load())
        query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress]

    first = run()
    assert len(first) >= 3 and max(first) <= 2500 and sum(first) == len(loaded.data(0, loaded.wait_replicated()))
    append(loaded.urls, ENTRIES, 700)
    end = loaded.wait_replicated()
    second = run()
    assert sum(first) + sum(second) == len(loaded.data(0, end))
    written = spark.read.parquet(str(tmp_path / "out"))
    indexes = [r["index"] for r in written.select("index").orderBy("index").collect()]
    assert indexes == loaded.data(0, end)  # none twice, none skipped
    assert without_chain(rows_of(written)) == expected_rows(read_log(loaded.urls[0]))


def copy_data_dirs(loaded: Loaded, to: Path) -> list[Path]:
    """Copies of the members' data dirs, each with a checkpoint that holds the whole log as committed.

    The node keeps its checkpoint locked (SQLite's exclusive WAL mode), so it cannot be read in place,
    and a file copy of it is not a snapshot: the WAL can be folded into the main file between the two
    copies, which gives an older state. So the checkpoint is copied again until the copy is current."""
    committed = loaded.wait_replicated()
    copies = []
    for member in loaded.cluster.members.values():
        copy = to / member.id
        shutil.copytree(member.data_dir, copy, ignore=shutil.ignore_patterns("LOCK", "checkpoint.db*"))
        eventually(lambda src=member.data_dir, dst=copy: copy_checkpoint(src, dst) >= committed,
                   f"a copy of {member.id}'s checkpoint that holds index {committed} as committed")
        copies.append(copy)
    return copies


def copy_checkpoint(data_dir: Path, to: Path) -> int:
    """Copies the checkpoint's files; returns the committed index the copy holds (-1 if it is torn)."""
    for name in ("checkpoint.db", "checkpoint.db-wal"):
        (to / name).unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(data_dir / name, to / name)
    try:
        with contextlib.closing(sqlite3.connect(to / "checkpoint.db")) as copy:
            return copy.execute("SELECT committed_index FROM raft_state").fetchone()[0]
    except sqlite3.DatabaseError:
        return -1


def test_the_offline_reader_on_a_copied_data_dir_matches_the_online_read(spark: Any, loaded: Loaded,
                                                                         tmp_path: Path) -> None:
    follower = copy_data_dirs(loaded, tmp_path)[2]
    offline = spark.read.format("raftlog").load(str(follower))
    assert offline.rdd.getNumPartitions() >= 3  # one per data file
    online = spark.read.format("raftlog").option("url", ",".join(loaded.urls)).load()
    assert rows_of(offline) == rows_of(online)


def test_audit_agrees_on_healthy_replicas_and_finds_a_planted_divergence(spark: Any, loaded: Loaded, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    copies = copy_data_dirs(loaded, tmp_path)
    healthy = jobs.audit(spark, [str(c) for c in copies], range_size=1000)
    committed = min(r.committed_index for r in healthy.replicas)
    assert healthy.agree and healthy.shared_committed == committed >= ENTRIES - 1
    assert len(healthy.ranges) == committed // 1000 + 1

    planted = 4321
    pos = httpx.get(f"{loaded.urls[0]}/v1/entries/{planted}", timeout=5).json()["pos"]
    data_file = copies[1] / "data" / f"{pos - pos % SMALL_DATA_FILE:020d}"
    with open(data_file, "r+b") as f:
        f.seek(pos % SMALL_DATA_FILE + HEADER_SIZE + 7)
        f.write(b"!")
    capsys.readouterr()
    code = main(["pipeline", "--json", "audit", *[arg for c in copies for arg in ("--data-dir", str(c))],
                 "--range-size", "1000"])  # in this session: the command keeps a session it did not start
    out = capsys.readouterr()
    assert code == 1, out.err[-2000:]
    assert spark.range(3).count() == 3  # the test's session still runs
    report = json.loads(out.out)
    assert not report["agree"] and report["first_divergence"] == planted
    assert report["shared_committed"] == planted - 1
    assert [g["agree"] for g in report["ranges"]].count(False) == 1
    assert [c["corrupt"] for c in report["divergence"]] == [None, "body CRC mismatch", None]


SMALL_DATA_FILE = 1 << 20  # SMALL_FILES' data_file_size


def test_export_to_parquet_is_incremental_with_json_fields_as_columns(spark: Any, loaded: Loaded,
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "export"
    first = jobs.export(spark, loaded.urls, out, json_fields=True, max_per_trigger=4000, progress=lambda _: None)
    end = loaded.wait_replicated()
    assert first.next_index == end + 1 and first.entries == len(loaded.data(0, end))
    append(loaded.urls, 10_000, 300)
    end = loaded.wait_replicated()
    second = jobs.export(spark, loaded.urls, out, json_fields=True, progress=lambda _: None)
    assert second.entries == len(loaded.data(first.next_index, end)) and second.next_index == end + 1
    again = jobs.export(spark, loaded.urls, out, json_fields=True, progress=lambda _: None)
    assert again.entries == 0 and again.next_index == end + 1
    table = spark.read.parquet(str(out))
    assert {"index", "term", "body", "body_crc", "n", "ts", "text", "range_start"} <= set(table.columns)
    rows = table.select("index", "n").orderBy("index").collect()
    assert [r["index"] for r in rows] == loaded.data(0, end)
    by_index = {e["index"]: e for e in read_log(loaded.urls[0])}
    for r in rows:
        entry = by_index[r["index"]]
        expected = json.loads(entry["body"])["n"] if entry["encoding"] == "utf-8" and entry["body"] else None
        assert r["n"] == expected


def test_stats_count_entries_and_bytes_per_term_and_hour(spark: Any, loaded: Loaded) -> None:
    end = loaded.wait_replicated()
    result = jobs.stats(spark, urls=loaded.urls, time_field="ts")
    log = read_log(loaded.urls[0])
    assert result.entries == len(loaded.data(0, end)) == sum(t["entries"] for t in result.by_term)
    assert result.bytes == sum(len(r["body"]) for r in expected_rows(log))
    assert result.by_hour is not None
    timed = [json.loads(e["body"])["ts"] for e in log if e["encoding"] == "utf-8" and e["body"].startswith("{")]
    hours = {t - t % 3600 for t in timed}
    assert sum(h["entries"] for h in result.by_hour if h["hour"] is not None) == len(timed)
    assert len([h for h in result.by_hour if h["hour"] is not None]) == len(hours)


def test_a_read_of_members_with_tokens_and_https(spark: Any, tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki", "spark")
    token = "reader-token-for-spark"
    cluster = LocalCluster(tmp_path / "cluster", 3, verify=pki.client_context(), settings={
        **SMALL_FILES, "tokens": f"reader:{token},writer:writer-token-for-spark",
        "client_tls_cert": pki.cert, "client_tls_key": pki.key})
    cluster.start()
    try:
        leader = cluster.members[cluster.wait_leader()].client_url
        with httpx.Client(verify=pki.client_context(), headers={"authorization": "Bearer writer-token-for-spark"}) as c:
            framed = b"".join(len(b).to_bytes(4, "big") + b for b in (body(i) for i in range(300)))
            assert c.post(f"{leader}/v1/entries/batch", content=framed,
                          headers={"content-type": "application/vnd.raftlog.batch"}).status_code == 201
        urls = ",".join(m.client_url for m in cluster.members.values())
        reader = spark.read.format("raftlog").option("url", urls).option("ca", str(pki.ca_file))
        with pytest.raises(Exception, match="401 UNAUTHENTICATED: no bearer token"):
            reader.load().count()
        frame = reader.option("token", token).option("numPartitions", "3").load()
        bodies = [bytes(r.body) for r in frame.orderBy("index").collect() if r.type == "normal"]
        assert bodies == [body(i) for i in range(300)]
    finally:
        cluster.stop()


# -- docs/pipeline.md's promises: a member failing mid-partition, bad options at planning, audit ---------


class CuttingProxy:
    """A member's client port seen through a TCP proxy that records the range reads asked of it
    and, when `cut_after` is set, breaks the answer to the first one after that many bytes, as a
    member dying mid-partition would."""

    def __init__(self, upstream_port: int, cut_after: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.cut_after = cut_after
        self.starts: list[int] = []  # the `start` of each range read asked of this member
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            reading = {"range": False}
            self._spawn(self._requests, client, upstream, reading)
            self._spawn(self._answers, upstream, client, reading)

    def _requests(self, client: Any, upstream: Any, reading: dict[str, bool]) -> None:
        while data := _recv(client):
            for start in re.findall(rb"GET /v1/entries\?[^ ]*\bstart=(\d+)", data):
                self.starts.append(int(start))
                reading["range"] = True
            upstream.sendall(data)
        _close(upstream)

    def _answers(self, upstream: Any, client: Any, reading: dict[str, bool]) -> None:
        sent = 0
        while data := _recv(upstream):
            if reading["range"] and self.cut_after is not None and not self.cut.is_set():
                if sent + len(data) > self.cut_after:
                    client.sendall(data[:self.cut_after - sent])
                    self.cut.set()
                    break
                sent += len(data)
            client.sendall(data)
        _close(client)
        _close(upstream)

    def close(self) -> None:
        self.listener.close()


def _recv(sock: Any) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def test_a_member_failing_mid_partition_leaves_the_rest_of_it_to_the_next_member(spark: Any,
                                                                                 loaded: Loaded) -> None:
    loaded.wait_replicated()
    ports = [m.client_port for m in loaded.cluster.members.values()]
    failing, next_one = CuttingProxy(ports[0], cut_after=300_000), CuttingProxy(ports[1])
    try:
        frame = (spark.read.format("raftlog").option("url", f"{failing.url},{next_one.url}")
                 .option("numPartitions", "1").option("startIndex", "100").option("endIndex", "2999").load())
        rows = [r.asDict() for r in frame.collect()]  # one read: a sort would sample the partition first
        assert failing.cut.is_set() and failing.starts == [100]
        assert len(next_one.starts) == 1 and 100 < next_one.starts[0] < 2999  # resumed, not started again
    finally:
        failing.close()
        next_one.close()
    log = [e for e in read_log(loaded.urls[0]) if 100 <= e["index"] < 3000]
    assert without_chain(rows) == expected_rows(log)  # none twice, none missing


def spark_jobs_of(spark: Any, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("options", [
    {"url": "{url}", "endIndex": "999999999"},  # found out by asking the members
    {"url": "{url}", "committedOnly": "true"},  # an option of the other kind of read
    {"url": "{url}", "ca": "/nonexistent/ca.pem"},
    {"url": "{url}", "colour": "blue"},
], ids=["uncommitted-end", "misplaced", "no-ca-file", "unknown"])
def test_a_bad_option_fails_when_the_read_is_planned_before_any_spark_job(spark: Any, loaded: Loaded,
                                                                          options: dict[str, str]) -> None:
    group = f"planning-{'-'.join(sorted(options))}"
    spark.sparkContext.setJobGroup(group, "a read with a bad option")
    try:
        reader = spark.read.format("raftlog")
        for name, value in options.items():
            reader = reader.option(name, value.format(url=loaded.urls[0]))
        with pytest.raises(Exception, match="raftlog: ") as raised:
            reader.load().count()
        assert "stage failure" not in str(raised.value) and "Task" not in str(raised.value)
        assert spark_jobs_of(spark, group) == []  # planning failed: no job, no task ran
    finally:
        spark.sparkContext.setJobGroup("", "")


def test_audit_a_replica_merely_behind_agrees_and_one_missing_a_committed_entry_diverges(
        spark: Any, loaded: Loaded, tmp_path: Path) -> None:
    earlier = copy_data_dirs(loaded, tmp_path / "earlier")
    append(loaded.urls, 20_000, 400)
    later = copy_data_dirs(loaded, tmp_path / "later")
    behind = earlier[2]
    report = jobs.audit(spark, [str(later[0]), str(later[1]), str(behind)], range_size=2000)
    by_dir = {r.data_dir: r for r in report.replicas}
    assert by_dir[str(behind)].end_index < by_dir[str(later[0])].end_index  # behind indeed
    assert report.agree and report.first_divergence is None
    assert report.shared_committed == by_dir[str(behind)].committed_index

    # the same copy claiming as committed the entries it does not hold: a missing entry
    missing_from = by_dir[str(behind)].end_index + 1
    claimed = by_dir[str(later[0])].end_index  # what the others hold
    with sqlite3.connect(behind / "checkpoint.db") as db:
        db.execute("UPDATE raft_state SET committed_index = ?, applied_index = ?", (claimed, claimed))
    report = jobs.audit(spark, [str(later[0]), str(later[1]), str(behind)], range_size=2000)
    assert report.replicas[2].committed_index == claimed > report.replicas[2].end_index
    assert not report.agree and report.first_divergence == missing_from
    assert report.shared_committed == missing_from - 1
    said = [d["corrupt"] for d in report.divergence]
    assert said[:2] == [None, None] and "the checkpoint says" in said[2], said

    # a data file gone from the middle of a replica: the entries in it are missing
    files = sorted((later[1] / "data").iterdir())
    assert len(files) >= 3
    files[1].unlink()
    report = jobs.audit(spark, [str(c) for c in later], range_size=2000)
    gone_from = report.first_divergence
    assert not report.agree and gone_from is not None and report.shared_committed == gone_from - 1
    said = [d["corrupt"] for d in report.divergence]
    assert said[0] is None and said[2] is None and f"ends before entry {gone_from}" in said[1], said
    assert httpx.get(f"{loaded.urls[0]}/v1/entries/{gone_from}", timeout=5).json()["pos"] >= int(files[1].name)


def test_a_cleaned_range_fails_at_once_with_410_and_a_cleaned_start_at_planning(spark: Any, tmp_path: Path) -> None:
    every_hour = ";".join(str(h) for h in range(24))
    cluster = LocalCluster(tmp_path / "cluster", 1, settings={
        **SMALL_FILES, "delete_when": every_hour, "clean_interval_ms": 100, "file_reserved_hours": 1})
    with cluster:
        cluster.wait_leader()
        url = cluster.members["n1"].client_url
        append([url], 0, 6000)  # about three data files

        def stream(checkpoint: Path, **options: str) -> Any:
            reader = spark.readStream.format("raftlog").option("url", url)
            for name, value in options.items():
                reader = reader.option(name, value)
            return (reader.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True).start())

        first = stream(tmp_path / "stopped", startIndex="0", endIndex="99")
        first.awaitTermination()
        assert first.exception() is None  # it stopped with index 100 next

        old = time.time() - 2 * 3600  # age the files: retention cleans what the stream has not read yet
        for f in (cluster.members["n1"].data_dir / "data").iterdir():
            os.utime(f, (old, old))
        begin = eventually(lambda: (b := httpx.get(f"{url}/v1/cluster", timeout=5).json()["begin_index"]) > 100 and b,
                           "the node to clean its first files")

        def refused() -> float:
            return metric(url, "raftlog_http_requests_total", method="GET", route="/v1/entries", status="410")

        resumed = stream(tmp_path / "stopped")  # restarted where it stopped: index 100, cleaned since
        with pytest.raises(Exception, match="410: INDEX_LESS_THAN_LOCAL_BEGIN"):
            resumed.awaitTermination()
        assert refused() == 1  # at once: no other try, no other member asked

        fresh = spark.readStream.format("raftlog").option("url", url).option("startIndex", "0")
        with pytest.raises(Exception, match=f"startIndex 0 was cleaned \\(the log begins at {begin}\\)"):
            fresh.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "fresh")) \
                .trigger(availableNow=True).start().awaitTermination()
        assert refused() == 1  # refused when planned, before any read


def test_a_stream_commits_its_consumer_per_micro_batch_and_a_new_query_resumes_after_it(spark: Any,
                                                                                        tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", 1, settings=SMALL_FILES) as cluster:
        cluster.wait_leader()
        url = cluster.members["n1"].client_url
        append([url], 0, 1000)

        def run(name: str) -> list[int]:
            out = tmp_path / name
            query = (spark.readStream.format("raftlog").option("url", url).option("consumer", "etl")
                     .option("maxEntriesPerTrigger", "400").load()
                     .writeStream.format("parquet").option("path", str(out / "rows"))
                     .option("checkpointLocation", str(out / "checkpoint")).trigger(availableNow=True).start())
            query.awaitTermination()
            assert query.exception() is None
            return [r["index"] for r in spark.read.parquet(str(out / "rows")).where("type = 'normal'")
                    .select("index").orderBy("index").collect()]

        first = run("first")  # micro-batches [0, 400), [400, 800), [800, end]
        assert first == data_indices(url, 1, 1001)  # entry 0: the first leader's NOOP; 1, its cluster version
        # Spark commits a micro-batch to its source as it starts the next one: the last waits for the next run
        assert httpx.get(f"{url}/v1/consumers/etl", timeout=5).json()["position"] == 799
        append([url], 1000, 500)
        second = run("second")  # a new query, no checkpoint of its own: on after the consumer's position
        again = [i for i in first if i >= 800]
        assert second[:len(again)] == again and len(second) == len(again) + 500  # the last micro-batch again
        new = second[len(again):]
        assert new == list(range(new[0], new[0] + 500))  # then the new ones (after commits)
        rows = spark.read.format("raftlog").option("url", url).option("control", "true").load()
        assert rows.where("type = 'consumer'").count() >= 3  # one commit per micro-batch, kept in the log
        assert spark.read.format("raftlog").option("url", url).load().where("type = 'consumer'").count() == 0
