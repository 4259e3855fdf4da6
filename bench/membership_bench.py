"""Membership changes on a local cluster: what adding a member to a long log takes, what a change costs
the writers, and how long writes stop when the leader removes itself.

    python bench/membership_bench.py [--log-mib 1024] [--rounds 5] [--load-eps 20000] [--set NAME=VALUE] [--json]

- add and promote: a 3-node cluster holds --log-mib of log (bodies of 1000 bytes, in batches of 1000).
  A fresh member starts with `--join` (an empty disk): seconds until the group lists it as a learner,
  until it holds the leader's log (the first promote accepted: lag within max_promote_lag_entries), and
  until the promotion commits. A member more than peer_push_throttle_point behind is fed at
  peer_push_quota (DLedger's 20 MiB/s): that bounds the catch-up; --set changes them.
- the write rate before, during and after: BATCH_CLIENTS clients append batches of 1000 bodies of 100
  bytes to the leader the whole time, at --load-eps together; entries/s acknowledged over the 10 s
  before the join, while the learner catches up, and over the 10 s after the promotion.
- the leader removes itself: on a fresh 3-node cluster under load (wrk, single appends), DELETE
  /v1/cluster/members/<the leader> sent to the leader (it hands leadership to a caught-up voter first);
  ms from the request to the first append acknowledged through the members that stay, and the request's
  own answer time; --rounds times, the removed member joining again (empty disk) between rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from cluster_bench import BATCH, BATCH_CLIENTS, raftlog_batch  # this folder's siblings: run as a script
from compare import background_load, first_write_after

from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from raftlog.app.launcher import LocalCluster

BIG_BODY = b"y" * 1000
ENTRY_BYTES = 48 + len(BIG_BODY)  # DLedger's header and the body
WINDOW_S = 10.0


def fill(url: str, mib: int) -> int:
    """Append --log-mib of log; returns the last index."""
    payload = encode_bodies([BIG_BODY] * BATCH)
    batches = -(-mib * 2**20 // (ENTRY_BYTES * BATCH))
    last = -1

    async def writer(http: httpx.AsyncClient, share: int) -> None:
        nonlocal last
        while share:
            try:
                answer = await http.post(f"{url}/v1/entries/batch", content=payload,
                                         headers={"content-type": BATCH_CONTENT_TYPE})
            except httpx.HTTPError:
                continue
            if answer.status_code == 201:  # else (a leader change just after the start): again
                last, share = max(last, answer.json()["last_index"]), share - 1

    async def run() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            shares = [batches // BATCH_CLIENTS + (i < batches % BATCH_CLIENTS) for i in range(BATCH_CLIENTS)]
            await asyncio.gather(*(writer(http, share) for share in shares))

    asyncio.run(run())
    return last


class Load(threading.Thread):
    """BATCH_CLIENTS clients appending batches to the leader at `eps` entries/s together (a steady load
    the leader has room beside: a saturating one outruns peer_push_quota, and a new member far behind
    would never catch up), each acknowledged batch timed."""

    def __init__(self, url: str, eps: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.interval_s = BATCH * BATCH_CLIENTS / eps  # each client's time per batch
        self.acked: list[tuple[float, int]] = []  # (when, entries)
        self.stopping = threading.Event()

    def run(self) -> None:
        send = raftlog_batch(self.url, BATCH)

        async def client(http: httpx.AsyncClient) -> None:
            next_at = time.monotonic()
            while not self.stopping.is_set():
                with contextlib.suppress(httpx.HTTPError):  # refused while the group changes: not counted
                    self.acked.append((time.monotonic(), await send(http)))
                next_at += self.interval_s
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

        async def run() -> None:
            async with httpx.AsyncClient(timeout=30) as http:
                await asyncio.gather(*(client(http) for _ in range(BATCH_CLIENTS)))

        asyncio.run(run())

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.acked if start <= t < end) / max(end - start, 1e-9)


def get(url: str, path: str) -> dict[str, Any]:
    return httpx.get(f"{url}{path}", timeout=5).json()


def add_and_promote(root: Path, log_mib: int, load_eps: int, settings: dict[str, str], log: Any) -> dict[str, Any]:
    cluster = LocalCluster(root, 3, settings=settings)
    try:
        cluster.start()
        leader = cluster.members[cluster.wait_leader()].client_url
        started = time.monotonic()
        last = fill(leader, log_mib)
        log(f"  {log_mib} MiB of log ({last + 1:,} entries) written in {time.monotonic() - started:.1f} s")
        load = Load(leader, load_eps)
        load.start()
        time.sleep(WINDOW_S)
        new = cluster.add_member()
        joined = time.monotonic()
        cluster.start_member(new.id)
        listed = promoted = None
        while promoted is None:
            if listed is None and any(m["id"] == new.id for m in get(leader, "/v1/cluster/members")["members"]):
                listed = time.monotonic()
            if listed is not None:
                answer = httpx.post(f"{leader}/v1/cluster/members/{new.id}/promote", timeout=15)
                if answer.status_code == 200:
                    promoted = time.monotonic()
                    break
            time.sleep(0.2)
        time.sleep(WINDOW_S)
        load.stopping.set()
        load.join(30)
        figures = {
            "log_mib": log_mib, "entries": last + 1,
            "listed_s": listed - joined, "caught_up_s": promoted - joined,
            "eps_before": load.rate(joined - WINDOW_S, joined), "eps_during": load.rate(joined, promoted),
            "eps_after": load.rate(promoted, promoted + WINDOW_S)}
        log(f"  joined: listed as a learner after {figures['listed_s']:.2f} s, promoted after "
            f"{figures['caught_up_s']:.1f} s; appends/s before {figures['eps_before']:,.0f}, during "
            f"{figures['eps_during']:,.0f}, after {figures['eps_after']:,.0f}")
        return figures
    finally:
        cluster.stop()


def leader_removes_itself(root: Path, rounds: int, log: Any) -> dict[str, list[float]]:
    cluster = LocalCluster(root, 3)
    unavailable, answered = [], []
    try:
        cluster.start()
        for round_ in range(rounds):
            group = [m for m, member in cluster.members.items() if member.running]
            leader = cluster.wait_leader(among=group)
            stay = [cluster.members[m].client_url for m in group if m != leader]
            url = cluster.members[leader].client_url
            took: list[float] = []

            def ask(url: str = url, leader: str = leader, took: list[float] = took) -> None:
                sent = time.monotonic()
                try:
                    answer = httpx.delete(f"{url}/v1/cluster/members/{leader}", timeout=30)
                    took.append(time.monotonic() - sent if answer.status_code == 200 else -1.0)
                    if answer.status_code != 200:
                        print(f"  the removal was refused: {answer.text}", flush=True)
                except httpx.HTTPError as exc:
                    print(f"  the removal had no answer: {exc}", flush=True)
                    took.append(-1.0)

            def remove(ask: Any = ask) -> None:  # answered in the background: writes are timed meanwhile
                threading.Thread(target=ask, daemon=True).start()

            def write(stay: list[str] = stay) -> bool:
                for other in stay:
                    try:
                        if httpx.post(f"{other}/v1/entries", content=b"probe", timeout=1.0).status_code == 201:
                            return True
                    except httpx.HTTPError:
                        pass
                return False

            with background_load(f"{stay[0]}/v1/entries", "wrk_append.lua"):
                gap = first_write_after(remove, write)
                while not took:
                    time.sleep(0.01)
            if took[0] < 0:
                raise RuntimeError(f"round {round_ + 1}: {leader}'s removal failed")
            unavailable.append(gap)
            answered.append(took[0] * 1000)
            log(f"  round {round_ + 1}: {leader} removed itself; writes through the others stopped for "
                f"{unavailable[-1]:.0f} ms, the request answered after {answered[-1]:.0f} ms")
            cluster.stop_member(leader)  # its machine is wiped and joins again, as a new learner
            shutil.rmtree(cluster.members[leader].data_dir)
            cluster.members[leader].join = cluster.members[group[0] if group[0] != leader else group[1]].client_url
            cluster.peers = ";".join(f"{m}-127.0.0.1:{cluster.members[m].peer_port}" for m in group)
            cluster.start_member(leader)
            new_leader = cluster.wait_leader(among=[m for m in group if m != leader])
            while httpx.post(f"{cluster.members[new_leader].client_url}/v1/cluster/members/{leader}/promote",
                             timeout=15).status_code != 200:
                time.sleep(0.2)
        return {"unavailable_ms": unavailable, "answered_ms": answered}
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--load-eps", type=int, default=20_000, help="the writers' steady rate, entries/s")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for every node of the add phase, e.g. --set peer_push_quota=209715200")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    log = (lambda _line: None) if args.json else functools.partial(print, flush=True)
    with tempfile.TemporaryDirectory(prefix="raftlog-membership-bench-") as tmp:
        log(f"add a member and promote it, {args.log_mib} MiB of log:")
        settings = dict(item.split("=", 1) for item in args.set)
        added = add_and_promote(Path(tmp) / "add", args.log_mib, args.load_eps, settings, log)
        log(f"the leader removes itself, {args.rounds} rounds:")
        removal = leader_removes_itself(Path(tmp) / "remove", args.rounds, log)
    result = {**added, "removal_unavailable_ms_p50": statistics.median(removal["unavailable_ms"]),
              "removal_unavailable_ms_max": max(removal["unavailable_ms"]),
              "removal_answered_ms_p50": statistics.median(removal["answered_ms"]), "removal": removal}
    if args.json:
        print(json.dumps(result))
        return
    print()
    print(f"| figure | {args.log_mib} MiB of log |")
    print("|---|---|")
    print(f"| a joining member listed as a learner | {added['listed_s']:.2f} s |")
    print(f"| ... caught up and promoted | {added['caught_up_s']:.1f} s |")
    print(f"| appends/s before / during / after | {added['eps_before']:,.0f} / {added['eps_during']:,.0f} / "
          f"{added['eps_after']:,.0f} |")
    print(f"| the leader removes itself: writes stop, median (worst) | {result['removal_unavailable_ms_p50']:.0f} "
          f"({result['removal_unavailable_ms_max']:.0f}) ms |")
    print(f"| ... its request answered, median | {result['removal_answered_ms_p50']:.0f} ms |")


if __name__ == "__main__":
    main()
