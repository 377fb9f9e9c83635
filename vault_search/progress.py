"""Progress of long work: a bar on a terminal, else a line every few seconds
on stderr (or a JSON event a line on stdout), so agents and CI see it move.
Used by ``vault-search index`` and the benchmarks."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click


class LazyProgressBar:
    """A click progress bar that appears only once there is work to show."""

    def __init__(self, label: str, rate: bool = False, file: Any = None):
        self.label = label
        self.rate = rate
        self.file = file    # None: stdout
        self.bar: Any = None   # a click progress bar, made on the first update
        self.started = 0.0

    def _info(self, bar) -> str:
        if not self.rate or not bar.pos:
            return ""
        return f"{bar.pos}/{bar.length}  {bar.pos / max(time.monotonic() - self.started, 1e-6):.1f}/s"

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.started = time.monotonic()
            self.bar = click.progressbar(length=max(total, 1), label=self.label, show_eta=True,
                                         show_percent=True, item_show_func=None, file=self.file)
            if self.rate:
                self.bar.format_progress_line = self._with_rate(self.bar.format_progress_line)
            self.bar.__enter__()
        self.bar.length = max(total, 1)
        self.bar.update(done - self.bar.pos)

    def _with_rate(self, original):
        def line():
            return f"{original()}  {self._info(self.bar)}"
        return line

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)


# A long `index` on a pipe (an agent, CI) says how far it got this often, on
# stderr ($VAULT_SEARCH_PROGRESS_S sets another period).
PROGRESS_EVERY_S = 5.0
PROGRESS_ENV = "VAULT_SEARCH_PROGRESS_S"
# `index --json --stream`: a progress event at most this often, on stdout.
STREAM_EVERY_S = 1.0


def progress_period(default: float) -> float:
    try:
        value = float(os.environ.get(PROGRESS_ENV, ""))
        return value if value >= 0 else default
    except ValueError:
        return default


class ProgressLines:
    """Progress for a non-terminal: a line on stderr every ``every`` seconds
    (``indexing: 1200/5000 notes (24%), 240/s, about 16 s left``), or with
    ``stream`` a JSON event a line on stdout (``{"event": "progress", ...}``)."""

    def __init__(self, stage: str, unit: str, every: float = PROGRESS_EVERY_S, stream: bool = False):
        self.stage, self.unit, self.every, self.stream = stage, unit, every, stream
        # The stage's first report: its rate counts from there, leaving out the
        # stages before it and the work reported at once (chunks found cached).
        self.started: float | None = None
        self.base = 0
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.started is None:
            self.started = self.last = now
            self.base = done
        if now - self.last < self.every and not (self.stream and done >= total and done):
            return
        self.last = now
        elapsed = now - self.started
        rate = (done - self.base) / elapsed if elapsed > 0 else 0.0
        if self.stream:
            click.echo(json.dumps({"event": "progress", "stage": self.stage, "done": done, "total": total,
                                   "elapsed_s": round(elapsed, 2)}))
            return
        left = f", about {(total - done) / rate:.0f} s left" if rate and total > done else ""
        share = f" ({100 * done / total:.0f}%)" if total else ""
        click.echo(f"{self.stage}: {done}/{total} {self.unit}{share}, {rate:.1f}/s{left}", err=True)


@contextmanager
def sync_progress(terminal: bool, file: Any = None, every: float | None = None,
                  stream: bool = False) -> Iterator[tuple[Any, Any]]:
    """``(progress, embed_progress)`` for a sync: bars on ``file`` (None:
    stdout) when it is a ``terminal``, else ``ProgressLines`` every ``every``
    seconds (default: ``$VAULT_SEARCH_PROGRESS_S`` or PROGRESS_EVERY_S), or
    JSON events with ``stream``."""
    if terminal:
        with LazyProgressBar("Indexing ", file=file) as notes, \
                LazyProgressBar("Embedding", rate=True, file=file) as chunks:
            yield notes, chunks
        return
    every = progress_period(PROGRESS_EVERY_S) if every is None else every
    yield ProgressLines("indexing", "note reads and writes", every, stream), \
        ProgressLines("embedding", "chunks", every, stream)
