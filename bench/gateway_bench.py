"""The gateway's other half on a local 3-node cluster: gRPC appends against REST, how soon a consumer
following the log sees an entry, and what idle followers cost.

    python bench/gateway_bench.py [--seconds 10] [--rounds 3] [--json]

- single appends, 64 concurrent callers to the leader: REST by wrk (POST /v1/entries), gRPC by
  grpc.aio unary `Append` from this process; appends/s, p50, and the CPU per entry of all three
  members (read from /proc: the clients differ, the servers' cost is what compares)
- batches of 1000 bodies of 100 bytes: REST binary batches from BATCH_CLIENTS concurrent clients (as
  cluster_bench and compare do), against `AppendStream` from one client (its batches pipelined on
  one stream)
- tail latency: one producer appends one entry at a time to the leader; a follow stream on a
  follower (REST NDJSON, and gRPC `Read` with follow) delivers it; from the append's answer to
  the delivery, p50 and p99
- idle followers: 1,000 REST follow streams and 1,000 gRPC follow streams open on one member,
  nothing written: that member's CPU, as a share of one core, against the same member without them

Each figure is the median of --rounds rounds, each on a fresh cluster. Needs wrk (`make bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
from cluster_bench import (  # this folder's siblings: run as `python bench/gateway_bench.py`
    BATCH,
    BATCH_CLIENTS,
    BODY,
    CONNECTIONS,
    drive_for,
    raftlog_batch,
    wrk,
)
from measure import cpu_s, median, raftlog_metered, rate

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.launcher import LocalCluster

IDLE_FOLLOWERS = 1000
TAIL_APPENDS = 400
# room for the idle followers, all from this process's address
SETTINGS = {"max_connections": 4096, "max_followers": 4096, "connections_per_address_max": 4096}
TARGETS = {"stream_vs_rest_batch": 1.0, "tail_p50_ms": 5.0, "idle_core_share": 0.05}


def rest_singles(local: LocalCluster, url: str, seconds: int) -> dict[str, float]:
    report, cpu = raftlog_metered(local, url, lambda: wrk(f"{url}/v1/entries", "wrk_append.lua", seconds))
    return {"aps": rate(report), "p50_ms": report["p50_us"] / 1000, "cpu_us_per_entry": cpu}


async def grpc_singles_async(address: str, seconds: float) -> tuple[int, float, list[float]]:
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    async with grpc.aio.insecure_channel(address) as channel:
        log = log_pb2_grpc.LogStub(channel)

        async def caller() -> None:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                await log.Append(pb.AppendRequest(body=BODY))
                latencies.append(time.perf_counter() - started)

        started = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(CONNECTIONS)))
        return len(latencies), time.monotonic() - started, latencies


def grpc_singles(local: LocalCluster, url: str, address: str, seconds: int) -> dict[str, float]:
    (count, elapsed, latencies), cpu = raftlog_metered(
        local, url, lambda: asyncio.run(grpc_singles_async(address, seconds)))
    return {"aps": count / elapsed, "p50_ms": statistics.median(latencies) * 1000, "cpu_us_per_entry": cpu}


def rest_batches(local: LocalCluster, url: str, seconds: int) -> dict[str, float]:
    eps, cpu = raftlog_metered(local, url, lambda: asyncio.run(
        drive_for(raftlog_batch(url, BATCH), seconds, BATCH_CLIENTS)))
    return {"eps": eps, "cpu_us_per_entry": cpu}


async def stream_batches_async(address: str, seconds: float) -> tuple[int, float]:
    batch = pb.AppendBatchRequest(bodies=[BODY] * BATCH)
    deadline = time.monotonic() + seconds
    async with grpc.aio.insecure_channel(address) as channel:
        call = log_pb2_grpc.LogStub(channel).AppendStream()
        answered = 0

        async def send() -> None:
            while time.monotonic() < deadline:
                await call.write(batch)
            await call.done_writing()

        started = time.monotonic()
        sending = asyncio.ensure_future(send())
        async for answer in call:
            answered += answer.last_index - answer.first_index + 1
        await sending
        return answered, time.monotonic() - started


def stream_batches(local: LocalCluster, url: str, address: str, seconds: int) -> dict[str, float]:
    (entries, elapsed), cpu = raftlog_metered(local, url, lambda: asyncio.run(stream_batches_async(address, seconds)))
    return {"eps": entries / elapsed, "cpu_us_per_entry": cpu}


# -- consumers ---------------------------------------------------------------------------------


async def tail_latency_async(leader_url: str, follower_url: str, follower_grpc: str) -> dict[str, list[float]]:
    acked: dict[bytes, float] = {}
    seen: dict[str, dict[bytes, float]] = {"rest": {}, "grpc": {}}
    start = httpx.get(f"{leader_url}/v1/cluster").json()["committed_index"] + 1
    ready = {"rest": asyncio.Event(), "grpc": asyncio.Event()}

    async def rest_reader(http: httpx.AsyncClient) -> None:
        async with http.stream("GET", f"{follower_url}/v1/entries", params={"start": start, "follow": "true"},
                               headers={"accept": "application/x-ndjson"}) as response:
            ready["rest"].set()
            async for line in response.aiter_lines():
                if line:
                    seen["rest"][json.loads(line)["body"].encode()] = time.perf_counter()
                    if len(seen["rest"]) >= TAIL_APPENDS:
                        return

    async def grpc_reader(channel: grpc.aio.Channel) -> None:
        stream = log_pb2_grpc.LogStub(channel).Read(pb.ReadRequest(start=start, follow=True))
        ready["grpc"].set()
        async for entry in stream:
            seen["grpc"][entry.body] = time.perf_counter()
            if len(seen["grpc"]) >= TAIL_APPENDS:
                stream.cancel()
                return

    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http, \
            grpc.aio.insecure_channel(follower_grpc) as channel:
        readers = [asyncio.ensure_future(rest_reader(http)), asyncio.ensure_future(grpc_reader(channel))]
        for event in ready.values():
            await event.wait()
        await asyncio.sleep(0.5)  # both streams open on the member before the first append
        for i in range(TAIL_APPENDS):
            body = f"tail-{i:06d}".encode()
            response = await http.post(f"{leader_url}/v1/entries", content=body)
            response.raise_for_status()
            acked[body] = time.perf_counter()
            await asyncio.sleep(0.005)  # a producer at about 150 appends/s: each delivery is seen alone
        await asyncio.wait_for(asyncio.gather(*readers), 30)
    return {kind: [(at[body] - acked[body]) * 1000 for body in acked if body in at] for kind, at in seen.items()}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def idle_cpu(local: LocalCluster, member_id: str, seconds: int) -> dict[str, float]:
    """The member's CPU share over `seconds` with nothing written, without and with the idle followers."""
    member = local.members[member_id]
    assert member.process is not None
    pid = member.process.pid

    def share() -> float:
        before = cpu_s([pid])
        time.sleep(seconds)
        return (cpu_s([pid]) - before) / seconds

    baseline = share()

    async def hold() -> float:
        connections = []
        for _ in range(IDLE_FOLLOWERS):
            reader, writer = await asyncio.open_connection("127.0.0.1", member.client_port)
            writer.write(b"GET /v1/entries?start=1000000000&follow=true HTTP/1.1\r\nhost: x\r\n"
                         b"accept: application/x-ndjson\r\n\r\n")
            connections.append((reader, writer))
        for reader, _ in connections:
            status = await reader.readline()
            assert status.startswith(b"HTTP/1.1 200"), status
        async with grpc.aio.insecure_channel(member.grpc_address) as channel:
            stub = log_pb2_grpc.LogStub(channel)
            calls = [stub.Read(pb.ReadRequest(start=1_000_000_000, follow=True)) for _ in range(IDLE_FOLLOWERS)]
            for call in calls:
                await call.initial_metadata()
            followers = httpx.get(f"{member.client_url}/metrics").text
            assert f"raftlog_followers {IDLE_FOLLOWERS}.0" in followers, "the REST streams are open"
            measured = await asyncio.get_running_loop().run_in_executor(None, share)
            for call in calls:
                call.cancel()
        for _, writer in connections:
            writer.close()
        return measured

    with_followers = asyncio.run(hold())
    return {"baseline": baseline, "with_followers": with_followers, "followers_cost": with_followers - baseline}


# -- rounds ------------------------------------------------------------------------------------


def one_round(seconds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="raftlog-gateway-") as root, \
            LocalCluster(Path(root), 3, settings=SETTINGS) as local:
        leader = local.wait_leader()
        url, address = local.members[leader].client_url, local.members[leader].grpc_address
        follower = next(m for m in local.members if m != leader)
        result: dict[str, Any] = {
            "rest_single": rest_singles(local, url, seconds),
            "grpc_single": grpc_singles(local, url, address, seconds),
            "rest_batch": rest_batches(local, url, seconds),
            "grpc_stream_batch": stream_batches(local, url, address, seconds),
        }
        tails = asyncio.run(tail_latency_async(url, local.members[follower].client_url,
                                               local.members[follower].grpc_address))
        result["tail_ms"] = {kind: {"p50": percentile(v, 0.5), "p99": percentile(v, 0.99)}
                             for kind, v in tails.items()}
        result["idle"] = idle_cpu(local, follower, seconds)
        return result


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The same shape as one round, each number the median over the rounds."""
    first = rounds[0]
    if isinstance(first, dict):
        return {key: medians([r[key] for r in rounds]) for key in first}
    return median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # this process holds the idle followers' sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    result = medians([one_round(args.seconds) for _ in range(args.rounds)])
    result["targets"] = TARGETS
    result["meets"] = {
        "stream_vs_rest_batch": result["grpc_stream_batch"]["eps"] >= result["rest_batch"]["eps"],
        "tail_p50_ms": max(t["p50"] for t in result["tail_ms"].values()) <= TARGETS["tail_p50_ms"],
        "idle_core_share": result["idle"]["followers_cost"] < TARGETS["idle_core_share"],
    }
    if args.json:
        print(json.dumps(result))
        return
    rs, gs, rb, gb = result["rest_single"], result["grpc_single"], result["rest_batch"], result["grpc_stream_batch"]
    print(f"{'figure':<58} {'REST':>12} {'gRPC':>12}")
    print(f"{'single appends/s, 64 callers':<58} {rs['aps']:>12,.0f} {gs['aps']:>12,.0f}")
    print(f"{'  p50 ms':<58} {rs['p50_ms']:>12.2f} {gs['p50_ms']:>12.2f}")
    print(f"{'  cluster CPU µs per entry':<58} {rs['cpu_us_per_entry']:>12,.0f} {gs['cpu_us_per_entry']:>12,.0f}")
    print(f"{f'batches of {BATCH}: entries/s (REST {BATCH_CLIENTS} clients, gRPC one stream)':<58} "
          f"{rb['eps']:>12,.0f} {gb['eps']:>12,.0f}")
    print(f"{'  cluster CPU µs per entry':<58} {rb['cpu_us_per_entry']:>12.1f} {gb['cpu_us_per_entry']:>12.1f}")
    tails = result["tail_ms"]
    print(f"{'tail latency p50 ms (answer to a follower stream)':<58} {tails['rest']['p50']:>12.2f} "
          f"{tails['grpc']['p50']:>12.2f}")
    print(f"{'tail latency p99 ms':<58} {tails['rest']['p99']:>12.2f} {tails['grpc']['p99']:>12.2f}")
    idle = result["idle"]
    print(f"idle followers ({IDLE_FOLLOWERS} REST + {IDLE_FOLLOWERS} gRPC on one member): "
          f"{idle['with_followers'] * 100:.2f}% of a core, without them {idle['baseline'] * 100:.2f}% "
          f"(they cost {idle['followers_cost'] * 100:.2f}%)")
    print("meets:", ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in result["meets"].items()))


if __name__ == "__main__":
    main()
