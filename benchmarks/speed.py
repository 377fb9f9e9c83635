"""Index and query speed, and how they grow with the vault.

    python -m benchmarks.speed [--report DIR]   growth study (default sizes 1k, 10k, 100k notes)
    python -m benchmarks.speed --sizes 1000,10000 --vector-rows 10000,100000
    python -m benchmarks.speed --vault PATH [--embed]
                                                one real vault (e.g. oldwinter-garden-zh), optionally
                                                with embeddings from the default model
    python -m benchmarks.speed --vector-rows 10000,100000,1000000 --sizes ""
                                                only vector search time by matrix size

Growth study: for each size a vault of real text is sampled from the shared
vaults and sets (benchmarks/synth.py), then measured: a full keyword index
(a whole `vault-search index --no-embed` process: seconds, notes/s,
chunks/s, peak RSS), `index` again with nothing changed, `index` after one
note changed, query latency warm in-process (keyword, vector, hybrid),
`vault-search search` as a new process (cold) and through a running
`vault-search serve`, and the index size on disk. Vector and hybrid timings
at these sizes use the hash test embedder (dimension 384, as the default
model's), because embedding 100k notes with the real model takes hours on
2 cores; the real model's own costs are measured apart: its passage
throughput (chunks/s) on a sample, and its query embedding time, which a
real hybrid query adds. Exact vector search time is also measured on
synthetic matrices up to 1M rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from indexer.embed import HashEmbedder
from vault_search import Index

from .metrics import percentile
from .report import md_table, write_report

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VAULT = REPO.parent / "shared" / "eval" / "vaults" / "oldwinter-garden-zh"
CLI = Path(sys.executable).parent / "vault-search"
ZH_QUERIES = ["飞轮效应", "卡片笔记", "数据库 索引", "如何养成习惯", "读书笔记 方法", "收藏者谬误",
              "时间管理", "云原生 容器", "心理学效应", "第二大脑"]
EN_QUERIES = ["docker compose", "Kubernetes", "Elasticsearch", "obsidian plugin", "MySQL index",
              "dataview query", "git commit", "python", "Map Of Content", "nginx"]
DEFAULT_SIZES = "1000,10000,100000"
DEFAULT_VECTOR_ROWS = "10000,100000,1000000"
SCALE_DIM = 384


def run_measured(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """Run a process to completion: (seconds, its peak RSS in MB)."""
    elapsed, rss, _ = run_measured_tree(cmd, env)
    return elapsed, rss


def run_measured_tree(cmd: list[str], env: dict | None = None) -> tuple[float, float, dict]:
    """Run a process to completion: (seconds, the peak RSS of its largest
    process in MB, and the peaks of the whole process tree summed, sampled
    every 0.1 s: ``rss_mb`` and ``pss_mb``, which splits pages the workers
    of a sync share with their parent (they are forks) instead of counting
    them once per process)."""
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peaks = {"rss_mb": 0.0, "pss_mb": 0.0, "processes": 1}
    done = threading.Event()

    def sample():
        while not done.wait(0.1):
            tree = _process_tree(proc.pid)
            peaks["processes"] = max(peaks["processes"], len(tree))
            peaks["rss_mb"] = max(peaks["rss_mb"], sum(_memory_kb(pid, "status", "VmRSS:") for pid in tree) / 1024)
            peaks["pss_mb"] = max(peaks["pss_mb"], sum(_memory_kb(pid, "smaps_rollup", "Pss:") for pid in tree) / 1024)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err = proc.stderr.read().decode("utf-8", "replace")   # drains it while the process runs
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    done.set()
    sampler.join()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return elapsed, usage.ru_maxrss / 1024, {k: round(v, 1) for k, v in peaks.items()}


def _process_tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc (empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _memory_kb(pid: int, file: str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/{file}") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def timed(cmd: list[str], env: dict | None = None) -> float:
    return run_measured(cmd, env)[0]


def best_of(n: int, cmd: list[str]) -> tuple[float, float]:
    runs = sorted(timed(cmd) for _ in range(n))
    return runs[0], statistics.median(runs)


def dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _ms(values: list[float]) -> dict:
    return {"p50": round(percentile(values, 50), 2), "p95": round(percentile(values, 95), 2)}


def warm_latency(idx: Index, modes: list[str], rounds: int = 3) -> dict:
    """Per mode, p50/p95 over ``rounds`` rounds of the 20 queries, and the
    p50 of the first round apart (``first_p50``: queries this process has not
    seen) from the later ones (``repeat_p50``: what the reader's caches of
    query embeddings and name n-grams save an agent that asks again)."""
    idx.search("预热 warm-up", mode=modes[0])
    out = {}
    for mode in modes:
        # New to the reader in the first round: no query vector or name n-grams remembered.
        idx.forget_queries()
        times = []
        for _ in range(rounds):
            for q in ZH_QUERIES + EN_QUERIES:
                t0 = time.perf_counter()
                idx.search(q, mode=mode, limit=10)
                times.append((time.perf_counter() - t0) * 1000)
        first = len(ZH_QUERIES + EN_QUERIES)
        out[mode] = {**_ms(times), "first_p50": round(percentile(times[:first], 50), 2),
                     "repeat_p50": round(percentile(times[first:], 50), 2) if rounds > 1 else None}
    return out


def vector_scaling(sizes: list[int], dim: int = SCALE_DIM, queries: int = 20) -> list[dict]:
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
            vi.nearest_rows(q, 200)
            times.append((time.perf_counter() - t0) * 1000)
        out.append({"rows": n, "matrix_mb": round(matrix.nbytes / 1048576, 1), "load_s": round(load_s, 3),
                    "top200_ms_p50": round(percentile(times, 50), 2), "top200_ms_p95": round(percentile(times, 95), 2)})
        del matrix, loaded, vi
    return out


def model_costs(vault: Path, sample: int = 64) -> dict:
    """The default model's passage throughput on ``sample`` real chunks of
    ``vault`` (already indexed), and its query embedding time."""
    from indexer.chunk import passage_text
    from indexer.embed import get_embedder

    embedder = get_embedder(None)
    with Index.open(vault, vault.parent / "index") as idx:
        rows = idx.conn.execute("SELECT n.title, c.heading, c.text FROM chunks c JOIN notes n ON n.id = c.note_id "
                                "ORDER BY c.id").fetchall()
    texts = [passage_text(*r) for r in random.Random(3).sample(rows, min(sample, len(rows)))]
    embedder.embed_query("warm-up")
    t0 = time.perf_counter()
    for start in range(0, len(texts), embedder.batch_size):
        embedder.embed_passages(texts[start:start + embedder.batch_size])
    seconds = time.perf_counter() - t0
    times = []
    for q in ZH_QUERIES + EN_QUERIES:
        t0 = time.perf_counter()
        embedder.embed_query(q)
        times.append((time.perf_counter() - t0) * 1000)
    return {"model": embedder.spec, "sample_chunks": len(texts), "chunks_per_s": round(len(texts) / seconds, 2),
            "query_embedding_ms": _ms(times)}


class ModelCostEmbedder(HashEmbedder):
    """The hash embedder's vectors (those the growth study's matrix holds) at
    the default model's cost: each query is embedded by the model too, so a
    warm hybrid timing includes a real query embedding, and the reader's
    cache of query vectors saves it on a repeat, as it does in use."""

    def __init__(self, dim: int):
        from indexer.embed import get_embedder

        super().__init__(dim)
        self.model = get_embedder(None)
        self.model.embed_query("warm-up")

    def embed_query(self, text: str):
        self.model.embed_query(text)
        return super().embed_query(text)


class Server:
    """`vault-search serve --no-watch` for the duration of a block."""

    def __init__(self, base: list[str], index: Path):
        self.base, self.index = base, index

    def __enter__(self):
        self.proc = subprocess.Popen(self.base + ["serve", "--no-watch"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        info = self.index / "server.json"
        deadline = time.monotonic() + 600
        while not (info.exists() and json.loads(info.read_text() or "{}").get("pid") == self.proc.pid):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("vault-search serve did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def measure_vault(vault: Path, index: Path, repeat: int, model: str | None, server: bool = True,
                  change: Path | None = None) -> dict:
    """Keyword index timings and query latency for one vault."""
    base = [str(CLI), "--vault", str(vault), "--index-dir", str(index)]
    notes = sum(1 for _ in vault.rglob("*.md"))
    full_s, full_rss, tree = run_measured_tree(base + ["index", "--no-embed"] + (["--model", model] if model else []))
    noop_best, noop_median = best_of(repeat, base + ["index", "--no-embed"])
    change = change or min(vault.rglob("*.md"))
    original = change.read_text(encoding="utf-8")
    single = []
    for i in range(repeat):
        change.write_text(original + f"\n追加一行 appended line {i}\n", encoding="utf-8")
        single.append(timed(base + ["index", "--no-embed"]))
    with Index.open(vault, index) as idx:
        chunks = idx.status().chunks
        warm = warm_latency(idx, ["fts"])
    cold_en = best_of(repeat, base + ["search", "docker compose", "--json", "--no-server"])
    cold_zh = best_of(repeat, base + ["search", "飞轮效应", "--json", "--no-server"])
    result = {
        "notes": notes, "chunks": chunks, "vault_mb": round(dir_bytes(vault) / 1048576, 1),
        "full_index_s": round(full_s, 2), "notes_per_s": round(notes / full_s, 1),
        "chunks_per_s": round(chunks / full_s, 1), "index_peak_rss_mb": round(full_rss, 1),
        "index_tree_peak": tree,
        "noop_index_s": {"best": round(noop_best, 3), "median": round(noop_median, 3)},
        "one_note_changed_index_s": round(statistics.median(single), 3),
        "index_mb": round(dir_bytes(index) / 1048576, 1),
        "warm_ms": warm,
        "cli_cold_s": {"en": round(cold_en[1], 3), "zh": round(cold_zh[1], 3)},
    }
    if server:
        with Server(base, index):
            subprocess.run(base + ["search", "warm-up 预热", "--json"], check=True, capture_output=True)
            via = {"en": [], "zh": []}
            for _ in range(repeat):
                via["en"].append(timed(base + ["search", "docker compose", "--json"]))
                via["zh"].append(timed(base + ["search", "飞轮效应", "--json"]))
        result["cli_via_server_s"] = {lang: round(statistics.median(v), 3) for lang, v in via.items()}
    return result


def growth(sizes: list[int], work: Path, repeat: int) -> list[dict]:
    from .report import progress
    from .synth import load_pool, write_synthetic_vault

    pool = load_pool()
    points = []
    with progress("vault sizes", len(sizes)) as tick:
        for n in sizes:
            folder = work / f"vault-{n}"
            vault, index = folder / "vault", folder / "index"
            if index.exists():
                shutil.rmtree(index)
            if not vault.exists():
                write_synthetic_vault(vault, n, pool=pool)
            point = measure_vault(vault, index, repeat, f"hash:{SCALE_DIM}")
            embed_s, embed_rss = run_measured([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index",
                                               "--model", f"hash:{SCALE_DIM}"])
            with Index.open(vault, index) as idx:
                point["warm_ms"].update(warm_latency(idx, ["vector", "hybrid"]))
            # The same hybrid queries paying the default model's query embedding.
            with Index.open(vault, index, embedder=ModelCostEmbedder(SCALE_DIM)) as idx:
                point["warm_ms"]["hybrid_model"] = warm_latency(idx, ["hybrid"])["hybrid"]
            point["hash_embedding_pass_s"] = round(embed_s, 2)
            point["embedding_pass_peak_rss_mb"] = round(embed_rss, 1)
            point["index_with_vectors_mb"] = round(dir_bytes(index) / 1048576, 1)
            points.append(point)
            tick()
    return points


def growth_markdown(data: dict) -> list[str]:
    sections = []
    if data.get("growth"):
        header = ["notes", "chunks", "vault MB", "full index s", "notes/s", "peak RSS MB (largest process)",
                  "peak RSS / PSS MB (all processes)", "no-change s", "one change s", "index MB (+vectors)",
                  "fts warm p50/p95 ms", "vector p50 ms", "hybrid p50 ms (first / repeated)",
                  "hybrid + model query embedding p50 ms (first / repeated)",
                  "CLI cold en/zh s", "CLI via server en/zh s"]
        rows = []
        for p in data["growth"]:
            w = p["warm_ms"]
            tree = p.get("index_tree_peak", {})
            rows.append([f"{p['notes']:,}", f"{p['chunks']:,}", p["vault_mb"], p["full_index_s"], p["notes_per_s"],
                         p["index_peak_rss_mb"], f"{tree.get('rss_mb', '-')} / {tree.get('pss_mb', '-')}",
                         p["noop_index_s"]["median"], p["one_note_changed_index_s"],
                         f"{p['index_mb']} ({p['index_with_vectors_mb']})",
                         f"{w['fts']['p50']} / {w['fts']['p95']}", w["vector"]["p50"],
                         _first_repeat(w["hybrid"]),
                         _first_repeat(w.get("hybrid_model")),
                         f"{p['cli_cold_s']['en']} / {p['cli_cold_s']['zh']}",
                         f"{p['cli_via_server_s']['en']} / {p['cli_via_server_s']['zh']}"])
        sections.append("Vaults of real text sampled from ../shared/eval (benchmarks/synth.py). Vector and hybrid "
                        f"latency here use the hash test embedder (dim {SCALE_DIM}); add the real model's query "
                        "embedding time below for a real hybrid query.\n\n" + md_table(header, rows))
    if data.get("model"):
        m = data["model"]
        sections.append(f"Default model ({m['model']}): {m['chunks_per_s']} chunks/s embedding real chunks "
                        f"({m['sample_chunks']} sampled); query embedding p50 {m['query_embedding_ms']['p50']} ms, "
                        f"p95 {m['query_embedding_ms']['p95']} ms.")
    if data.get("vector_rows"):
        rows = [[f"{r['rows']:,}", r["matrix_mb"], r["load_s"], r["top200_ms_p50"], r["top200_ms_p95"]]
                for r in data["vector_rows"]]
        sections.append(f"Exact vector search over synthetic unit vectors (dim {SCALE_DIM}):\n\n"
                        + md_table(["rows", "matrix MB", "load s", "top-200 p50 ms", "p95 ms"], rows))
    return sections


def _first_repeat(w: dict | None) -> str:
    """p50 (first-seen / repeated), as warm_latency reports them ("-": not measured)."""
    return f"{w['p50']} ({w.get('first_p50')} / {w.get('repeat_p50')})" if w else "-"


def growth_charts(data: dict) -> list:
    charts = []
    if data.get("growth"):
        pts = data["growth"]
        xs = [p["notes"] for p in pts]

        def latency(plt):
            fig, ax = plt.subplots(figsize=(6, 3.6))
            for mode in ("fts", "vector", "hybrid"):
                ax.plot(xs, [p["warm_ms"][mode]["p50"] for p in pts], marker="o", label=f"{mode} warm p50")
            ax.plot(xs, [p["cli_via_server_s"]["zh"] * 1000 for p in pts], marker="s", label="CLI via server (zh)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("notes")
            ax.set_ylabel("ms")
            ax.set_title("Query latency against vault size")
            ax.legend()
            return fig

        def index_time(plt):
            fig, ax = plt.subplots(figsize=(6, 3.6))
            ax.plot(xs, [p["full_index_s"] for p in pts], marker="o", label="full keyword index")
            ax.plot(xs, [p["noop_index_s"]["median"] for p in pts], marker="o", label="index, nothing changed")
            ax.plot(xs, [p["one_note_changed_index_s"] for p in pts], marker="o", label="index, one note changed")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("notes")
            ax.set_ylabel("seconds")
            ax.set_title("Index time against vault size")
            ax.legend()
            return fig

        charts += [("latency", latency), ("index_time", index_time)]
    if data.get("vector_rows"):
        rows = data["vector_rows"]

        def vectors(plt):
            fig, ax = plt.subplots(figsize=(6, 3.6))
            ax.plot([r["rows"] for r in rows], [r["top200_ms_p50"] for r in rows], marker="o")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("matrix rows")
            ax.set_ylabel("top-200 ms (p50)")
            ax.set_title("Exact vector search time")
            return fig

        charts.append(("vectors", vectors))
    return charts


def real_vault(args) -> dict:
    """The real-vault measurement (keyword, plus embeddings with --embed)."""
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
        change = next(iter(vault.rglob("飞轮效应.md")), None)
        result = {"vault": str(args.vault), **measure_vault(vault, index, args.repeat, None, server=False,
                                                           change=change)}
        if args.embed:
            base = [str(CLI), "--vault", str(vault), "--index-dir", str(index)]
            t0 = time.perf_counter()
            out = subprocess.run(base + ["index", "--json"], check=True, capture_output=True, text=True).stdout
            embed_total = time.perf_counter() - t0
            report = json.loads(out)["embedding"]
            with Index.open(vault, index) as idx:
                lat = warm_latency(idx, ["hybrid", "vector"])
            cli_hybrid = best_of(args.repeat, base + ["search", "飞轮效应", "--json", "--no-server"])
            result["embedding"] = {
                "model": report["model"], "chunks_embedded": report["embedded"],
                "embed_seconds": round(report["seconds"], 1),
                "chunks_per_s": round(report["embedded"] / report["seconds"], 2) if report["seconds"] else None,
                "index_with_vectors_s": round(result["full_index_s"] + embed_total, 1),
                "warm_hybrid_ms": lat["hybrid"], "warm_vector_ms": lat["vector"],
                "cli_hybrid_zh_s": round(cli_hybrid[1], 3),
            }
    return result


def real_vault_text(r: dict) -> str:
    lines = [f"{r['notes']} notes, {r['chunks']} chunks",
             f"full keyword index (whole CLI process):   {r['full_index_s']:.2f} s "
             f"(peak RSS {r['index_peak_rss_mb']} MB)",
             f"index again, nothing changed:              {r['noop_index_s']['median']:.3f} s "
             f"(best {r['noop_index_s']['best']:.3f})",
             f"index again, one note changed:             {r['one_note_changed_index_s']:.3f} s",
             f"warm in-process keyword query p50 / p95:   {r['warm_ms']['fts']['p50']} / "
             f"{r['warm_ms']['fts']['p95']} ms",
             f"`vault-search search` new process, en/zh:  {r['cli_cold_s']['en']} / {r['cli_cold_s']['zh']} s",
             f"index size on disk:                        {r['index_mb']} MB"]
    e = r.get("embedding")
    if e:
        lines += [f"embedding pass ({e['model']}): {e['chunks_embedded']} chunks in {e['embed_seconds']} s "
                  f"= {e['chunks_per_s']} chunks/s",
                  f"full index with vectors:                   {e['index_with_vectors_s']} s",
                  f"warm hybrid query p50 / p95:               {e['warm_hybrid_ms']['p50']} / "
                  f"{e['warm_hybrid_ms']['p95']} ms",
                  f"warm vector query p50 / p95:               {e['warm_vector_ms']['p50']} / "
                  f"{e['warm_vector_ms']['p95']} ms",
                  f"`vault-search search` new process, hybrid: {e['cli_hybrid_zh_s']} s"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vault", type=Path, help="measure this real vault instead of the growth study")
    ap.add_argument("--embed", action="store_true", help="with --vault: also embed (default model), time hybrid")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"growth study vault sizes (default {DEFAULT_SIZES})")
    ap.add_argument("--vector-rows", default=DEFAULT_VECTOR_ROWS,
                    help=f"synthetic matrix sizes for vector search time (default {DEFAULT_VECTOR_ROWS})")
    ap.add_argument("--model-sample", type=int, default=64,
                    help="chunks embedded with the default model to measure its throughput (0: skip)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per repeated measurement")
    ap.add_argument("--work", type=Path, help="keep vaults and indexes here (synthetic vaults are reused)")
    ap.add_argument("--report", type=Path, help="write report.md, report.json and charts into this folder")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.speed " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))

    if args.vault:
        result = real_vault(args)
        if args.report:
            write_report(args.report, f"Speed: {args.vault.name}", command,
                         ["```\n" + real_vault_text(result) + "\n```"], result)
        print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else real_vault_text(result))
        return 0

    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    rows = [int(x) for x in args.vector_rows.split(",") if x.strip()]
    data: dict = {}
    with tempfile.TemporaryDirectory(prefix="vs-growth-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if sizes:
            data["growth"] = growth(sizes, work, args.repeat)
            if args.model_sample:
                data["model"] = model_costs(work / f"vault-{sizes[0]}" / "vault", args.model_sample)
    if rows:
        data["vector_rows"] = vector_scaling(rows)
    sections = growth_markdown(data)
    if args.report:
        write_report(args.report, "Speed and scaling", command, sections, data, growth_charts(data))
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else "\n\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
