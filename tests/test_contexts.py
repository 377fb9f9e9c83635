"""Contexts (issue 37 item 15): a short description per folder or for the
whole vault, set in ``.vault-search.toml``'s ``[contexts]``, returned with
every hit as ``context`` (the most specific folder's) on every face, and
absent from the JSON when none is set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import http_search, mcp_answer, run_cli, start_server, write, write_notes

NOTES = {
    "Home.md": "# Home\n\nThe quokka index of everything.\n",
    "Projects/Alpha.md": "# Alpha\n\nThe quokka project plan.\n",
    "Projects/Beta/Spec.md": "# Spec\n\nQuokka spec, version two.\n",
    "Archive/Old.md": "# Old\n\nA quokka from long ago.\n",
    "People/Ann.md": "# Ann\n\nAnn feeds the quokka.\n",
}
CONTEXTS = """\
[contexts]
"/" = "Ann's work notes"
"Projects" = "Projects: one note per project, the plan first"
"Projects/Beta/" = "Beta's specs (draft)"
"Archive" = ""
"""
EXPECTED = {"Home.md": "Ann's work notes", "Projects/Alpha.md": "Projects: one note per project, the plan first",
            "Projects/Beta/Spec.md": "Beta's specs (draft)", "Archive/Old.md": None,
            "People/Ann.md": "Ann's work notes"}


@pytest.fixture
def described(tmp_path) -> tuple[Path, Path]:
    """A keyword-indexed vault with [contexts] for the vault, a folder, a
    sub-folder and one folder that says it has none."""
    vault = write_notes(tmp_path / "vault", NOTES)
    write(vault / ".vault-search.toml", CONTEXTS)
    index = tmp_path / "index"
    proc = run_cli(vault, index, "index", "--no-embed")
    assert proc.returncode == 0, proc.stderr
    return vault, index


def contexts_of(answer: dict) -> dict[str, str | None]:
    return {r["path"]: r.get("context") for r in answer["results"]}


def test_each_hit_carries_its_most_specific_folders_description(described):
    vault, index = described
    proc = run_cli(vault, index, "search", "quokka", "--json")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    answer = json.loads(proc.stdout)
    assert contexts_of(answer) == EXPECTED
    # A folder described as "" has no context: the key is left out, as with no contexts at all.
    assert "context" not in next(r for r in answer["results"] if r["path"] == "Archive/Old.md")


def test_text_output_shows_the_context_under_the_hit(described):
    vault, index = described
    out = run_cli(vault, index, "search", "spec", "version", "-n", "1").stdout
    assert out.splitlines()[1] == "    context: Beta's specs (draft)"


def test_without_contexts_the_json_has_no_context_field(tmp_path):
    vault = write_notes(tmp_path / "vault", NOTES)
    proc = run_cli(vault, tmp_path / "index", "index", "--no-embed")
    assert proc.returncode == 0
    answer = json.loads(run_cli(vault, tmp_path / "index", "search", "quokka", "--json").stdout)
    assert answer["results"] and all("context" not in r for r in answer["results"])
    assert "context:" not in run_cli(vault, tmp_path / "index", "search", "quokka").stdout


def test_a_description_is_one_line_and_config_lists_the_contexts(tmp_path):
    vault = write_notes(tmp_path / "vault", NOTES)
    write(vault / ".vault-search.toml", '[contexts]\n"" = """two\nlines\x20\x20 here"""\n')
    index = tmp_path / "index"
    run_cli(vault, index, "index", "--no-embed")
    answer = json.loads(run_cli(vault, index, "search", "quokka", "--json").stdout)
    assert set(contexts_of(answer).values()) == {"two lines here"}
    shown = json.loads(run_cli(vault, index, "config", "--json").stdout)
    assert {s["name"]: s["value"] for s in shown["settings"]}["contexts"] == {"": "two lines here"}


@pytest.mark.parametrize("settings, said", [
    ('contexts = "my notes"\n', "contexts must be a table of folder"),
    ('[contexts]\n"Projects" = 3\n', "contexts.'Projects' must be a string"),
    ('[contexts]\nNotes.old = "x"\n', "quote a folder name holding a dot"),
    ('contexts = ["a", "b"]\n', "contexts must be a table of folder"),
])
def test_a_bad_contexts_setting_is_one_line_and_loses_nothing(described, settings, said):
    vault, index = described
    good = (vault / ".vault-search.toml").read_text()
    write(vault / ".vault-search.toml", settings)
    for command in (["search", "quokka", "--json"], ["index", "--no-embed"], ["status"]):
        proc = run_cli(vault, index, *command)
        assert proc.returncode == 1 and proc.stdout == "", (command, proc)
        assert len(proc.stderr.strip().splitlines()) == 1 and said in proc.stderr, proc.stderr
        assert str(vault / ".vault-search.toml") in proc.stderr
    # Nothing was touched meanwhile: with the settings mended, every note is there as it was.
    write(vault / ".vault-search.toml", good)
    answer = json.loads(run_cli(vault, index, "search", "quokka", "--json").stdout)
    assert contexts_of(answer) == EXPECTED


def test_http_and_the_fast_path_carry_the_context(described):
    vault, index = described
    server, info = start_server(vault, index, "--no-watch")
    try:
        status, answer = http_search(info["port"], "quokka")
        assert status == 200 and contexts_of(answer) == EXPECTED
        fast = run_cli(vault, index, "search", "quokka", "--json")
        assert contexts_of(json.loads(fast.stdout)) == EXPECTED
        text = run_cli(vault, index, "search", "spec", "version", "-n", "1").stdout
        assert text.splitlines()[1] == "    context: Beta's specs (draft)"
        # Edited while the server runs: the command (which still asks the server) says what the file says now.
        write(vault / ".vault-search.toml", '[contexts]\n"" = "edited"\n')
        edited = json.loads(run_cli(vault, index, "search", "quokka", "--json").stdout)
        assert set(contexts_of(edited).values()) == {"edited"}
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_mcp_search_carries_the_context(described):
    assert contexts_of(mcp_answer(*described, "search", {"query": "quokka"})) == EXPECTED


def test_several_vaults_merged_each_hit_has_its_own_vaults_context(tmp_path):
    from vault_search.options import SearchOptions
    from vault_search.service import SearchService
    from vault_search.vaults import VaultSet

    services = []
    for name, settings in (("work", '[contexts]\n"" = "work notes"\n'), ("home", "")):
        vault = write_notes(tmp_path / name, NOTES)
        write(vault / ".vault-search.toml", settings)
        services.append(SearchService(vault, tmp_path / f"{name}-index", watch=False, warm=False))
    vaults = VaultSet(services)
    try:
        merged = vaults.search("quokka", SearchOptions(mode="fts", limit=20))
        by_vault = {(r.vault, r.context) for r in merged.results}
        assert by_vault == {("work", "work notes"), ("home", None)}
        named = vaults.search("quokka", SearchOptions(mode="fts"), "work").to_dict()
        assert {r["context"] for r in named["results"]} == {"work notes"}
    finally:
        vaults.close()
