"""plain.reading_text: Markdown as Obsidian's reading view shows it, one
output line per input line, safe on any string."""

import time

import pytest

from indexer.plain import reading_text
from vault_search.render import markdown_text

CASES = [
    # HTML and comments
    ('a <span class="x">b</span> c', "a b c"),
    ("wo<b>rd</b> and a<br>b", "word and a b"),
    ("<div\n  class='a'\n  id=\"b\">\ninside\n</div>", "\n\n\ninside\n"),
    ("a <!-- x --> b", "a b"),
    ("a <!-- x\ny --> b\nc", "a\nb\nc"),
    ("text <!-- a --> mid <!-- b\nc --> end", "text mid\nend"),
    ("a <!-- never closed\nb\nc", "a\n\n"),
    ("a %% x %% b", "a b"),
    ("%%\nhidden\n%%\nshown", "\n\n\nshown"),
    ("a %% left open\nb", "a\n"),
    ("<!--\n```\n-->\ntext", "\n\n\ntext"),
    ("1 < 2 > 0, x <3 and y>2", "1 < 2 > 0, x <3 and y>2"),
    ("if a <b then\nmore text\n\nend", "if a <b then\nmore text\n\nend"),
    ("<span title=\"a>b\">t</span>", "t"),
    ("&amp; &lt;b&gt; &#x41; R&D &para=2", "& <b> A R&D &para=2"),
    # callouts and quotes
    ("> [!note]- Title", "Title"),
    ("> [!tip] Use **dates**\n> See [[Dates|due dates]] <!-- x -->", "Use dates\nSee due dates"),
    ("> [!warning]", "Warning"),
    ("> [!NOTE]+ ", "Note"),
    ("> [!note|wide] Meta", "Meta"),
    ("> [!note] %% only a comment %%", "Note"),
    ("> > nested\n> plain", "nested\nplain"),
    ("> ## quoted heading\n> - [ ] quoted task", "quoted heading\nquoted task"),
    # tables
    ("| a | b |\n|---|:--:|\n| [[N\\|shown]] | `c\\|d` |", "a · b\n\nshown · c|d"),
    ("| [[Note\\|shown]] | y |", "shown · y"),
    ("| a \\| b | c |", "a | b · c"),
    ("a | b\n--|--\nc | d\n\ne | f", "a · b\n\nc · d\n\ne | f"),
    ("> | a | b |\n> |---|---|\n> | 1 | 2 |", "a · b\n\n1 · 2"),
    # headings, rules, lists
    ("## X\n#tag and ##NoSpace", "X\n#tag and ##NoSpace"),
    ("Title\n===\nSub\n---", "Title\n\nSub\n"),
    ("---\n***\n_ _ _", "\n\n"),
    ("- [ ] x\n- [x] done\n* item\n1. one\n  - nested", "x\ndone\nitem\none\nnested"),
    ("- [ ]\n- ", "\n"),
    # emphasis
    ("**b** __b__ *i* _i_", "b b i i"),
    ("***both*** and *emph **strong** emph*", "both and emph strong emph"),
    ("snake_case_words and 2*3*4 and a * b * c", "snake_case_words and 2*3*4 and a * b * c"),
    ("_snake_case_ and __init__ and foo__bar__baz", "snake_case and init and foo__bar__baz"),
    ("~~s~~ ==mark== ==*both*==", "s mark both"),
    ("**a **b** and ==a ==b==", "**a b and ==a b"),
    ("a **b and *c", "a **b and *c"),
    # links
    ("[[Note]] [[folder/Note|shown]] [[Note#Heading]] [[Note.md]]", "Note shown Note > Heading Note"),
    ("[[Note#H1#H2]] [[Note|]] [[#Heading]]", "Note > H1 > H2 Note Heading"),
    ("![[img.png]] ![[doc.PDF]] ![[Note]] ![[pic.jpg|100]] ![[Note#Sec]]", "Note Note > Sec"),
    ("**bold with [[link|alias]]**", "bold with alias"),
    ("[text](http://x.com/(a)) ![alt *x*](a.png) ![](b.png) [ref][1]", "text alt x ref"),
    ("<https://x.y/a_b_> <a@b.c> http://x.com/_a_ *em*", "https://x.y/a_b_ a@b.c http://x.com/_a_ em"),
    ("fn[^1] and [^note].", "fn and ."),
    ("[^1]: the note with [[Link|alias]]", "the note with alias"),
    ('[1]: http://ref.def "Title"', ""),
    ("para ^abc123\n^tbl", "para\n"),
    # code
    ("`**x** [[y]] <b>` after", "**x** [[y]] <b> after"),
    ("Use `<!-- x -->` and `%% y %%` here", "Use <!-- x --> and %% y %% here"),
    ("a `b` c `` d `e` f `` g", "a b c d `e` f g"),
    ("\\`not code` stays", "`not code` stays"),
    ("a `` ` `` b and a lone ` tick", "a ` b and a lone ` tick"),
    ("```python\n  **x** [[y]]  \n<!-- kept -->\n```\nafter", "\n  **x** [[y]]\n<!-- kept -->\n\nafter"),
    ("````\n```\n````\nout", "\n```\n\nout"),
    ("~~~\n```\n~~~", "\n```\n"),
    ("```\n```python\nstill code\n```", "\n```python\nstill code\n"),
    ("```\nnever closed **x**", "\nnever closed **x**"),
    ("> [!example] Code\n> ```py\n> x = **1**\n> ```\n> after", "Code\n\nx = **1**\n\nafter"),
    ("> ```\n> code\nnot quoted **b**", "\ncode\nnot quoted b"),
    # escapes and whitespace
    ("\\*not em\\* \\#notag \\[[x]] a\\_b \\&amp;", "*not em* #notag [[x]] a_b &amp;"),
    ("  spaced \t out  \r", "spaced out"),
    ("\r\nwindows\r\n", "\nwindows\n"),
]


@pytest.mark.parametrize("markdown, shown", CASES)
def test_reading_text(markdown, shown):
    assert reading_text(markdown) == shown


@pytest.mark.parametrize("markdown, shown", CASES)
def test_one_output_line_per_input_line(markdown, shown):
    assert reading_text(markdown).count("\n") == markdown.count("\n")


@pytest.mark.parametrize("text", [
    "", "\n", "\x00", "\x000\x00 `code`", "\x005\x00", "\ud800 lone \udfff", "\ufeff\u2028\x85\x0b\x0c",
    "[[", "]]", "![[", "[[|]]", "[[#]]", "[[^]]", "[](", "<", "<a", "</", "<!--", "%%", "`", "``", "\\", "&", "&#;",
    "&#99999999;", "> [!", "> [!]", "|", "||", "|-|", "*", "_", "~~", "==", "^", "[^]", "- [", "#",
])
def test_never_raises(text):
    out = reading_text(text)
    assert isinstance(out, str) and out.count("\n") == text.count("\n")


def test_nul_is_no_placeholder():
    # A note's own NULs cannot pose as the code spans set aside inside a line.
    assert reading_text("\x000\x00 and `code`") == "\ufffd0\ufffd and code"


JUNK = {
    "star underscore bracket": "*_[" * 350_000,
    "strong openers": "**a " * 250_000,
    "em openers": "*a " * 330_000,
    "underscores": "_a " * 330_000,
    "strikes": "~~a " * 250_000,
    "marks": "==a " * 250_000,
    "links": "[a](" * 250_000,
    "nested parens": "[a](b" + "(c)" * 330_000,
    "wikilinks": "[[a" * 330_000,
    "backticks": "``a`" * 250_000,
    "tags": "<a " * 330_000,
    "attributes": "<a" + " b" * 500_000,
    "quotes": "<a b=\"" * 160_000,
    "comments": "<!--" * 250_000,
    "entities": "&#" * 500_000,
    "escapes": "\\" * 1_000_000,
    "pipes": "| " * 500_000,
    "spaces": " " * 1_000_000 + "x",
    "block ids": "^a " * 330_000,
}


@pytest.mark.parametrize("name", JUNK)
def test_a_megabyte_line_of_junk_is_fast(name):
    # Every rule is linear: a regex that rescans to the end of the line from
    # each unmatched mark took minutes here.
    text = JUNK[name]
    t0 = time.perf_counter()
    out = reading_text(text)
    assert time.perf_counter() - t0 < 2.0, name
    assert "\n" not in out


def test_many_lines_that_open_something_are_fast():
    for text in ("<a\n" * 100_000, "x|\n|-|\n" * 50_000, "```\n" * 100_000, "<!--\n-->\n" * 100_000):
        t0 = time.perf_counter()
        assert reading_text(text).count("\n") == text.count("\n")
        assert time.perf_counter() - t0 < 2.0, text[:10]


@pytest.mark.parametrize("snippet, markdown", [
    ("#tag and C# #", "\\#tag and C\\# \\#"),
    ("[[Note|alias]] ![[img.png]] [t](u)", "\\[\\[Note|alias\\]\\] !\\[\\[img.png\\]\\] \\[t\\](u)"),
    ("<span>x</span> <!-- c --> a > b", "\\<span\\>x\\</span\\> \\<!-- c --\\> a \\> b"),
    ("%%hidden%% 50% ==m== a = b ~~s~~ ~x", "\\%\\%hidden\\%\\% 50% \\=\\=m\\=\\= a = b \\~\\~s\\~\\~ ~x"),
    ("*e* _e_ snake_case `c` $5 x^2", "\\*e\\* \\_e\\_ snake_case \\`c\\` \\$5 x\\^2"),
    ("&amp; R&D a\\b", "\\&amp; R&D a\\\\b"),
    ("- item", "\\- item"),
    ("1. item", "1\\. item"),
    ("12) item 3. x", "12\\) item 3. x"),
])
def test_a_snippet_pasted_as_markdown_shows_itself(snippet, markdown):
    # --format md: a snippet's text makes no tag, link, HTML, comment or list
    # in the note it is pasted into, and the reading view shows it unchanged.
    assert markdown_text(snippet) == markdown
    assert reading_text(markdown) == snippet
