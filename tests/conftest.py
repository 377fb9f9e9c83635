import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlencode

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE_VAULT = REPO / "sample-vault"
EVAL_DIR = Path(os.environ.get("VAULT_SEARCH_EVAL_DIR", REPO.parent / "shared" / "eval"))
CLI = Path(sys.executable).parent / "vault-search"


def eval_path(*parts: str) -> Path:
    """A path under the shared evaluation data; without it, the test (or, called
    at import, the whole module) is skipped, never a collection error."""
    path = EVAL_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"evaluation data not found at {path} (set VAULT_SEARCH_EVAL_DIR)", allow_module_level=True)
    return path


def pytest_collection_modifyitems(config, items):
    """The quality modules (``pytest.mark.quality``) measure the shared labelled
    sets: without them they are skipped, with the reason, before any fixture runs."""
    if EVAL_DIR.is_dir():
        return
    skip = pytest.mark.skip(reason=f"evaluation data not found at {EVAL_DIR} (set VAULT_SEARCH_EVAL_DIR)")
    for item in items:
        if item.get_closest_marker("quality"):
            item.add_marker(skip)


def copy_tree(src: Path, dst: Path) -> Path:
    """Copy read-only shared data into a writable temp folder."""
    shutil.copytree(src, dst, symlinks=True)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)
    os.chmod(dst, 0o755)
    return dst


@pytest.fixture(autouse=True)
def own_embedding_cache(tmp_path_factory, monkeypatch) -> Path:
    """Each test its own embedding cache (indexer/embed_cache.py), so that one
    test's vectors never stand in for another's embedding."""
    path = tmp_path_factory.mktemp("embedding-cache")
    monkeypatch.setenv("VAULT_SEARCH_CACHE_DIR", str(path))
    return path


@pytest.fixture
def vault(tmp_path) -> Path:
    """A fresh copy of the bundled sample vault."""
    return copy_tree(SAMPLE_VAULT, tmp_path / "vault")


@pytest.fixture
def index_dir(tmp_path) -> Path:
    return tmp_path / "index"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_notes(folder: Path, notes: dict[str, str | bytes]) -> Path:
    """``notes`` (vault-relative path -> text) written under ``folder``: a vault."""
    for rel, text in notes.items():
        write(folder / rel, text)
    return folder


@pytest.fixture
def indexed(tmp_path):
    """``indexed(notes, embedder=None)``: ``notes`` (path -> text) written into a
    fresh temp vault and indexed through the real API, keyword only, or with
    vectors when an ``Embedder`` is given; the open ``Index`` (its folders are
    ``idx.config.vault`` and ``idx.config.index_dir``), closed after the test."""
    from vault_search import Index

    opened = []

    def index(notes: dict[str, str | bytes], embedder=None):
        root = tmp_path / f"indexed-{len(opened)}"
        idx = Index.open(write_notes(root / "vault", notes), root / "index", create=True, embedder=embedder)
        opened.append(idx)
        idx.sync(embed=embedder is not None)
        return idx

    yield index
    for idx in opened:
        idx.close()


# Query text that is FTS5 or SQL syntax, control characters, symbols only, or
# sheer length: the one list for every test of hostile queries, since a query
# is text, never syntax (DESIGN "Contracts"). A command line cannot carry NUL.
HOSTILE_QUERIES = [
    "C++", '"', '""', "AND", "OR", "NOT", "NEAR", "NEAR(", "NEAR(a b)", "*", "a*", "foo-bar", "x:y", "title:x",
    "title:secret", "\x00", "a\x00b", "数据库\x00索引", "", "   ", "(", ")", "^", "{a b}", "'; DROP TABLE notes; --",
    '数据库" OR "1', "-x", "+y", "\\", "%", "_", "a" * 10_240,
]


class CliResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self):
        return json.loads(self.out)

    def __repr__(self):
        return f"CliResult(code={self.code}, out={self.out[:500]!r}, err={self.err[:500]!r})"


@pytest.fixture
def cli(vault, index_dir):
    """Run the installed ``vault-search`` on the temp vault and index."""
    def run(*args, vault_dir=None, index=None, env=None, input=None) -> CliResult:
        cmd = [str(CLI), "--vault", str(vault_dir or vault), "--index-dir", str(index or index_dir), *args]
        full_env = {**os.environ, **(env or {})}
        return CliResult(subprocess.run(cmd, capture_output=True, text=True, env=full_env,
                                        input=input, timeout=300))
    return run


def run_cli(vault, index, *args, fault=None, timeout=300) -> subprocess.CompletedProcess:
    """The installed CLI on ``vault`` and ``index``, with VAULT_SEARCH_FAULT
    (indexer/faults.py) set to ``fault``, or unset."""
    env = {k: v for k, v in os.environ.items() if k != "VAULT_SEARCH_FAULT"}
    if fault:
        env["VAULT_SEARCH_FAULT"] = fault
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def garden_index(tmp_path_factory):
    """oldwinter-garden-zh (3,176 notes), copied and keyword-indexed once per
    session through the CLI: (vault, index folder, the `index --json` report).
    The tests that use it only read; one that writes makes its own copy."""
    src = eval_path("vaults", "oldwinter-garden-zh")
    root = tmp_path_factory.mktemp("garden")
    vault = copy_tree(src, root / "vault")
    index = root / "index"
    proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--no-embed",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return vault, index, json.loads(proc.stdout)


def terminal_output(cmd: list[str], env: dict | None = None) -> str:
    """What ``cmd`` writes to a terminal (a pseudo-terminal, so its colours
    are left to the terminal); skipped where there is no ``pty``."""
    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=follower, stderr=subprocess.DEVNULL, close_fds=True,
                            env={**os.environ, **(env or {})})
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:   # EIO: the child closed its side
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(leader)
    return out.decode("utf-8")


def mcp_answer(vault, index_dir, tool: str, arguments: dict) -> dict:
    """One call of an MCP tool on an in-process server over the indexed vault: its structured answer."""
    import asyncio

    from mcp import Client

    from vault_search.mcp_server import build_server
    from vault_search.service import SearchService

    async def call() -> dict:
        async with Client(build_server(lambda: SearchService(vault, index_dir, watch=False, warm=False))) as client:
            return (await client.call_tool(tool, arguments)).structured_content

    return asyncio.run(call())


def start_server(vault, index_dir, *args, env=None):
    """`vault-search serve` as a process: (process, its server.json) once it listens."""
    proc = subprocess.Popen([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "serve",
                             "--interval", "60", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    info = Path(index_dir) / "server.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if info.exists():
            data = json.loads(info.read_text() or "{}")
            if data.get("pid") == proc.pid:
                return proc, data
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("server did not start")


@pytest.fixture
def served(vault, index_dir):
    """The sample vault keyword-indexed and a `vault-search serve --no-watch`
    process on it: its server.json (``port``, ``pid``, ...); stopped after the test."""
    proc = run_cli(vault, index_dir, "index", "--no-embed")
    assert proc.returncode == 0, proc.stderr
    server, info = start_server(vault, index_dir, "--no-watch")
    try:
        yield info
    finally:
        server.terminate()
        server.communicate(timeout=30)


def http_search(port: int, query: str, **params) -> tuple[int, dict]:
    """A search through the running server on ``port``, as any HTTP client
    sends it (``GET /search``): (status, the JSON answer)."""
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/search?" + urlencode({"query": query, **params}), headers={"Host": f"127.0.0.1:{port}"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def served_paths(port: int, query: str, **params) -> list[str]:
    """The paths the running server on ``port`` finds for ``query``."""
    status, data = http_search(port, query, **params)
    assert status == 200, (status, data)
    return [r["path"] for r in data["results"]]


# -- the reliability ledger ----------------------------------------------------
# Tests that inject a fault or a hostile input record what they tried and what
# happened; `python tests/reliability/make_table.py` runs them and writes the
# table in docs/reliability.md from the ledger (never from hand-typed rows).

LEDGER_ENV = "VAULT_SEARCH_RELIABILITY_LEDGER"


class Ledger:
    def __init__(self):
        self.rows: dict[tuple[str, str], dict] = defaultdict(lambda: {"tries": 0, "outcomes": set()})

    def record(self, area: str, fault: str, outcome: str, tries: int = 1) -> None:
        row = self.rows[(area, fault)]
        row["tries"] += tries
        row["outcomes"].add(outcome)


_LEDGER = Ledger()


@pytest.fixture
def ledger() -> Ledger:
    return _LEDGER


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(LEDGER_ENV)
    if not path or not _LEDGER.rows:
        return
    rows = [{"area": a, "fault": f, "tries": r["tries"], "outcome": "; ".join(sorted(r["outcomes"]))}
            for (a, f), r in _LEDGER.rows.items()]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"exitstatus": int(exitstatus), "rows": rows}, fh, ensure_ascii=False, indent=2)
