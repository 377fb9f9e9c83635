import os

from conftest import write

from indexer.config import load_config
from indexer.scan import IgnoreRules, scan_vault


def paths(vault, index_dir, **overrides):
    config = load_config(vault, index_dir).with_overrides(**overrides)
    warnings = []
    found = sorted(f.path for f in scan_vault(config, lambda p, m: warnings.append((p, m))))
    return found, warnings


def test_skips_dot_folders_at_any_depth_and_non_markdown(tmp_path):
    v = tmp_path / "v"
    write(v / "a.md", "a")
    write(v / "B.MD", "b")
    write(v / "notes.txt", "not markdown")
    write(v / "board.canvas", "{}")
    write(v / ".archive/old.md", "old")
    write(v / ".obsidian/workspace.md", "x")
    write(v / "deep/er/.trash/gone.md", "x")
    write(v / "deep/er/.hidden.md", "x")
    write(v / "deep/er/kept.md", "x")
    found, _ = paths(v, tmp_path / "i")
    assert found == ["B.MD", "a.md", "deep/er/kept.md"]


def test_named_dot_folder_can_be_opted_in(tmp_path):
    v = tmp_path / "v"
    write(v / ".learnings/lesson.md", "x")
    write(v / ".archive/old.md", "x")
    found, _ = paths(v, tmp_path / "i", include_dot=["learnings"])
    assert found == [".learnings/lesson.md"]
    write(v / ".vault-search.toml", 'include_dot = [".learnings"]\n')
    found, _ = paths(v, tmp_path / "i")
    assert found == [".learnings/lesson.md"]


def test_ignore_globs_by_name_and_by_path(tmp_path):
    v = tmp_path / "v"
    for p in ["keep.md", "drafts/x.md", "a/drafts/y.md", "Extras/Templates/t.md", "Extras/ok.md", "z.tmp.md"]:
        write(v / p, "x")
    found, _ = paths(v, tmp_path / "i", ignore=["drafts/", "Extras/Templates", "*.tmp.md"])
    assert found == ["Extras/ok.md", "keep.md"]


def test_ignore_rules_for_single_paths():
    rules = IgnoreRules(("drafts/",), (".learnings",))
    assert rules.skips_path(".obsidian/x.md")
    assert rules.skips_path("a/drafts/x.md")
    assert not rules.skips_path("a/drafts.md")
    assert not rules.skips_path(".learnings/x.md")


def test_symlink_loop_and_links_out_of_the_vault(tmp_path):
    v = tmp_path / "v"
    outside = tmp_path / "outside"
    write(outside / "secret.md", "secret")
    write(v / "a/note.md", "x")
    os.symlink(v / "a", v / "a" / "loop")           # a/loop -> a
    os.symlink(v, v / "a" / "root")                 # a/root -> vault root
    os.symlink(outside, v / "out")                   # out -> outside the vault
    os.symlink(outside / "secret.md", v / "s.md")    # file link out of the vault
    os.symlink(v / "a/note.md", v / "alias.md")      # file link inside the vault
    found, warnings = paths(v, tmp_path / "i")
    assert found == ["a/note.md", "alias.md"]
    messages = " ".join(m for _, m in warnings)
    assert "outside the vault" in messages and "already visited" in messages


def test_broken_symlink_is_reported_not_fatal(tmp_path):
    v = tmp_path / "v"
    write(v / "ok.md", "x")
    os.symlink(tmp_path / "nowhere.md", v / "broken.md")
    found, warnings = paths(v, tmp_path / "i")
    assert found == ["ok.md"]
    assert ("broken.md", "broken symlink skipped") in warnings


def test_symlink_into_a_dot_folder_or_ignored_path_is_not_followed(tmp_path):
    v = tmp_path / "v"
    write(v / ".archive/secret.md", "archived")
    write(v / "drafts/d.md", "draft")
    write(v / "notes/real.md", "x")
    os.symlink(v / ".archive/secret.md", v / "notes/link.md")
    os.symlink(v / ".archive", v / "notes/archive-link")
    os.symlink(v / "drafts", v / "notes/drafts-link")
    found, warnings = paths(v, tmp_path / "i", ignore=["drafts/"])
    assert found == ["notes/real.md"]
    assert sum("skipped path" in m for _, m in warnings) == 3


def test_a_link_never_hides_the_real_folder(tmp_path):
    v = tmp_path / "v"
    write(v / "C/D/real.md", "x")
    (v / "A/sub").mkdir(parents=True)
    os.symlink(v / "C/D", v / "A/sub/link")   # found before C/D in a depth-first walk
    found, warnings = paths(v, tmp_path / "i")
    assert found == ["C/D/real.md"]
    assert warnings == [("A/sub/link", "folder already visited (symlink loop or duplicate link); skipped")]


def test_leading_slash_anchors_a_glob_at_the_root(tmp_path):
    v = tmp_path / "v"
    write(v / "drafts/a.md", "x")
    write(v / "sub/drafts/b.md", "x")
    found, _ = paths(v, tmp_path / "i", ignore=["/drafts"])
    assert found == ["sub/drafts/b.md"]
