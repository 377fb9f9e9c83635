"""Index and query speed on a real vault, through the public API and the CLI.

    python -m benchmarks.speed [VAULT]          keyword index (default vault: oldwinter-garden-zh)
    python -m benchmarks.speed --embed          ... plus embeddings (default model) and hybrid queries
    python -m benchmarks.speed --vector-rows 10000,100000,1000000
                                                only: exact vector search time by matrix size

Copies the vault to a temp folder and measures: a full keyword index (whole
`vault-search index` process), a second `index` with nothing changed, a
re-index after one note changed, warm in-process query latency (p50/p95
over Chinese and English queries), and `vault-search search` as a whole new
process for an English and a Chinese query. With ``--embed``: the embedding
pass (chunks/s), and warm hybrid and vector query latency with the query
embedding included.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vault_search import Index

from .metrics import percentile

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VAULT = REPO.parent / "shared" / "eval" / "vaults" / "oldwinter-garden-zh"
CLI = Path(sys.executable).parent / "vault-search"
ZH_QUERIES = ["飞轮效应", "卡片笔记", "数据库 索引", "如何养成习惯", "读书笔记 方法", "收藏者谬误",
              "时间管理", "云原生 容器", "心理学效应", "第二大脑"]
EN_QUERIES = ["docker compose", "Kubernetes", "Elasticsearch", "obsidian plugin", "MySQL index",
              "dataview query", "git commit", "python", "Map Of Content", "nginx"]


def timed(cmd: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def best_of(n: int, cmd: list[str]) -> tuple[float, float]:
    runs = sorted(timed(cmd) for _ in range(n))
    return runs[0], statistics.median(runs)


def vector_scaling(sizes: list[int], dim: int = 384, queries: int = 20) -> list[dict]:
    """Exact top-k (dot product + argpartition) over synthetic unit vectors."""
    import numpy as np

    from vault_search.vector import VectorIndex

    rng = np.random.default_rng(0)
    out = []
    for n in sizes:
        matrix = rng.standard_normal((n, dim), dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        with tempfile.TemporaryDirectory(prefix="vs-vec-") as tmp:
            np.save(Path(tmp) / "m.npy", matrix)
            t0 = time.perf_counter()
            loaded = np.load(Path(tmp) / "m.npy")
            load_s = time.perf_counter() - t0
        vi = VectorIndex(np.arange(n, dtype=np.int64), loaded, "synthetic")
        times = []
        for _ in range(queries):
            q = rng.standard_normal(dim).astype(np.float32)
            q /= np.linalg.norm(q)
            t0 = time.perf_counter()
            vi.top_chunks(q, 200)
            times.append((time.perf_counter() - t0) * 1000)
        out.append({"rows": n, "matrix_mb": round(matrix.nbytes / 1048576, 1), "load_s": round(load_s, 3),
                    "top200_ms_p50": round(percentile(times, 50), 2), "top200_ms_p95": round(percentile(times, 95), 2)})
        del matrix, loaded, vi
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", nargs="?", type=Path, default=DEFAULT_VAULT)
    ap.add_argument("--repeat", type=int, default=5, help="runs per CLI measurement")
    ap.add_argument("--embed", action="store_true", help="also embed (default model) and time hybrid queries")
    ap.add_argument("--vector-rows", help="only time vector search over synthetic matrices of these sizes")
    ap.add_argument("--work", type=Path, help="keep the copied vault and its index here (must not exist yet)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    if args.vector_rows:
        rows = vector_scaling([int(x) for x in args.vector_rows.split(",")])
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            print("| rows | matrix MB | load s | top-200 p50 ms | p95 ms |\n|---|---|---|---|---|")
            for r in rows:
                print(f"| {r['rows']:,} | {r['matrix_mb']} | {r['load_s']} | {r['top200_ms_p50']} | {r['top200_ms_p95']} |")
        return 0

    with tempfile.TemporaryDirectory(prefix="vs-speed-") as tmp:
        if args.work:
            args.work.mkdir(parents=True)
            tmp = str(args.work)
        vault = Path(tmp) / "vault"
        shutil.copytree(args.vault, vault, symlinks=True)
        for root, dirs, files in os.walk(vault):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o755)
        index = Path(tmp) / "index"
        base = [str(CLI), "--vault", str(vault), "--index-dir", str(index)]
        notes = sum(1 for _ in vault.rglob("*.md"))

        full_index = timed(base + ["index", "--no-embed"])
        noop_best, noop_median = best_of(args.repeat, base + ["index", "--no-embed"])
        changed = next(vault.rglob("飞轮效应.md"))
        single = []
        for i in range(args.repeat):
            changed.write_text(changed.read_text(encoding="utf-8") + f"\n追加一行 {i}\n", encoding="utf-8")
            single.append(timed(base + ["index", "--no-embed"]))

        with Index.open(vault, index) as idx:
            idx.search("预热 warm-up")  # load jieba and the vault's dictionary once
            warm = {"zh": [], "en": []}
            for _ in range(5):
                for lang, queries in (("zh", ZH_QUERIES), ("en", EN_QUERIES)):
                    for q in queries:
                        t0 = time.perf_counter()
                        idx.search(q, limit=10)
                        warm[lang].append((time.perf_counter() - t0) * 1000)
            chunks = idx.status().chunks
        cli_en = best_of(args.repeat, base + ["search", "docker compose", "--json"])
        cli_zh = best_of(args.repeat, base + ["search", "飞轮效应", "--json"])
        embedding = None
        if args.embed:
            t0 = time.perf_counter()
            out = subprocess.run(base + ["index", "--json"], check=True, capture_output=True, text=True).stdout
            embed_total = time.perf_counter() - t0
            report = json.loads(out)["embedding"]
            with Index.open(vault, index) as idx:
                idx.search("预热 warm-up", mode="hybrid")
                lat = {"hybrid": [], "vector": []}
                for _ in range(3):
                    for mode in lat:
                        for q in ZH_QUERIES + EN_QUERIES:
                            t0 = time.perf_counter()
                            idx.search(q, mode=mode, limit=10)
                            lat[mode].append((time.perf_counter() - t0) * 1000)
            cli_hybrid = best_of(args.repeat, base + ["search", "飞轮效应", "--json"])
            embedding = {
                "model": report["model"], "chunks_embedded": report["embedded"],
                "embed_seconds": round(report["seconds"], 1),
                "chunks_per_s": round(report["embedded"] / report["seconds"], 2) if report["seconds"] else None,
                "index_with_vectors_s": round(full_index + embed_total, 1),
                "warm_hybrid_ms": {"p50": round(percentile(lat["hybrid"], 50), 2),
                                   "p95": round(percentile(lat["hybrid"], 95), 2)},
                "warm_vector_ms": {"p50": round(percentile(lat["vector"], 50), 2),
                                   "p95": round(percentile(lat["vector"], 95), 2)},
                "cli_hybrid_zh_s": round(cli_hybrid[1], 3),
            }

    all_warm = warm["zh"] + warm["en"]
    result = {
        "vault": str(args.vault), "notes": notes, "chunks": chunks,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "full_index_s": round(full_index, 2),
        "noop_index_s": {"best": round(noop_best, 3), "median": round(noop_median, 3)},
        "one_note_changed_index_s": round(statistics.median(single), 3),
        "warm_query_ms": {"p50": round(percentile(all_warm, 50), 2), "p95": round(percentile(all_warm, 95), 2),
                          "zh_p50": round(percentile(warm["zh"], 50), 2),
                          "en_p50": round(percentile(warm["en"], 50), 2)},
        "cli_search_s": {"en_best": round(cli_en[0], 3), "en_median": round(cli_en[1], 3),
                         "zh_best": round(cli_zh[0], 3), "zh_median": round(cli_zh[1], 3)},
        "embedding": embedding,
    }
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(f"{notes} notes, {chunks} chunks ({result['machine']['cpus']} CPUs, Python {result['machine']['python']})")
    print(f"full keyword index (whole CLI process):   {result['full_index_s']:.2f} s")
    print(f"index again, nothing changed:              {noop_median:.3f} s (best {noop_best:.3f})")
    print(f"index again, one note changed:             {result['one_note_changed_index_s']:.3f} s")
    print(f"warm in-process query p50 / p95:           {result['warm_query_ms']['p50']:.2f} / "
          f"{result['warm_query_ms']['p95']:.2f} ms (zh p50 {result['warm_query_ms']['zh_p50']:.2f}, "
          f"en p50 {result['warm_query_ms']['en_p50']:.2f})")
    print(f"`vault-search search` new process, en:     {cli_en[1]:.3f} s (best {cli_en[0]:.3f})")
    print(f"`vault-search search` new process, zh:     {cli_zh[1]:.3f} s (best {cli_zh[0]:.3f})")
    if embedding:
        e = embedding
        print(f"embedding pass ({e['model']}):               {e['chunks_embedded']} chunks in {e['embed_seconds']} s "
              f"= {e['chunks_per_s']} chunks/s")
        print(f"full index with vectors:                   {e['index_with_vectors_s']} s")
        print(f"warm hybrid query p50 / p95:               {e['warm_hybrid_ms']['p50']} / {e['warm_hybrid_ms']['p95']} ms")
        print(f"warm vector query p50 / p95:               {e['warm_vector_ms']['p50']} / {e['warm_vector_ms']['p95']} ms")
        print(f"`vault-search search` new process, hybrid: {e['cli_hybrid_zh_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
