import subprocess
import sys

from indexer.segment import HAN_RUN_RE, Segmenter, latin_tokens, user_word_candidates


def test_search_mode_emits_words_and_the_words_inside_them():
    tokens = Segmenter().segment("我们讨论分布式数据库索引的设计")
    assert {"数据库", "数据", "索引", "分布式", "分布"} <= set(tokens)
    # A query for either form shares tokens with the document.
    assert set(Segmenter().segment("数据库索引")) <= set(tokens)
    assert set(Segmenter().segment("数据库")) <= set(tokens)


def test_two_character_word_is_not_found_across_a_word_boundary():
    # 和服 (kimono) must not match 和 + 服务员 (and the waiter).
    assert "和服" not in Segmenter().segment("我和服务员聊了很久")
    assert "和服" in Segmenter().segment("主人穿着和服点茶")


def test_latin_words_are_lowercased_and_identifiers_kept_whole_with_parts():
    tokens = latin_tokens("Use getUserName in node.js, snake_case_name, C++ and C# 3.14 v2.0-rc1")
    for expected in ["use", "getusername", "get", "user", "name", "node.js", "node", "js",
                     "snake_case_name", "snake", "case", "c++", "c#", "3.14", "v2.0-rc1", "rc1"]:
        assert expected in tokens, expected
    assert latin_tokens("*** \" AND ( ) :") == ["and"]


def test_full_width_and_mixed_scripts_are_normalised():
    tokens = Segmenter().segment("ＭｙＳＱＬ８数据库")
    assert "mysql8" in tokens and "数据库" in tokens


def test_vault_names_stay_whole_and_their_parts_still_match():
    seg = Segmenter()
    assert "卡片笔记法" not in seg.segment("卡片笔记法很好用")
    seg.add_user_words(user_word_candidates(["卡片笔记法", "# 飞轮效应 ", "a long title with 中文 inside"]))
    tokens = seg.segment("卡片笔记法很好用")
    assert "卡片笔记法" in tokens and {"卡片", "笔记"} <= set(tokens)
    # Another vault's segmenter in the same process is unaffected.
    assert "卡片笔记法" not in Segmenter().segment("卡片笔记法很好用")


def test_user_word_candidates_are_short_all_han_names():
    assert user_word_candidates(["飞轮效应", "§ obsidian 从了解到沉醉", "一", "这是一个非常非常长的中文标题句子"]) == {"飞轮效应"}


def test_english_text_never_loads_jieba():
    code = ("import sys; from indexer.segment import Segmenter; s = Segmenter();"
            "s.segment('plain English text'); print('jieba' in sys.modules, s.jieba_loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_prepared_segmenter_cuts_exactly_as_the_whole_dictionary():
    """Segmenter.prepare (a sync of a few notes) loads only the dictionary
    parts its texts' characters begin; the tokens must be the same, name by
    name, on real notes, and text it was not prepared for loads the rest."""
    import random

    from conftest import eval_path

    vault = eval_path("vaults", "oldwinter-garden-zh")
    notes = sorted(p for p in vault.rglob("*.md") if not any(part.startswith(".") for part in p.parts))
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in notes}
    names = {}
    for p in notes:
        for word in sorted(user_word_candidates([p.stem])):
            names.setdefault(word, None)
    whole = Segmenter(dict(names))
    for p in random.Random(7).sample(notes, 25):
        text = texts[p]
        small = Segmenter(dict(names))
        assert small.prepare([p.as_posix(), text]) or not any("\u4e00" <= c <= "\u9fff" for c in text)
        runs = [r for r in HAN_RUN_RE.findall(text) if len(r) >= 4]
        added = user_word_candidates([runs[len(runs) // 2][:4]] if runs else [])   # a new name from the note
        new = small.add_user_words(added)
        expected = Segmenter(dict(names))
        expected.add_user_words(added)
        assert small.segment(text) == expected.segment(text), p.name
        assert small.frequencies(new) == expected.frequencies(new)
        assert not small.jieba_loaded, "the prepared tokenizer answered"
        assert whole.segment(text) == Segmenter(dict(names)).segment(text)
    small = Segmenter(dict(names))
    small.prepare(["数据库索引"])
    assert small.segment("飞轮效应与数据库") == whole.segment("飞轮效应与数据库") and small.jieba_loaded
