"""Markdown links and tags the way Obsidian reads them (issue 12, item 11).

A vault written with "Use [[Wikilinks]]" off has only ``[text](Note%20Name.md)``
links; they must count as links everywhere wikilinks do (outlinks,
backlinks, unresolved, attachments, ``search --related``). Code, fenced,
inline or indented, never yields a tag or a link. Everything runs through
the installed CLI on a temp copy of the sample vault."""

from __future__ import annotations

import json

import pytest
from conftest import write

from indexer.parse import parse_note


def _outlinks(cli, path: str) -> dict[str, dict]:
    return {o["target"]: o for o in json.loads(cli("links", path, "--json").out)["outlinks"]}


@pytest.fixture
def md_vault(vault, cli):
    write(vault / "Folder" / "Bob Smith.md", "# Bob Smith\n\nBob runs the quarterly zeppelin review.\n")
    write(vault / "Projects" / "Plan.md",
          "# Plan\n\n"
          "Ask [Bob](../Folder/Bob%20Smith.md) first.\n"                 # line 3: relative, URL-encoded
          "Then [the index note](/Notes/数据库/数据库索引.md#B-tree \"a title\").\n"   # 4: vault-absolute, heading
          "Also [Deep Work](Deep%20Work) and [home](<Home.md>).\n"       # 5: no .md, angle brackets
          "![diagram](assets/flow%20chart.png)\n"                       # 6: image embed
          "See [the docs](https://example.com/a_(b)) and [mail](mailto:x@example.com) "
          "and [app](obsidian://open?vault=v&file=Home).\n"              # 7: external
          "Missing: [ghost](Nowhere%20Land.md).\n")                      # 8: unresolved
    assert cli("index", "--no-embed").code == 0
    return vault


def test_markdown_links_resolve_like_wikilinks(md_vault, cli):
    out = _outlinks(cli, "Projects/Plan.md")
    assert out["../Folder/Bob Smith.md"]["path"] == "Folder/Bob Smith.md"       # ../ and %20 decoded
    assert out["../Folder/Bob Smith.md"]["alias"] == "Bob" and out["../Folder/Bob Smith.md"]["line"] == 3
    index_link = out["/Notes/数据库/数据库索引.md"]
    assert (index_link["path"], index_link["subpath"], index_link["alias"]) == \
        ("Notes/数据库/数据库索引.md", "#B-tree", "the index note")
    assert out["Deep Work"]["path"] == "Notes/Reading/Deep Work.md"             # found by name, without .md
    assert out["Home.md"]["path"] == "Home.md"


def test_backlinks_of_a_markdown_link_target_list_the_source(md_vault, cli):
    data = json.loads(cli("links", "Folder/Bob Smith.md", "--json").out)
    assert [(b["path"], b["line"]) for b in data["backlinks"]] == [("Projects/Plan.md", 3)]


def test_a_markdown_image_embed_is_an_attachment(md_vault, cli):
    image = _outlinks(cli, "Projects/Plan.md")["assets/flow chart.png"]
    assert (image["embed"], image["kind"], image["path"], image["alias"]) == (True, "attachment", None, "diagram")


def test_external_urls_are_not_links_and_a_missing_note_is_unresolved(md_vault, cli):
    data = json.loads(cli("links", "Projects/Plan.md", "--json").out)
    assert not [o for o in data["outlinks"] if ":" in o["target"]]
    assert [u["target"] for u in data["unresolved"]] == ["Nowhere Land.md"]
    assert len(data["outlinks"]) == 6


def test_related_follows_markdown_links(md_vault, cli):
    results = json.loads(cli("search", "zeppelin", "--mode", "fts", "--related", "--json").out)["results"]
    assert results[0]["path"] == "Folder/Bob Smith.md"
    assert "Projects/Plan.md" in {r["path"] for r in results if r.get("related")}


@pytest.fixture
def code_tags(vault, cli):
    write(vault / "Inbox" / "code-tags.md",
          "# Code tags\n\n"
          "Status: <span>#feature/x</span> and <b>#bold-tag</b>.\n\n"
          "    #indented-code-tag and [in code](Home.md)\n"
          "\tgo #tabbed-code-tag\n\n"
          "- a list item\n\n"
          "    #list-continuation-tag stays a tag\n")
    assert cli("index", "--no-embed").code == 0
    return {t["tag"] for t in json.loads(cli("tags", "--json").out)["tags"]}


def test_tags_and_links_in_indented_code_do_not_count(code_tags, cli):
    assert not {"indented-code-tag", "tabbed-code-tag"} & code_tags
    assert "list-continuation-tag" in code_tags      # indented under a list item: a paragraph, not code
    assert _outlinks(cli, "Inbox/code-tags.md") == {}


def test_a_tag_right_after_an_html_tag_counts(code_tags):
    assert {"feature/x", "feature", "bold-tag"} <= code_tags


@pytest.mark.parametrize("text, tags", [
    ("entity &#123; and &#x2F; and &#amp;x", []),
    ("url http://x.example/#frag and https://x/page#Heading", []),
    ("[[#Heading]] and [t](#Heading) and (#paren) and a#b", []),
    ("<span class=\"t\">#one</span><br>#two <i>#三</i>", ["one", "two", "三"]),
    ("```\n#fenced\n```\n`#inline` and ``#double``", []),
    ("- item\n\n    ```\n    #in-list-fence\n    ```\n\n    #list-paragraph", ["list-paragraph"]),
    ("# H\n    #code-after-heading\n\ntext\n    #lazy-continuation", ["lazy-continuation"]),
])
def test_what_is_and_is_not_a_tag(text, tags):
    assert parse_note("n.md", text + "\n").tags == tags


@pytest.mark.parametrize("text, links", [
    ("[t](Note.md) [u](<Other Note.md#Part>) ![i](pic.png)", [("Note.md", "", "t", False),
                                                             ("Other Note.md", "#Part", "u", False),
                                                             ("pic.png", "", "i", True)]),
    ("[a [nested] text](Sub/A%20B.md 'title') [](x.md)", [("Sub/A B.md", "", "a [nested] text", False),
                                                        ("x.md", "", "", False)]),
    ("[![cover](cover.jpg)](Book.md)", [("Book.md", "", "![cover](cover.jpg)", False),
                                        ("cover.jpg", "", "cover", True)]),
    ("[self](#Heading) [web](http://x.org) [ftp](ftp://h/f) [s](//cdn.x/y.md) [[Wiki]]",
     [("", "#Heading", "self", False), ("Wiki", "", "", False)]),
    ("`[t](Code.md)` and ``[u](Code.md)`` and a task - [ ] not (a link)", []),
    ("[ref text][r1] and [r2][] and [r3]\n\n[r1]: Ref%20One.md\n[R2]: <Ref Two.md> \"t\"\n[r3]: https://x.org",
     [("Ref One.md", "", "ref text", False), ("Ref Two.md", "", "r2", False)]),
])
def test_markdown_link_forms(text, links):
    note = parse_note("n.md", text + "\n")
    assert sorted((l.target, l.subpath, l.alias, l.embed) for l in note.link_records) == sorted(links)
