"""The search page (`serve`'s /) in a real, headless Chromium (Debian's
chromium and chromium-driver, driven by selenium) against a real server on
127.0.0.1: first load from the URL, typing, keys, preview, modes, the side by
side view (every list that voted, as explain names them), input methods, dark
mode, several vaults (named in the address, back and forward, highlighting,
one side by side panel per vault), and no request leaving 127.0.0.1."""

import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from indexer.embed import HashEmbedder
from tests.conftest import SAMPLE_VAULT, copy_tree
from vault_search import Index

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

MISSING = ("Debian's chromium and chromium-driver are not installed (make test installs them with apt-get when it "
           "can; `apt-get install chromium chromium-driver`)")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    if os.environ.get("VAULT_SEARCH_REQUIRE_BROWSER"):   # CI: the page must be tested, never skipped
        pytest.fail(MISSING, pytrace=False)
    pytest.skip(MISSING, allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (make test installs it)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@contextmanager
def serving(vaults: list[tuple[Path, Path, int]]):
    """The page over each (vault, index folder, hash embedder's size), indexed
    first, from one server on 127.0.0.1: its address."""
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    services = []
    for vault, index, dim in vaults:
        with Index.open(vault, index, create=True, embedder=HashEmbedder(dim)) as idx:
            idx.sync()
        services.append(SearchService(vault, index, watch=False, warm=False, embedder=HashEmbedder(dim)))
    httpd = VaultHTTPServer(services if len(services) > 1 else services[0], "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        for service in services:
            service.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    vault = copy_tree(SAMPLE_VAULT, root / "vault")
    with serving([(vault, root / "index", 64)]) as url:
        yield url, vault


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, test, timeout=10):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: test(d))


def paths(driver):
    """The listed notes (read in one script: the list may be re-rendered while it is read)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#results .result')].map((e) => e.dataset.path)")


def shown_query(driver):
    return driver.find_element(By.ID, "results").get_attribute("data-query")


SEEN: list[str] = []   # every URL any page of this module asked for


def requests_made(driver) -> list[str]:
    """Every URL the page asked for since the last call (DevTools' network log)."""
    urls: list[str] = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    SEEN.extend(urls)
    return urls


def searches(urls):
    return [u for u in urls if "/search?" in u]


_REQUEST_URLS: dict[str, str] = {}   # DevTools' request id -> URL, over calls of ``network``
_STATUSES: dict[str, int] = {}        # request id -> status, until its URL is known


def network(driver) -> tuple[list[dict], dict[str, int]]:
    """The requests (url, headers) the pages made since the last call, and the
    status each URL was answered with (DevTools' network log; the raw status,
    also of an answer the browser then withheld from the page)."""
    sent, urls, statuses = [], _REQUEST_URLS, _STATUSES
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message.get("method") == "Network.requestWillBeSent":
            sent.append(params["request"])
            urls[params["requestId"]] = params["request"]["url"]
            SEEN.append(params["request"]["url"])
        elif message.get("method") == "Network.responseReceivedExtraInfo":
            # DevTools may report the status before the request (a busy machine): kept until both are known.
            statuses[params["requestId"]] = params["statusCode"]
    known = [i for i in statuses if i in urls]
    return sent, {urls[i]: statuses.pop(i) for i in known}


def test_the_page_searches_as_you_type_with_the_state_in_the_url(site, browser):
    base, _ = site
    browser.get(f"{base}/?q=Tea%20Ceremony")
    wait(browser, lambda d: paths(d))
    assert paths(browser)[0] == "Notes/Travel/Kyoto trip.md"
    assert browser.switch_to.active_element.get_attribute("id") == "q"   # focus on load
    first = browser.find_element(By.CSS_SELECTOR, "#results .result")
    assert "Notes/Travel/Kyoto trip.md:" in first.find_element(By.CLASS_NAME, "where").text
    assert {m.text.lower() for m in first.find_elements(By.TAG_NAME, "mark")} == {"tea", "ceremony"}
    assert first.find_element(By.LINK_TEXT, "open in Obsidian").get_attribute("href").startswith("obsidian://open?")
    assert "#travel/japan" in first.text and "match:" in first.text

    box = browser.find_element(By.ID, "q")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    for ch in "deep work":   # one key at a time: debounced, the last query's results only
        box.send_keys(ch)
    wait(browser, lambda d: shown_query(d) == "deep work" and paths(d))
    assert paths(browser)[0] == "Notes/Reading/Deep Work.md" and len(paths(browser)) >= 2
    assert "q=deep+work" in browser.current_url
    time.sleep(0.5)
    assert shown_query(browser) == "deep work"   # no older answer arrived after it

    # Arrows move, Enter opens the preview of the note's lines around the hit, Esc closes, then clears.
    box.send_keys(Keys.ARROW_DOWN)
    second = paths(browser)[1]
    assert "selected" in browser.find_elements(By.CSS_SELECTOR, "#results .result")[1].get_attribute("class")
    box.send_keys(Keys.ENTER)
    preview = browser.find_element(By.ID, "preview")
    wait(browser, lambda d: preview.get_attribute("data-path") == second)
    assert preview.is_displayed() and preview.find_elements(By.CSS_SELECTOR, ".line.hit")
    box.send_keys(Keys.ESCAPE)
    wait(browser, lambda d: not preview.is_displayed())
    box.send_keys(Keys.ESCAPE)
    wait(browser, lambda d: shown_query(d) == "" and not paths(d))
    assert browser.current_url == f"{base}/"


def test_modes_side_by_side_status_and_dark_mode(site, browser):
    base, _ = site
    browser.get(f"{base}/?q=tea%20ceremony&mode=vector")
    wait(browser, lambda d: paths(d))
    assert Select(browser.find_element(By.ID, "mode")).first_selected_option.get_attribute("value") == "vector"
    assert "(vector," in browser.find_element(By.ID, "results").text
    Select(browser.find_element(By.ID, "mode")).select_by_value("fts")
    wait(browser, lambda d: "mode=fts" in d.current_url and "(fts," in d.find_element(By.ID, "results").text)
    browser.find_element(By.ID, "compare").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".compare [data-list=fused] li"))
    titles = [h.text for h in browser.find_elements(By.CSS_SELECTOR, ".compare h3")]
    assert titles[0] == "keyword (BM25)" and titles[-1] == "fused (fts)", titles   # keyword mode: its one list
    fused = browser.find_element(By.CSS_SELECTOR, ".compare [data-list=fused]").text
    assert "#1 · keyword #1" in fused and "view=compare" in browser.current_url
    wait(browser, lambda d: "notes" in d.find_element(By.ID, "status").text)
    assert "22 notes" in browser.find_element(By.ID, "status").text

    light = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    dark = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert light == "rgb(255, 255, 255)" and dark != light


def test_an_input_method_fires_no_half_typed_search(site, browser):
    base, _ = site
    browser.get(f"{base}/")
    wait(browser, lambda d: d.find_element(By.ID, "status").text)
    requests_made(browser)
    browser.execute_script("""
        const q = document.getElementById('q');
        q.dispatchEvent(new CompositionEvent('compositionstart', {data: ''}));
        for (const text of ['shu', 'shuju', '数据']) {
            q.value = text;
            q.dispatchEvent(new InputEvent('input', {data: text, isComposing: true}));
        }""")
    time.sleep(0.8)
    assert searches(requests_made(browser)) == []
    browser.execute_script("""
        const q = document.getElementById('q');
        q.value = '数据库';
        q.dispatchEvent(new CompositionEvent('compositionend', {data: '数据库'}));""")
    wait(browser, lambda d: shown_query(d) == "数据库")
    made = searches(requests_made(browser))
    assert len(made) == 1 and "q=%E6%95%B0%E6%8D%AE%E5%BA%93" in made[0]
    assert "Notes/数据库/数据库索引.md" in paths(browser)


def test_the_page_asks_nothing_outside_127_0_0_1_and_cannot_be_framed(site, browser):
    base, _ = site
    requests_made(browser)
    browser.get(f"{base}/?q=%E6%95%B0%E6%8D%AE%E5%BA%93")
    wait(browser, lambda d: paths(d))
    browser.find_element(By.ID, "q").send_keys(Keys.ENTER)
    wait(browser, lambda d: d.find_element(By.ID, "preview").is_displayed())
    urls = requests_made(browser)
    assert urls and all(u.startswith(base + "/") or u.startswith("data:") for u in urls), urls
    with urllib.request.urlopen(f"{base}/", timeout=10) as resp:
        csp = resp.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "connect-src 'self'" in csp
        assert resp.headers["Content-Type"].startswith("text/html")
    # Another site's page cannot read the API through the browser: its Origin is refused.
    req = urllib.request.Request(f"{base}/search?q=x", headers={"Origin": "https://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code == 403


def test_the_preview_shows_the_last_note_asked_for_and_filters_keep_their_keys(site, browser):
    base, _ = site
    browser.get(f"{base}/?q=deep%20work")
    wait(browser, lambda d: len(paths(d)) >= 2)
    # The first preview's answer comes late; the second is asked for meanwhile and must win.
    browser.execute_script("""
        const real = window.fetch;
        let first = true;
        window.fetch = (url, opts) => {
            if (String(url).startsWith('/get') && first) {
                first = false;
                return new Promise((ok) => setTimeout(() => ok(real(url, opts)), 700));
            }
            return real(url, opts);
        };""")
    results = browser.find_elements(By.CSS_SELECTOR, "#results .result")
    results[0].click()
    results[1].click()
    preview = browser.find_element(By.ID, "preview")
    wait(browser, lambda d: preview.get_attribute("data-path") == paths(d)[1])
    time.sleep(1.0)   # the slow first answer has arrived by now, and was dropped
    assert preview.get_attribute("data-path") == paths(browser)[1]
    # Esc in a filter box empties that box, not the query.
    browser.find_element(By.CSS_SELECTOR, "#filters summary").click()
    tag = browser.find_element(By.ID, "tag")
    tag.send_keys("reading")
    wait(browser, lambda d: "tag=reading" in d.current_url)
    tag.send_keys(Keys.ESCAPE)
    wait(browser, lambda d: "tag=" not in d.current_url)
    assert browser.find_element(By.ID, "q").get_attribute("value") == "deep work"


def test_several_vaults_pick_one_and_preview_from_it(tmp_path, browser):
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    notes = copy_tree(SAMPLE_VAULT, tmp_path / "notes")
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "kyoto.md").write_text("# Kyoto plan\nBook the tea ceremony in Gion.\n", encoding="utf-8")
    services = [SearchService(notes, tmp_path / "i1", watch=False, warm=False),
                SearchService(memory, tmp_path / "i2", watch=False, warm=False)]
    httpd = VaultHTTPServer(services, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{httpd.server_port}"
    try:
        requests_made(browser)   # what earlier pages asked for is theirs
        browser.get(f"{base}/?q=tea%20ceremony&mode=fts")
        wait(browser, lambda d: len(paths(d)) == 2)
        chips = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "#results .chip.vault")}
        assert chips == {"notes", "memory"}
        browser.find_elements(By.CSS_SELECTOR, "#results .result")[
            paths(browser).index("kyoto.md")].click()
        wait(browser, lambda d: d.find_element(By.ID, "preview").get_attribute("data-path") == "kyoto.md")
        box = browser.find_element(By.ID, "vault")
        wait(browser, lambda d: box.is_displayed())
        Select(box).select_by_visible_text("memory")
        wait(browser, lambda d: paths(d) == ["kyoto.md"] and "vault=" in d.current_url)
        wait(browser, lambda d: d.find_element(By.ID, "status").text.startswith("1 note · 1 chunk"))
        urls = requests_made(browser)
        assert all(u.startswith(base + "/") or u.startswith("data:") for u in urls), urls
    finally:
        httpd.shutdown()
        httpd.server_close()
        for service in services:
            service.close()


@pytest.fixture(scope="module")
def two_vaults(tmp_path_factory):
    """`serve --vault notes --vault memory`: the sample vault, and a small English
    one whose index has another model (so no cosine of one may stand beside
    the other's)."""
    root = tmp_path_factory.mktemp("two-vaults")
    notes = copy_tree(SAMPLE_VAULT, root / "notes")
    memory = root / "memory"
    memory.mkdir()
    (memory / "kyoto.md").write_text("# Kyoto plan\nBook the tea ceremony in Gion.\n", encoding="utf-8")
    (memory / "lists.md").write_text("# Shopping\n\nHow do I add an item to the list? Indian dogs do a random dance. "
                                     "Add items daily; the address book is kept apart.\n", encoding="utf-8")
    with serving([(notes, root / "index-notes", 64), (memory, root / "index-memory", 32)]) as url:
        yield url, root


def api(base, path, **params):
    with urllib.request.urlopen(f"{base}{path}?{urllib.parse.urlencode(params)}", timeout=30) as resp:
        return json.loads(resp.read())


def chosen_vault(driver):
    return driver.execute_script("return document.getElementById('vault').value")


def url_vault(driver):
    return urllib.parse.parse_qs(urllib.parse.urlsplit(driver.current_url).query).get("vault", [""])[0]


def test_the_address_names_the_vault_through_reload_back_and_forward(two_vaults, browser):
    """Issue 37.7: ?vault=NAME is read on load; the menu writes names (never a
    folder) into the address; back, forward and reload show each entry's search."""
    base, root = two_vaults
    kyoto = "Notes/Travel/Kyoto trip.md"
    browser.get(f"{base}/?q=tea%20ceremony&vault=memory")
    wait(browser, lambda d: paths(d) == ["kyoto.md"] and chosen_vault(d) == "memory")
    assert url_vault(browser) == "memory"
    box = Select(browser.find_element(By.ID, "vault"))
    assert [o.get_attribute("value") for o in box.options] == ["", "notes", "memory"]
    wait(browser, lambda d: d.find_element(By.ID, "status").text.startswith("2 notes"))   # the chosen vault's

    box.select_by_visible_text("notes")
    wait(browser, lambda d: url_vault(d) == "notes" and paths(d) and paths(d)[0] == kyoto)
    assert "kyoto.md" not in paths(browser)
    box.select_by_visible_text("all vaults")
    wait(browser, lambda d: url_vault(d) == "" and {"kyoto.md", kyoto} <= set(paths(d)))
    assert str(root) not in browser.current_url

    browser.back()
    wait(browser, lambda d: url_vault(d) == "notes" and chosen_vault(d) == "notes" and "kyoto.md" not in paths(d))
    browser.back()
    wait(browser, lambda d: url_vault(d) == "memory" and chosen_vault(d) == "memory" and paths(d) == ["kyoto.md"])
    browser.forward()
    wait(browser, lambda d: chosen_vault(d) == "notes" and paths(d) and paths(d)[0] == kyoto)
    browser.refresh()
    wait(browser, lambda d: chosen_vault(d) == "notes" and paths(d) and paths(d)[0] == kyoto)
    assert url_vault(browser) == "notes" and shown_query(browser) == "tea ceremony"

    # A query typed after a pause is an entry of its own; its keystrokes are not.
    time.sleep(1.6)
    q = browser.find_element(By.ID, "q")
    q.send_keys(Keys.CONTROL, "a")
    for ch in "deep work":
        q.send_keys(ch)
    wait(browser, lambda d: shown_query(d) == "deep work" and paths(d))
    browser.back()
    wait(browser, lambda d: shown_query(d) == "tea ceremony" and d.find_element(By.ID, "q").get_attribute("value")
         == "tea ceremony" and paths(d) and paths(d)[0] == kyoto)

    # An address from before vaults had names in it (a folder): the vault's name replaces it.
    browser.get(f"{base}/?q=tea%20ceremony&vault={urllib.parse.quote(str(root / 'memory'), safe='')}")
    wait(browser, lambda d: url_vault(d) == "memory" and chosen_vault(d) == "memory" and paths(d) == ["kyoto.md"])
    assert str(root) not in browser.current_url


def marks_of(driver, path):
    return driver.execute_script(
        "const li = [...document.querySelectorAll('#results .result')].find((e) => e.dataset.path === arguments[0]);"
        "return li ? [...li.querySelectorAll('.snippet mark')].map((m) => m.textContent) : null;", path)


def test_all_vaults_mark_the_words_searched_and_explain_only_when_asked(two_vaults, browser):
    """Issue 37.8: with every vault searched the page marks the words the
    server searched (on word boundaries in Latin script, inside Chinese text),
    not "i", "an", "do" inside words, and says nothing of explain."""
    base, _ = two_vaults
    browser.get(f"{base}/?q=how%20do%20I%20add%20an%20item")
    wait(browser, lambda d: "lists.md" in paths(d))
    assert chosen_vault(browser) == "" and len({e.text for e in browser.find_elements(
        By.CSS_SELECTOR, "#results .chip.vault")}) == 2   # both vaults answered
    marks = marks_of(browser, "lists.md")
    assert sorted(m.lower() for m in marks) == ["add", "add", "item", "items"], marks
    snippet = browser.execute_script("return [...document.querySelectorAll('#results .result')].find("
                                     "(e) => e.dataset.path === 'lists.md').querySelector('.snippet').innerHTML")
    assert "Indian dogs do a random dance" in snippet and "address book" in snippet   # nothing marked inside
    warnings = [w.text for w in browser.find_elements(By.CSS_SELECTOR, "#results .warning")]
    assert not any("explain" in w for w in warnings), warnings

    browser.get(f"{base}/?q=%E6%95%B0%E6%8D%AE%E5%BA%93%E7%B4%A2%E5%BC%95")   # 数据库索引: Han has no spaces
    wait(browser, lambda d: "Notes/数据库/数据库索引.md" in paths(d))
    marks = marks_of(browser, "Notes/数据库/数据库索引.md")
    assert "索引" in marks and any(m.startswith("数据") for m in marks), marks
    warnings = [w.text for w in browser.find_elements(By.CSS_SELECTOR, "#results .warning")]
    assert not any("explain" in w for w in warnings), warnings


def compare_columns(driver, vault=None):
    """Side by side as shown: per panel (by vault), each list's column: its
    heading and the (path, rank line) of each note in it."""
    panels = driver.execute_script("""
        return [...document.querySelectorAll('#results .compare-vault')].map((panel) => ({
            vault: panel.dataset.vault || '', head: (panel.querySelector('h2') || {}).textContent || '',
            warnings: [...panel.querySelectorAll('.warning')].map((w) => w.textContent),
            lists: [...panel.querySelectorAll('.compare > div')].map((col) => [col.dataset.list, {
                title: col.querySelector('h3').textContent,
                notes: [...col.querySelectorAll('li')].map((li) => [li.dataset.path, li.querySelector('.rank').textContent]),
            }]),
        }));""")
    return {p["vault"]: {**p, "lists": dict(p["lists"])} for p in panels}


def expected_columns(explain, results):
    """What side by side must show, from the server's own explain: each list that
    voted, the fused notes it ranked in its order, each note's rank there."""
    rows = {r["path"]: r for r in explain["ranks"]}
    out = {}
    for name in explain["weights"]:
        ranked = sorted((rows[r["path"]]["ranks"][name], r["path"]) for r in results if name in rows[r["path"]]["ranks"])
        out[name] = [(path, rank) for rank, path in ranked]
    return out


def test_side_by_side_over_several_vaults_is_one_panel_per_vault(two_vaults, browser):
    """Issue 37.8: side by side with every vault: each vault's lists, ranks and
    cosines in a panel of its own, under its name and model, never mixed."""
    base, _ = two_vaults
    browser.get(f"{base}/?q=tea%20ceremony&view=compare")
    wait(browser, lambda d: len(compare_columns(d)) == 2 and all(
        p["lists"].get("fused", {}).get("notes") for p in compare_columns(d).values()))
    shown = compare_columns(browser)
    assert shown["notes"]["head"] == "notes · hash:64" and shown["memory"]["head"] == "memory · hash:32"
    for name, panel in shown.items():
        answer = api(base, "/search", q="tea ceremony", vault=name, explain=1, limit=20)
        assert [p for p, _ in panel["lists"]["fused"]["notes"]] == [r["path"] for r in answer["results"]]
        for list_name, notes in expected_columns(answer["explain"], answer["results"]).items():
            assert [(p, line.split(" · ")[0]) for p, line in panel["lists"][list_name]["notes"]] == \
                [(p, f"#{rank}") for p, rank in notes], (name, list_name)
        assert set(panel["lists"]) == {*answer["explain"]["weights"], "fused"}
        assert not any("explain" in w for w in panel["warnings"])
    assert [p for p, _ in shown["memory"]["lists"]["vector"]["notes"]] == ["kyoto.md"]   # its own vault's only


def test_side_by_side_shows_every_list_that_voted_as_explain_does(site, browser):
    """Issue 37.9: a question in the other language (自定义状态 on notes mostly
    in English): side by side shows the keyword, translated and vector lists
    the fused ranks cite, each with the server's ranks, from one search."""
    base, _ = site
    query = "自定义状态"
    answer = api(base, "/search", q=query, explain=1, limit=20)
    explain = answer["explain"]
    assert {"fts", "translated", "vector"} <= set(explain["weights"])   # the translated list voted
    requests_made(browser)
    browser.get(f"{base}/?q={urllib.parse.quote(query)}&view=compare")
    wait(browser, lambda d: compare_columns(d).get("", {}).get("lists", {}).get("fused", {}).get("notes"))
    panel = compare_columns(browser)[""]
    assert panel["head"] == ""   # one vault: no vault heading
    assert [panel["lists"][n]["title"] for n in panel["lists"]] == \
        ["keyword (BM25)", "translated (BM25)", "vector (cosine)", "fused (hybrid)"]
    for list_name, notes in expected_columns(explain, answer["results"]).items():
        assert [(p, line.split(" · ")[0]) for p, line in panel["lists"][list_name]["notes"]] == \
            [(p, f"#{rank}") for p, rank in notes], list_name
    rows = {r["path"]: r for r in explain["ranks"]}
    for place, (path, line) in enumerate(panel["lists"]["fused"]["notes"], 1):
        cited = rows[path]["ranks"]
        assert line.startswith(f"#{place} · ")
        for list_name, label in (("fts", "keyword"), ("translated", "translated"), ("vector", "vector")):
            assert (f"{label} #{cited[list_name]}" if list_name in cited else f"{label} –") in line, line
    assert any("translated" in rows[p]["ranks"] for p, _ in panel["lists"]["fused"]["notes"])
    made = searches(requests_made(browser))
    assert len(made) == 1 and "mode=" not in made[0], made   # the fused search's own explain, no per-mode searches


def test_another_sites_page_cannot_write_the_query_log_and_this_page_still_follows(tmp_path, browser, ledger):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from vault_search import querylog
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    vault = copy_tree(SAMPLE_VAULT, tmp_path / "vault")
    (vault / ".vault-search.toml").write_text("log_queries = true\n", encoding="utf-8")
    service = SearchService(vault, tmp_path / "index", watch=False, warm=False, embedder=HashEmbedder(64))
    httpd = VaultHTTPServer(service, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{httpd.server_port}"
    # Another site's page (here: another port of this machine) that knows the port.
    elsewhere = (f'<!doctype html><title>elsewhere</title><img src="{base}/search?q=img+elsewhere">'
                 f'<script>fetch("{base}/search", {{method: "POST", mode: "no-cors", '
                 f'body: JSON.stringify({{query: "post elsewhere"}})}}).catch(() => 0)</script>').encode()

    class Elsewhere(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(elsewhere)))
            self.end_headers()
            self.wfile.write(elsewhere)

    other = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        network(browser)
        browser.get(f"http://127.0.0.1:{other.server_port}/")
        answered: dict[str, int] = {}
        attacks = (f"{base}/search?q=img+elsewhere", f"{base}/search")
        wait(browser, lambda d: answered.update(network(d)[1]) or all(u in answered for u in attacks))
        assert [answered[u] for u in attacks] == [403, 403], answered   # refused, both

        # A search a client logged (with the header), then this page's preview of its hit.
        req = urllib.request.Request(f"{base}/search?q=deep+work", headers={"X-Vault-Search-Client": "curl"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            top = json.loads(resp.read())["results"][0]["path"]
        browser.get(f"{base}/?q=deep%20work")
        wait(browser, lambda d: paths(d) and paths(d)[0] == top)
        browser.find_elements(By.CSS_SELECTOR, "#results .result")[0].click()
        wait(browser, lambda d: d.find_element(By.ID, "preview").get_attribute("data-path") == top)
        sent, _ = network(browser)
        api = [r for r in sent if r["url"].startswith(base + "/") and r["url"].split("?")[0].rsplit("/", 1)[1]
               in ("search", "get", "status", "tags")]
        assert {r["url"].split("?")[0].rsplit("/", 1)[1] for r in api} >= {"search", "get", "status"}
        assert all(r["headers"].get("X-Vault-Search-Client") == "page" for r in api), api
        entries = querylog.read(tmp_path / "index", True, 100).entries
        assert [e.query for e in entries] == ["deep work"] and entries[0].followed   # the page's own: log=0
    finally:
        other.shutdown()
        other.server_close()
        httpd.shutdown()
        httpd.server_close()
        service.close()
    ledger.record("security", "another site's page in a real browser: <img> GET and no-cors text/plain POST",
                  "both 403 (Sec-Fetch-Site, Origin of another port); the query log untouched; the page's own "
                  "requests carry X-Vault-Search-Client")


def test_no_page_of_this_module_asked_outside_127_0_0_1(browser):
    requests_made(browser)
    assert SEEN and all(u.startswith("http://127.0.0.1:") or u.startswith("data:") for u in SEEN), SEEN[:5]



def notice_text(driver):
    return driver.execute_script("const n = document.getElementById('notice'); return n.hidden ? '' : n.textContent")


def test_an_address_naming_no_served_vault_says_so_and_searches_all(two_vaults, site, browser):
    """Issue 37 (page): ?vault=X for a vault this server does not serve is
    named on the page, and every vault (or the only one) is searched."""
    base, _ = two_vaults
    kyoto = "Notes/Travel/Kyoto trip.md"
    browser.get(f"{base}/?q=tea%20ceremony&vault=nowhere")
    wait(browser, lambda d: {"kyoto.md", kyoto} <= set(paths(d)))
    assert notice_text(browser) == "No vault named “nowhere”; searching all vaults."
    assert url_vault(browser) == "" and chosen_vault(browser) == ""
    assert not browser.find_elements(By.CSS_SELECTOR, "#results .warning")   # no error answered instead
    Select(browser.find_element(By.ID, "vault")).select_by_visible_text("memory")
    wait(browser, lambda d: paths(d) == ["kyoto.md"])
    assert notice_text(browser) == ""   # a vault chosen: the notice has said its piece

    one, vault = site
    browser.get(f"{one}/?q=deep%20work&vault=nowhere")
    wait(browser, lambda d: paths(d) and paths(d)[0] == "Notes/Reading/Deep Work.md")
    assert notice_text(browser) == f"No vault named “nowhere”; searching {vault.name}."
    assert url_vault(browser) == ""


def test_a_failed_status_leaves_the_page_searching_and_says_so(site, browser):
    """Issue 37 (page): when /status cannot be read the page still searches
    (side by side too, which waits for the vaults) and says the status could
    not be read; an error names the vault, never its folder."""
    base, vault = site
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/status*"]})
    try:
        browser.get(f"{base}/?q=deep%20work&view=compare")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".compare [data-list=fused] li"))
        status = browser.find_element(By.ID, "status")
        wait(browser, lambda d: status.text.startswith("status could not be read ("))
        assert status.text.endswith("); searching still works")
        browser.find_element(By.ID, "compare").click()
        wait(browser, lambda d: paths(d) and paths(d)[0] == "Notes/Reading/Deep Work.md")

        # Without a status the page cannot tell a vault's name is wrong: the server's error says it, by name.
        browser.get(f"{base}/?q=deep%20work&vault=nowhere")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#results .warning"))
        shown = browser.find_element(By.ID, "results").text
        assert shown == f"no vault named 'nowhere' here; this server serves {vault.name}"
        assert str(vault) not in browser.find_element(By.TAG_NAME, "body").text
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})


def test_a_half_typed_or_mistyped_word_finds_its_note_and_says_so(site, browser):
    base, _ = site
    for typed, word in (("ceremny", "ceremony"), ("cerem", "ceremony")):
        browser.get(f"{base}/?q={typed}")
        wait(browser, lambda d: paths(d))
        assert paths(browser)[0] == "Notes/Travel/Kyoto trip.md"
        assert browser.find_element(By.CSS_SELECTOR, "#results .corrections").text == f"Searched {typed} as {word}"
