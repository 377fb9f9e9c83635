"""The resident server: CLI latency through it, save-to-searchable time, memory.

    python -m benchmarks.server_speed [VAULT] [--work DIR] [--embed] [--qmd "CMD"]

Copies the vault (default: oldwinter-garden-zh) into ``--work`` (or a temp
folder), indexes it (keyword only unless ``--embed``; an index already in
``--work`` is reused), starts `vault-search serve`, then measures, as whole
new processes interleaved round by round (so load on the machine falls on
all alike): ``python -c pass`` with the same interpreter (the floor),
`vault-search search` answered by the server through the fast path (text and
``--json``), the same through the full CLI (``--format paths``, which the
fast path hands over), and, with ``--qmd``, QMD's keyword search
(``CMD search QUERY``, QMD's index built beforehand, see benchmarks/README.md);
then the same search without the server (cold, in-process), the first
query once the server says it is ready against the next ones, the time from
saving a new note to seeing it in keyword results, and the server's resident
memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlencode

from .metrics import percentile
from .speed import CLI, DEFAULT_VAULT, EN_QUERIES, ZH_QUERIES


def run_cli(base: list[str], query: str, *extra: str) -> float:
    return timed(base + ["search", query, "--json", *extra])


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def interleaved(commands: dict[str, list[str]], queries: list[str], rounds: int) -> dict[str, list[float]]:
    """Each command (``{query}`` in it replaced) once per query per round, in
    turn, so that whatever else the machine does falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for q in queries:
            for name, cmd in commands.items():
                times[name].append(timed([q if part == "{query}" else part for part in cmd]))
    return times


def rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def fts_paths(port: int, query: str) -> list[str]:
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/search?" + urlencode({"query": query, "mode": "fts"}), headers={"Host": f"127.0.0.1:{port}"})
    data = json.loads(conn.getresponse().read())
    conn.close()
    return [r["path"] for r in data["results"]]


def search_ms(port: int, query: str, mode: str | None = None) -> float:
    """One search over HTTP (the default mode unless ``mode``), as the
    client sees it (ms), the answer read to the end."""
    t0 = time.perf_counter()
    conn = HTTPConnection("127.0.0.1", port, timeout=60)
    params = {"query": query, **({"mode": mode} if mode else {})}
    conn.request("GET", "/search?" + urlencode(params), headers={"Host": f"127.0.0.1:{port}"})
    response = conn.getresponse()
    response.read()
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"search {query!r} ({mode or 'default'}) answered {response.status}")
    return (time.perf_counter() - t0) * 1000


def vault_arguments(ap: argparse.ArgumentParser) -> None:
    """The vault, its working copy and whether to embed it: the server benchmarks' first arguments."""
    ap.add_argument("vault", nargs="?", type=Path, default=DEFAULT_VAULT)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--embed", action="store_true", help="index with the default embedding model (slow once)")


def prepared(source: Path, work: Path, embed: bool) -> tuple[Path, Path, list[str]]:
    """A copy of ``source`` in ``work`` (kept when there is one), indexed
    (keyword only unless ``embed``): (vault, index folder, the CLI's command
    with both named)."""
    vault, index = work / "vault", work / "index"
    if not vault.exists():
        shutil.copytree(source, vault, symlinks=True)
        for root, dirs, files in os.walk(vault):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o755)
    base = [str(CLI), "--vault", str(vault), "--index-dir", str(index)]
    subprocess.run(base + ["index"] + ([] if embed else ["--no-embed"]), check=True, capture_output=True)
    return vault, index, base


def ready(proc: subprocess.Popen, index: Path, timeout: float = 120) -> dict:
    """The server.json of ``proc`` (a `serve`) once it names it: the moment
    an agent may call the server."""
    info = index / "server.json"
    deadline = time.monotonic() + timeout
    while True:
        try:
            record = json.loads(info.read_text())
            if record.get("pid") == proc.pid:
                return record
        except (OSError, ValueError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("`serve` did not come up")
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.server_speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    vault_arguments(ap)
    ap.add_argument("--repeat", type=int, default=3, help="CLI calls per query")
    ap.add_argument("--qmd", metavar="CMD", help='QMD\'s command line, e.g. "bun .../qmd.js" (its keyword index '
                                                 "of the same vault built beforehand)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="vs-server-")
    work = args.work or Path(tmp)
    vault, index, base = prepared(args.vault, work, args.embed)

    cold = {"zh": [], "en": []}
    for lang, queries in (("zh", ZH_QUERIES[:5]), ("en", EN_QUERIES[:5])):
        for q in queries:
            cold[lang].append(run_cli(base, q, "--no-server"))

    proc = subprocess.Popen(base + ["serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = ready(proc, index)["port"]
        # The first query once the server says it is ready (server.json
        # written), in the default mode, against the next ones.
        first_ms = search_ms(port, ZH_QUERIES[0])
        next_ms = [search_ms(port, q) for q in ZH_QUERIES[1:] + EN_QUERIES]
        fts_paths(port, "预热")
        run_cli(base, "warm-up 预热")
        commands = {"python -c pass": [sys.executable, "-c", "pass"],
                    "search (fast path)": base + ["search", "{query}"],
                    "search --json (fast path)": base + ["search", "{query}", "--json"],
                    "search --format paths (full CLI)": base + ["search", "{query}", "--format", "paths"]}
        if args.qmd:
            commands["qmd search"] = shlex.split(args.qmd) + ["search", "{query}"]
        side = interleaved(commands, ZH_QUERIES + EN_QUERIES, args.repeat)
        warm = {"zh": [], "en": []}
        for lang, queries in (("zh", ZH_QUERIES), ("en", EN_QUERIES)):
            for _ in range(args.repeat):
                for q in queries:
                    warm[lang].append(run_cli(base, q))
        visible = []
        for i in range(5):
            word = f"benchmarkword{i}x{int(time.time())}"
            t0 = time.perf_counter()
            (vault / f"Inbox-bench-{i}.md").write_text(f"# Bench {i}\n{word}\n", encoding="utf-8")
            while fts_paths(port, word) != [f"Inbox-bench-{i}.md"]:
                time.sleep(0.02)
            visible.append(time.perf_counter() - t0)
        rss, peak = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for i in range(5):
            (vault / f"Inbox-bench-{i}.md").unlink(missing_ok=True)
        if not args.work:
            shutil.rmtree(tmp, ignore_errors=True)

    result = {
        "vault": str(args.vault), "embeddings": args.embed,
        "cli_via_server_s": {lang: {"p50": round(percentile(v, 50), 3), "p95": round(percentile(v, 95), 3)}
                             for lang, v in warm.items()},
        "cli_cold_s": {lang: {"p50": round(percentile(v, 50), 3)} for lang, v in cold.items()},
        "save_to_searchable_s": {"p50": round(percentile(visible, 50), 2), "max": round(max(visible), 2)},
        "server_rss_mb": round(rss, 1), "server_peak_rss_mb": round(peak, 1),
        "first_query_ms": round(first_ms, 1), "next_queries_ms_p50": round(percentile(next_ms, 50), 1),
        "side_by_side_s": {name: {"p50": round(percentile(v, 50), 4), "p95": round(percentile(v, 95), 4)}
                           for name, v in side.items()},
    }
    floor = result["side_by_side_s"]["python -c pass"]["p50"]
    result["ratio_to_python"] = {name: round(v["p50"] / floor, 2) for name, v in result["side_by_side_s"].items()}
    if args.qmd:
        qmd = result["side_by_side_s"]["qmd search"]["p50"]
        result["ratio_to_qmd"] = {name: round(v["p50"] / qmd, 2) for name, v in result["side_by_side_s"].items()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    s = result
    print("interleaved, whole processes, p50 / p95 (x python -c pass" + (", x qmd search" if args.qmd else "") + "):")
    for name, v in s["side_by_side_s"].items():
        print(f"  {name:34s} {v['p50'] * 1000:7.1f} / {v['p95'] * 1000:7.1f} ms  x{s['ratio_to_python'][name]}"
              + (f"  x{s['ratio_to_qmd'][name]}" if args.qmd else ""))
    print(f"`vault-search search` via the server, zh p50/p95: {s['cli_via_server_s']['zh']['p50']} / "
          f"{s['cli_via_server_s']['zh']['p95']} s; en: {s['cli_via_server_s']['en']['p50']} / "
          f"{s['cli_via_server_s']['en']['p95']} s")
    print(f"`vault-search search` without a server (cold), zh p50: {s['cli_cold_s']['zh']['p50']} s; "
          f"en: {s['cli_cold_s']['en']['p50']} s")
    print(f"save a note -> in keyword results: p50 {s['save_to_searchable_s']['p50']} s, "
          f"max {s['save_to_searchable_s']['max']} s")
    print(f"server memory: {s['server_rss_mb']} MB resident, {s['server_peak_rss_mb']} MB peak")
    print(f"first query after ready: {s['first_query_ms']} ms; the next ones p50 {s['next_queries_ms_p50']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
