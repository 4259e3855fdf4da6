"""The admin page as a person sees it, in headless Chromium (Debian's) on a real 3-node cluster."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.processes import ClusterFactory, eventually, metric

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 20


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


CARDS_JS = """
return [...document.querySelectorAll('#members .card')].map((card) => [card.dataset.member, {
  role: card.dataset.role, reachable: card.dataset.reachable,
  indices: card.querySelector('dd[data-fact="end"]').textContent}]);
"""


TAIL_JS = """
return [...document.querySelectorAll('#tail-rows tr')].map((row) => [Number(row.dataset.index),
                                                                    row.querySelector('td.body').textContent]);
"""


CLICK_JS = """
const button = document.querySelector(`.card[data-member='${arguments[0]}'] button[data-action='${arguments[1]}']`);
if (button) setTimeout(() => button.click(), 0);  // after this script returns: the click opens a dialog
return !!button;
"""


CONSUMERS_JS = """
return [...document.querySelectorAll('#consumer-rows tr')].map((row) => [...row.cells]).map(
  (cells) => [0, 1, 2, 4, 5, 6].map((i) => cells[i].textContent));
"""


TOPICS_JS = """
return [...document.querySelectorAll('#topic-rows tr')].map((row) => [...row.cells].map((cell) => cell.textContent));
"""


GROUPS_JS = """
return [...document.querySelectorAll('#group-rows tr')].map((row) => [...row.cells].map((cell) => cell.textContent));
"""


def cards(driver: webdriver.Chrome) -> dict[str, dict[str, str]]:
    """What the page shows of each member (role, reachable, indices), read in one go: the page
    redraws every second, so element handles would go stale between two reads."""
    return dict(driver.execute_script(CARDS_JS))


def leaders(shown: dict[str, dict[str, str]]) -> list[str]:
    return [member for member, facts in shown.items() if facts["role"] == "leader"]


def committed(shown: dict[str, dict[str, str]], member: str) -> int:
    value = shown[member]["indices"].split(" / ")[1]
    return int(value) if value.lstrip("-").isdigit() else -1


def test_the_admin_page_shows_the_cluster_live(make_cluster: ClusterFactory, browser: webdriver.Chrome,
                                                tmp_path: Path) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    page_node = next(m for m in cluster.members if m != leader)  # a follower serves the page too
    browser.get(cluster.members[page_node].client_url + "/")
    wait = WebDriverWait(browser, WAIT_S, poll_frequency=0.1)

    # the page shows the leader the members agree on now (an election may have moved it since)
    shown = wait.until(lambda d: (s := cards(d)) and leaders(s) == [cluster.wait_leader()] and s)
    assert sorted(shown) == ["n1", "n2", "n3"]
    assert browser.find_element(By.ID, "self").text == page_node

    url = cluster.members[page_node].client_url  # forwarded to whoever leads
    batch = httpx.post(f"{url}/v1/entries/batch", json={"entries": [{"body": f"seen {i}"} for i in range(20)]})
    assert batch.status_code == 201, batch.text
    first, last = batch.json()["first_index"], batch.json()["last_index"]
    wait.until(lambda d: all(committed(cards(d), m) >= last for m in cluster.members))
    tail = wait.until(lambda d: (rows := d.execute_script(TAIL_JS)) and rows[0][0] >= last and rows)
    assert [last, "seen 19"] in tail and len(tail) == 20  # a screenful of the newest, newest first
    assert [index for index, _ in tail] == sorted((index for index, _ in tail), reverse=True)

    # named consumers with their lag (the consumer's own commit is a control entry the tail leaves out)
    consumer = httpx.put(f"{url}/v1/consumers/billing", json={"position": last - 5, "metadata": "nightly"})
    assert consumer.status_code == 200, consumer.text
    shown_consumer = ["billing", str(last - 5), str(consumer.json()["lag"]), "nightly", "local", "no"]
    wait.until(lambda d: d.execute_script(CONSUMERS_JS) == [shown_consumer])
    assert browser.execute_script(TAIL_JS)[0][0] == last

    # topics, as the page's member's catalog holds them (created through it, by whoever leads)
    created = httpx.post(f"{url}/v1/topics", json={"name": "orders", "queues": 4, "description": "by customer"})
    assert created.status_code == 201, created.text
    shown_topic = ["orders", str(created.json()["id"]), "4", "rw", "by customer"]
    wait.until(lambda d: d.execute_script(TOPICS_JS) == [shown_topic])

    # consumer groups' lag per queue, the most lagging first
    for queue, count in ((1, 3), (2, 5)):
        appended = httpx.post(f"{url}/v1/topics/orders/messages", json={"messages": [{"body": "m"}] * count,
                                                                        "queue": queue})
        assert appended.status_code == 201, appended.text
    offsets = httpx.post(f"{url}/v1/groups/billing/offsets", json={"topic": "orders", "queues": [
        {"queue": 1, "offset": 1}, {"queue": 2, "offset": 4}]})
    assert offsets.status_code == 200, offsets.text
    wait.until(lambda d: d.execute_script(GROUPS_JS) == [["billing", "orders", "1", "1", "3", "2"],
                                                         ["billing", "orders", "2", "4", "5", "1"]])

    # the node keeps the charts' last five minutes: a page opened now starts with them, not empty
    eventually(lambda: len(httpx.get(f"{url}/v1/cluster/history").json()["points"]) >= 5, "five chart points")
    browser.refresh()
    wait.until(lambda d: cards(d))
    assert browser.execute_script("return rates.filter((v) => v !== null).length") >= 5

    leader = cluster.wait_leader()  # the page's node if an election made it the leader
    others = [m for m in cluster.members if m != leader]
    target = next((m for m in others if m != page_node), others[0])
    Select(browser.find_element(By.ID, "transfer-target")).select_by_value(target)
    browser.find_element(By.ID, "transfer-button").click()
    alert = wait.until(lambda d: d.switch_to.alert)
    assert target in alert.text
    alert.accept()
    wait.until(lambda d: d.find_element(By.ID, "transfer-result").text == f"{target} is taking over")
    wait.until(lambda d: leaders(cards(d)) == [cluster.wait_leader()])  # the page follows whoever leads now

    browser.find_element(By.ID, "lookup-index").send_keys(str(first))
    browser.find_element(By.ID, "lookup-button").click()
    wait.until(lambda d: "seen 0" in d.find_element(By.ID, "lookup-result").text)

    victim = next(m for m in cluster.members if m not in (cluster.wait_leader(), page_node))
    cluster.kill_member(victim)  # a follower (the old leader, unless an election moved it) dies
    wait.until(lambda d: cards(d)[victim]["reachable"] == "false" and cards(d)[victim]["role"] == "down")
    browser.save_screenshot(str(tmp_path / "admin-page-member-down.png"))

    cluster.kill_member(page_node)  # the node serving the page dies: the page says so
    banner = wait.until(lambda d: (b := d.find_element(By.ID, "banner")).is_displayed() and b)
    assert f"{page_node} is not answering" in banner.text
    browser.save_screenshot(str(tmp_path / "admin-page-node-down.png"))
    assert (tmp_path / "admin-page-node-down.png").stat().st_size > 0


def test_with_tokens_the_page_asks_for_one_and_acts_by_its_role(make_cluster: ClusterFactory,
                                                                browser: webdriver.Chrome) -> None:
    reader, admin = "reader-token-for-the-page", "admin-token-for-the-page"
    cluster = make_cluster(3, tokens=f"reader:{reader},admin:{admin}")
    leader = cluster.wait_leader()
    browser.get(cluster.members[leader].client_url + "/")
    wait = WebDriverWait(browser, WAIT_S, poll_frequency=0.1)
    login = wait.until(lambda d: (f := d.find_element(By.ID, "login")).is_displayed() and f)
    assert "needs an API token" in login.text and not cards(browser)

    def use(token: str) -> None:
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.ID, "token-button").click()

    use("wrong-token-for-the-page")
    wait.until(lambda d: "cannot read the cluster (UNAUTHENTICATED" in d.find_element(By.ID, "login").text)
    use(reader)
    shown = wait.until(lambda d: (s := cards(d)) and len(leaders(s)) == 1 and s)
    assert sorted(shown) == ["n1", "n2", "n3"] and not browser.find_element(By.ID, "login").is_displayed()

    target = next(m for m in cluster.members if m != leader)
    Select(browser.find_element(By.ID, "transfer-target")).select_by_value(target)
    browser.find_element(By.ID, "transfer-button").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "PERMISSION_DENIED" in d.find_element(By.ID, "transfer-result").text)  # a reader may not

    browser.find_element(By.ID, "forget-token").click()
    wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
    use(admin)
    wait.until(lambda d: cards(d) and not d.find_element(By.ID, "login").is_displayed())
    Select(browser.find_element(By.ID, "transfer-target")).select_by_value(target)
    browser.find_element(By.ID, "transfer-button").click()
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: leaders(cards(d)) == [target])


def test_with_an_admin_token_the_page_adds_promotes_and_removes_members(make_cluster: ClusterFactory,
                                                                       browser: webdriver.Chrome) -> None:
    writer, admin = "writer-token-for-the-page", "admin-token-for-the-page"
    cluster = make_cluster(3, tokens=f"writer:{writer},admin:{admin}")
    leader = cluster.wait_leader()
    browser.get(cluster.members[leader].client_url + "/")
    wait = WebDriverWait(browser, WAIT_S, poll_frequency=0.1)
    wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
    browser.find_element(By.ID, "token").send_keys(writer)
    browser.find_element(By.ID, "token-button").click()
    wait.until(lambda d: cards(d) and not d.find_element(By.ID, "login").is_displayed())

    def add(member_id: str, peer: str) -> None:
        for field, value in (("member-id", member_id), ("member-peer", peer)):
            browser.find_element(By.ID, field).clear()
            browser.find_element(By.ID, field).send_keys(value)
        browser.find_element(By.ID, "member-add").click()

    def click(member_id: str, action: str) -> str:
        """Click a card's button; returns the confirmation's question, accepted."""
        wait.until(lambda d: d.execute_script(CLICK_JS, member_id, action))
        alert = wait.until(lambda d: d.switch_to.alert)
        question = alert.text
        alert.accept()
        return question

    def result() -> str:
        return browser.find_element(By.ID, "members-result").text

    add("n9", "127.0.0.1:1")  # a writer may not
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "PERMISSION_DENIED" in result())
    browser.find_element(By.ID, "forget-token").click()
    wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
    browser.find_element(By.ID, "token").send_keys(admin)
    browser.find_element(By.ID, "token-button").click()
    wait.until(lambda d: cards(d) and not d.find_element(By.ID, "login").is_displayed())

    said = result()
    add("n9", "127.0.0.1:1")
    wait.until(lambda d: d.switch_to.alert).dismiss()  # asked first: dismissed, nothing changes
    assert "n9" not in cards(browser) and result() == said

    new = cluster.add_member()  # a new machine joins by itself; the page shows it as a learner
    cluster.start_member(new.id)
    wait.until(lambda d: cards(d).get(new.id, {}).get("role") == "learner")
    assert "Promote" in click(new.id, "promote")
    wait.until(lambda d: f"{new.id} (voter)" in result())
    wait.until(lambda d: cards(d)[new.id]["role"] == "follower")

    add("n9", "127.0.0.1:1")  # added by hand, never started: a learner that is down
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "n9 (learner)" in result())
    wait.until(lambda d: cards(d).get("n9", {}).get("role") == "down")
    add("n9", "127.0.0.1:2")
    wait.until(lambda d: d.switch_to.alert).accept()
    wait.until(lambda d: "MEMBER_EXISTS" in result())  # refused with its code

    assert "Remove n9" in click("n9", "remove")
    wait.until(lambda d: "n9" not in cards(d))
    leader = cluster.wait_leader()
    assert "leadership goes to another voter first" in click(leader, "remove")
    wait.until(lambda d: leader not in cards(d) and len(leaders(cards(d))) == 1)
    assert sorted(cards(browser)) == sorted(m for m in ("n1", "n2", "n3", new.id) if m != leader)


EVIL_PAGE = """<!doctype html><title>a page on another site</title>
<form id="form" method="post" enctype="text/plain" action="{member}/v1/cluster/members">
<input name='{{"id": "n9", "peer_address": "127.0.0.1:9", "x": "' value='"}}'></form>
<script>
const tries = [
  ["/v1/cluster/members", "POST", '{{"id": "n8", "peer_address": "127.0.0.1:8"}}'],
  ["/v1/entries", "POST", "written by a page on another site"],
  ["/v1/cluster/leader", "POST", '{{"target": "n1"}}'],
];
Promise.allSettled([...tries.map(([path, method, body]) => fetch("{member}" + path,
    {{method, body, mode: "no-cors", headers: {{"content-type": "text/plain"}}}})),
  fetch("{member}/v1/cluster/members/n1", {{method: "DELETE"}})])  // asks first (a preflight): never sent
  .then(() => {{ document.title = "sent"; document.getElementById("form").submit(); }});
</script>"""


def test_a_page_on_another_site_cannot_write_to_or_reconfigure_a_tokenless_group(
        make_cluster: ClusterFactory, browser: webdriver.Chrome, tmp_path: Path) -> None:
    """What a browser sends for a page on another origin without asking first (no-cors fetches and a
    text/plain form that smuggles JSON): refused by Origin, nothing written (etcd's CVE-2018-1098)."""
    cluster = make_cluster(1)
    (member,) = cluster.members.values()
    cluster.wait_leader()
    before = httpx.get(f"{member.client_url}/v1/cluster/members").json()
    end = httpx.get(f"{member.client_url}/v1/cluster").json()["members"][0]["end_index"]
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(EVIL_PAGE.format(member=member.client_url))
    removals = 'raftlog_http_requests_total{method="DELETE"'

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://localhost:{server.server_address[1]}/index.html")  # another origin than the member's
        eventually(lambda: metric(member.client_url, "raftlog_auth_failures_total", port="client",
                                  reason="origin") >= 4, "the member to refuse the page's three fetches and its form")
    finally:
        server.shutdown()
        server.server_close()
    assert httpx.get(f"{member.client_url}/v1/cluster/members").json() == before
    assert httpx.get(f"{member.client_url}/v1/cluster").json()["members"][0]["end_index"] == end
    assert browser.current_url == f"{member.client_url}/v1/cluster/members"  # the form went, after the fetches
    assert removals not in httpx.get(f"{member.client_url}/metrics").text  # the browser never sent the DELETE
