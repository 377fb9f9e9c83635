"""What the CLI prints from note-derived text (paths, titles, headings,
snippets, tags) never carries a raw control character to a pipe or a
terminal; ``--format paths0`` gives the exact path bytes."""

import json
import os
import pty
import re
import subprocess
import tty
import unicodedata

from conftest import CLI, write

EVIL_DIR = "Inbox/evil\n/etc/passwd"   # a folder name with a newline in it
EVIL_NOTE = EVIL_DIR + "/x.md"
ESC_NOTE = "Inbox/esc\x1b[2Jname.md"
# An OSC window-title sequence, a screen clear, a C1 CSI, a carriage return
# and backspaces: each would rewrite or spoof what the terminal shows.
HOSTILE = "\x1b]0;pwned\x07 \x1b[2J \x9b31m \r over \x08\x08 del\x7f"


def _hostile_vault(vault):
    write(vault / EVIL_NOTE, "# Newline folder\n\nzorblax lives in a folder whose name has a newline.\n")
    write(vault / ESC_NOTE, "# Escape file name\n\nzorblax again, in a file named with ESC.\n")
    write(vault / "Inbox" / "hostile.md",
          # YAML spells ESC and BEL as \e and \a; a raw one would make the frontmatter invalid
          f"---\ntags: [\"bad\\e]0;x\\atag\"]\n---\n# Title {HOSTILE}\n\n## Heading {HOSTILE}\n\n"
          f"zorblax body {HOSTILE} and #ok tag, see [[Title {HOSTILE}]].\n")


def _run(vault, index_dir, *args) -> subprocess.CompletedProcess:
    """The CLI with stdout as raw bytes (text mode would fold a lone \\r)."""
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), *args],
                          capture_output=True, timeout=300)


def _run_tty(vault, index_dir, *args) -> bytes:
    """The CLI with stdout on a (raw-mode) pseudo-terminal, as a user sees it."""
    master, slave = pty.openpty()
    tty.setraw(slave)  # no \n -> \r\n translation: every byte is the program's own
    proc = subprocess.Popen([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), *args],
                            stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0
    return out


def _controls(text: str, allowed: str = "\n") -> set[str]:
    return {c for c in text if unicodedata.category(c) == "Cc" and c not in allowed}


def test_paths_with_a_newline_stay_on_one_line_and_paths0_is_exact(vault, index_dir, ledger):
    _hostile_vault(vault)
    assert _run(vault, index_dir, "index", "--no-embed").returncode == 0
    r = _run(vault, index_dir, "search", "zorblax", "--mode", "fts", "--format", "paths")
    assert r.returncode == 0, r
    out = r.stdout.decode()
    assert not _controls(out), out
    lines = out.splitlines()
    assert len(lines) == 3 and "/etc/passwd/x.md" not in lines
    assert "Inbox/evil\\n/etc/passwd/x.md" in lines and "Inbox/esc\\x1b[2Jname.md" in lines
    r = _run(vault, index_dir, "search", "zorblax", "--mode", "fts", "--format", "paths0")
    assert r.returncode == 0 and r.stdout.endswith(b"\0")
    paths = r.stdout[:-1].split(b"\0")
    assert sorted(paths) == sorted(p.encode() for p in (EVIL_NOTE, ESC_NOTE, "Inbox/hostile.md"))
    assert all((vault / os.fsdecode(p)).is_file() for p in paths)
    # no hits: nothing at all, not an empty record
    assert _run(vault, index_dir, "search", "qqqnothing", "--format", "paths0").stdout == b""
    ledger.record("hostile input", "note paths with a newline or ESC, piped through `--format paths`",
                  "escaped (\\n, \\x1b): one line per note; `--format paths0` gives the exact bytes", tries=2)


def test_text_and_md_output_escape_terminal_sequences(vault, index_dir, ledger):
    _hostile_vault(vault)
    r = _run(vault, index_dir, "index", "--no-embed")
    assert r.returncode == 0 and not _controls(r.stderr.decode()), r
    tries = 0
    for args in (["search", "zorblax", "--mode", "fts"], ["search", "zorblax", "--mode", "fts", "--explain"],
                 ["search", "zorblax", "--mode", "fts", "--format", "md"], ["links", "Inbox/hostile.md"],
                 ["tags"], ["status"]):
        r = _run(vault, index_dir, *args)
        assert r.returncode == 0, (args, r)
        out = r.stdout.decode()
        assert not _controls(out), (args, out)
        tries += 1
    text = _run(vault, index_dir, "search", "zorblax", "--mode", "fts").stdout.decode()
    # (the lone \r ends the title line: a line break to the parser)
    assert "Title \\x1b]0;pwned\\x07 \\x1b[2J \\x9b31m" in text and "over \\x08\\x08 del\\x7f" in text
    assert "#bad\\x1b]0;x\\x07tag" in text
    # On a terminal the colours are ours; every ESC from the note is shown escaped.
    shown = _run_tty(vault, index_dir, "search", "zorblax", "--mode", "fts").decode()
    assert "\x1b[" in shown  # our own colours reach the terminal
    # ... and our own links (OSC 8), each to a URI of printable ASCII: the hits' paths, percent-encoded
    ours = re.compile(r"\x1b\]8;;[ -~]*\x1b\\")
    assert len(ours.findall(shown)) == 2 * 3 and "/esc%1B%5B2Jname.md" in shown
    shown = ours.sub("", shown)
    assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\x9b" not in shown and "\r" not in shown
    assert "\\x1b]0;pwned\\x07" in shown and "esc\\x1b[2Jname.md" in shown
    ledger.record("hostile input", "terminal escape sequences (OSC, CSI, C1, CR, BS) in note titles, headings, "
                  "snippets, tags and file names", "shown escaped (\\x1b ...) in text, md, links, tags and status "
                  "output, on a terminal and in a pipe", tries=tries + 1)


def test_get_prints_a_note_exactly_to_a_pipe_and_escaped_to_a_terminal(vault, index_dir, ledger):
    _hostile_vault(vault)
    # the note's lines as `get --json` gives them (a lone \r ends a line there too)
    text = json.loads(_run(vault, index_dir, "get", "Inbox/hostile.md", "--json").stdout)["text"]
    assert "\x1b]0;pwned\x07 \x1b[2J" in text
    r = _run(vault, index_dir, "get", "Inbox/hostile.md")
    assert r.returncode == 0 and r.stdout == (text + "\n").encode()  # the note itself, for scripts
    shown = _run_tty(vault, index_dir, "get", "Inbox/hostile.md").decode()
    assert not _controls(shown, allowed="\n\t"), shown
    assert "# Title \\x1b]0;pwned\\x07" in shown and shown.count("\n") == text.count("\n") + 1
    ledger.record("hostile input", "terminal escape sequences in a note printed by `get`",
                  "escaped on a terminal; the exact text when piped", tries=2)


def test_a_newline_and_a_backslash_n_in_names_print_differently(vault, index_dir):
    write(vault / "Inbox" / "a\nb.md", "# One\nbackslashcase\n")
    write(vault / "Inbox" / "a\\nb.md", "# Two\nbackslashcase\n")
    assert _run(vault, index_dir, "index", "--no-embed").returncode == 0
    r = _run(vault, index_dir, "search", "backslashcase", "--mode", "fts", "--format", "paths")
    lines = sorted(r.stdout.decode().splitlines())
    assert lines == ["Inbox/a\\\\nb.md", "Inbox/a\\nb.md"], lines


def test_serve_logs_request_lines_escaped(vault, index_dir):
    import socket
    import time

    from conftest import start_server

    assert _run(vault, index_dir, "index", "--no-embed").returncode == 0
    proc, info = start_server(vault, index_dir, "-v")
    try:
        with socket.create_connection(("127.0.0.1", info["port"]), timeout=10) as sock:
            sock.sendall(b"GET /\x1b]0;PWNED\x07\x1b[2J HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            sock.recv(4096)
        time.sleep(0.5)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "PWNED" in err and "\x1b" not in err and "\x07" not in err, err[-500:]
