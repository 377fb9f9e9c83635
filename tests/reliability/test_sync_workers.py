"""Pass 1 and 2 of a large sync in forked worker processes (indexer/sync.py,
``_in_workers``): the index they leave is exactly the one a single process
leaves, and an error in a worker or in the writer beside them loses nothing
and locks nothing.

The vault is 420 real notes of oldwinter-garden-zh (Chinese, with names that
join jieba's dictionary) plus bad input (malformed YAML, a binary file named
.md, invalid UTF-8). ``VAULT_SEARCH_SYNC_WORKERS=2`` puts a sync this small
through the workers; 0 keeps it in one process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import CLI, eval_path, write

from indexer import faults
from reliability.test_crash import snapshot
from reliability.test_transactions import lock_is_free

MODEL = "hash:64"
NOTES = 420   # three write batches: a fault in the second finds workers busy


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("workers") / "vault"
    cards = eval_path("vaults", "oldwinter-garden-zh", "Cards", "永久笔记")
    (root / "Cards").mkdir(parents=True)
    for path in sorted(cards.glob("*.md"))[:NOTES]:
        shutil.copy2(path, root / "Cards" / path.name)
    write(root / "bad/yaml.md", "---\ntitle: [unclosed\n---\n# 坏的 YAML\n正文还在。\n")
    write(root / "bad/binary.md", b"\x00\x01\x02PNG" * 50)
    write(root / "bad/latin1.md", "# Caf\xe9 notes\ncaf\xe9 au lait\n".encode("latin-1"))
    return root


def index(vault: Path, index_dir: Path, workers: int, fault: str | None = None, *args: str):
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    env["VAULT_SEARCH_SYNC_WORKERS"] = str(workers)
    if fault:
        env[faults.ENV] = fault
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "index", "--model",
                           MODEL, "--json", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    """The index one process leaves, and its report."""
    ref = tmp_path_factory.mktemp("workers-ref") / "index"
    proc = index(source, ref, 0)
    assert proc.returncode == 0, proc.stderr
    return snapshot(ref), json.loads(proc.stdout)


def stray_workers(index_dir: Path) -> list[int]:
    """Processes still running with this index on their command line (a
    worker outliving its sync would be one: workers are forks of the CLI)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(index_dir).encode() in cmdline:
            found.append(int(pid))
    return found


def test_workers_leave_the_index_one_process_leaves(source, reference, tmp_path):
    proc = index(source, tmp_path / "index", 2)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    ref_snapshot, ref_report = reference
    assert snapshot(tmp_path / "index") == ref_snapshot
    assert report["warnings"] == ref_report["warnings"] and len(report["warnings"]) >= 3
    for key in ("added", "skipped", "chunks_written", "user_words_added"):
        assert report[key] == ref_report[key], key
    assert ref_report["user_words_added"] > 0   # names joined the dictionary: both passes had them
    assert not stray_workers(tmp_path / "index")


@pytest.mark.parametrize("fault, code", [
    ("read:30=interrupt", 130),      # Ctrl-C inside a worker, while it reads
    ("read:30=errno:EIO", 0),        # an unreadable file in a worker: a warning, retried next time
    ("txn:notes:2=oserror", 1),      # a full disk in the writer while the workers run
    ("txn:notes:2=interrupt", 130),  # Ctrl-C in the writer
])
def test_an_error_in_a_worker_or_the_writer_loses_nothing(source, reference, tmp_path, fault, code):
    vault = shutil.copytree(source, tmp_path / "vault")
    index_dir = tmp_path / "index"
    failed = index(vault, index_dir, 2, fault)
    assert failed.returncode == code, failed.stderr
    if code:
        assert "Traceback" not in failed.stderr and failed.stderr.strip()
    assert lock_is_free(index_dir)
    assert not stray_workers(index_dir)
    again = index(vault, index_dir, 2)
    assert again.returncode == 0, again.stderr
    assert snapshot(index_dir) == reference[0]


@pytest.mark.parametrize("die_at, slow_writer", [
    (20, False),    # in its first batch: the writer finds out waiting for the result
    (201, True),    # in its second, the writer behind: it may find out handing on the next batch
])
def test_a_worker_killed_mid_sync_leaves_the_rest_to_the_writer(source, reference, tmp_path, die_at, slow_writer):
    """The OOM killer takes a worker: the sync finishes in this process, says so,
    and leaves the same index."""
    vault = shutil.copytree(source, tmp_path / "vault")
    index_dir = tmp_path / "index"
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from pathlib import Path
        import indexer.sync as sync
        from vault_search import Index

        parent, calls = os.getpid(), [0]
        note_rows, write_note = sync._note_rows, sync._write_note

        def dying(*args):
            calls[0] += 1
            if os.getpid() != parent and calls[0] == {die_at}:
                os.kill(os.getpid(), signal.SIGKILL)
            return note_rows(*args)

        def slow(*args):
            time.sleep(0.005 if {slow_writer} else 0)
            return write_note(*args)

        sync._note_rows, sync._write_note = dying, slow
        with Index.open(Path({str(vault)!r}), Path({str(index_dir)!r}), create=True) as idx:
            report = idx.sync(model={MODEL!r})
        print([m for p, m in report.warnings if "worker process stopped" in m])
    """)
    env = {**os.environ, "VAULT_SEARCH_SYNC_WORKERS": "2"}
    env.pop(faults.ENV, None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "worker process stopped" in proc.stdout
    assert snapshot(index_dir) == reference[0]
    assert lock_is_free(index_dir) and not stray_workers(index_dir)


def test_workers_die_with_a_killed_sync_and_leave_the_lock_free(source, reference, tmp_path):
    """SIGKILL of the index process (a power cut, the OOM killer) between two
    batches, workers busy: they go with it instead of waiting forever on
    their queue with the lock files they inherited."""
    vault = shutil.copytree(source, tmp_path / "vault")
    index_dir = tmp_path / "index"
    killed = index(vault, index_dir, 2, "fts-batch=kill")
    assert killed.returncode == -9, killed.stderr
    deadline = time.monotonic() + 10
    while stray_workers(index_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not stray_workers(index_dir)
    assert lock_is_free(index_dir)
    again = index(vault, index_dir, 2)
    assert again.returncode == 0, again.stderr
    assert snapshot(index_dir) == reference[0]


def test_an_error_in_the_writer_stops_the_workers_before_it_propagates(source, tmp_path):
    """A library caller that keeps the exception (and its traceback) has no
    worker left behind, and its next sync may use workers again."""
    vault = shutil.copytree(source, tmp_path / "vault")
    index_dir = tmp_path / "index"
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from vault_search import Index

        def children():
            found = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    stat = open(f"/proc/{{pid}}/stat", "rb").read()
                except OSError:
                    continue
                if int(stat.rsplit(b")", 1)[1].split()[1]) == os.getpid():
                    found.append(pid)
            return found

        idx = Index.open(Path({str(vault)!r}), Path({str(index_dir)!r}), create=True)
        try:
            idx.sync(model={MODEL!r})
        except OSError as exc:
            kept = exc
        print("children", len(children()))
        os.environ.pop("VAULT_SEARCH_FAULT")
        print("added", idx.sync(model={MODEL!r}).added)
    """)
    env = {**os.environ, "VAULT_SEARCH_SYNC_WORKERS": "2", faults.ENV: "txn:notes:2=oserror"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "children 0" in proc.stdout
    assert "added" in proc.stdout and "added 0" not in proc.stdout
