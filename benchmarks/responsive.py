"""Does `serve` keep answering while its writer indexes a hostile note?

    python -m benchmarks.responsive [VAULT] [--mb 9.5] [--json]

Copies the vault (default: the bundled sample vault) into a temp folder,
indexes it keyword-only, starts `vault-search serve`, then times `/health`
and a keyword search over HTTP, back to back from one client thread: first
with the server idle (the baseline of this run), then while a note of about
``--mb`` MB of pathological Markdown (``[x](`` and ``![](`` before long runs of
spaces, runs of ``[``, ``(``, ``*``, ``_``, backticks and ``<``, a pasted
``data:`` URI) is saved into the vault and indexed by the server's watcher,
until that note is searchable. Prints p50 / p99 / max of each, and how long
the note took to become searchable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlencode

from .metrics import percentile
from .speed import CLI

SAMPLE_VAULT = Path(__file__).resolve().parent.parent / "sample-vault"
MARKER = "responsivenessmarker"


def hostile_note(megabytes: float) -> str:
    """About ``megabytes`` MB of Markdown built to make regexes backtrack."""
    lines = [f"# Hostile\n\n{MARKER} opens the note.\n"]
    size = 0
    target = int(megabytes * 1_000_000)
    shapes = ["[x](" + " " * 16_000, "![](" + " " * 16_000, "[" * 15_000, "(" * 15_000, "*_" * 7_000,
              "`" * 15_000, "<" * 15_000, "[[" * 7_000, "[a](b " * 2_500, "中文 text " * 1_500]
    k = 0
    while size < target - 3_000_000:
        line = shapes[k % len(shapes)]
        lines.append(line)
        size += len(line.encode()) + 1
        k += 1
    lines.append("![](data:image/png;base64," + "QUJD" * 700_000 + ")")
    return "\n".join(lines) + "\n"


def get_ms(port: int, path: str) -> float:
    t0 = time.perf_counter()
    conn = HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {body[:200]!r}")
    return (time.perf_counter() - t0) * 1000


def found(port: int, word: str) -> bool:
    conn = HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("GET", "/search?" + urlencode({"query": word, "mode": "fts"}), headers={"Host": f"127.0.0.1:{port}"})
    data = json.loads(conn.getresponse().read())
    conn.close()
    return any(r["path"] == "hostile.md" for r in data["results"])


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": round(percentile(values, 50), 1), "p99": round(percentile(values, 99), 1),
            "max": round(max(values), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.responsive", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", nargs="?", type=Path, default=SAMPLE_VAULT)
    ap.add_argument("--mb", type=float, default=9.5, help="size of the hostile note (default 9.5; the default "
                                                          "max_file_mb is 10)")
    ap.add_argument("--idle-s", type=float, default=5.0, help="seconds of baseline before the note is saved")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="vs-responsive-"))
    vault, index = tmp / "vault", tmp / "index"
    shutil.copytree(args.vault, vault, symlinks=True)
    for root, dirs, files in os.walk(vault):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755)
    base = [str(CLI), "--vault", str(vault), "--index-dir", str(index)]
    subprocess.run(base + ["index", "--no-embed"], check=True, capture_output=True)
    note = hostile_note(args.mb)
    proc = subprocess.Popen(base + ["serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    query = "/search?" + urlencode({"query": "tea ceremony", "mode": "fts"})
    try:
        info_file = index / "server.json"
        while not (info_file.exists() and json.loads(info_file.read_text())["pid"] == proc.pid):
            time.sleep(0.05)
        port = json.loads(info_file.read_text())["port"]
        for _ in range(20):
            get_ms(port, "/health"), get_ms(port, query)
        idle: dict[str, list[float]] = {"health": [], "search": []}
        end = time.perf_counter() + args.idle_s
        while time.perf_counter() < end:
            idle["health"].append(get_ms(port, "/health"))
            idle["search"].append(get_ms(port, query))
        busy: dict[str, list[float]] = {"health": [], "search": []}
        t0 = time.perf_counter()
        (vault / "hostile.md").write_text(note, encoding="utf-8")
        checks = 0
        while True:
            busy["health"].append(get_ms(port, "/health"))
            busy["search"].append(get_ms(port, query))
            checks += 1
            if checks % 10 == 0 and found(port, MARKER):
                break
            if time.perf_counter() - t0 > 600:
                raise RuntimeError("the hostile note was not searchable within 600 s")
        searchable_s = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)

    result = {"note_mb": round(len(note.encode()) / 1e6, 2), "searchable_after_s": round(searchable_s, 2),
              "idle_ms": {k: summary(v) for k, v in idle.items()},
              "while_indexing_ms": {k: summary(v) for k, v in busy.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"hostile note of {result['note_mb']} MB searchable after {result['searchable_after_s']} s")
    for phase in ("idle_ms", "while_indexing_ms"):
        for name, s in result[phase].items():
            print(f"  {phase[:-3]:18s} {name:7s} p50 {s['p50']:7.1f}  p99 {s['p99']:7.1f}  max {s['max']:7.1f} ms "
                  f"({s['n']} requests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
