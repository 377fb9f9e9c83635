// vault-search's search page: served by `vault-search serve` at /, reads the
// JSON API of the same server (GET only, with the X-Vault-Search-Client
// header), nothing from anywhere else.
"use strict";

(function () {
  const DEBOUNCE_MS = 180;
  const CONTEXT_LINES = 8;       // preview: lines shown around a hit
  const LIMIT = 20;
  const $ = (id) => document.getElementById(id);
  const q = $("q"), mode = $("mode"), compare = $("compare"), vaultBox = $("vault");
  const filters = { tag: $("tag"), path: $("path"), after: $("after"), before: $("before") };
  const results = $("results"), preview = $("preview"), statusLine = $("status"), notice = $("notice");

  let timer = 0, seq = 0, inflight = null, composing = false, previewSeq = 0, previewTimer = 0;
  let hits = [], selected = -1, terms = new Map();   // terms: the words to mark, by vault (termsOf)
  // The vault searched: its short name as the server names it ("" : all
  // vaults, or the only one). ``vaults``: each served vault ({name, path,
  // model}) once the first status has come, when there are several.
  let vault = "", vaults = [];
  // Every vault served ({name, path}), one or several, once a status has
  // said; empty while none has (or the first status could not be read).
  let served = [];
  let vaultsKnown;
  // Settled by the first status, read or not: nothing waits on it for ever.
  const knowVaults = new Promise((ok) => { vaultsKnown = ok; });

  // -- state in the URL ------------------------------------------------------
  // Each search a user settles on is a history entry (back and forward walk
  // them, reload shows the same one); the keystrokes of one query replace
  // their entry instead of adding one each.
  const SETTLE_MS = 1500;
  let lastUrlWrite = 0;

  function readUrl() {
    const p = new URLSearchParams(location.search);
    q.value = p.get("q") || "";
    mode.value = ["hybrid", "fts", "vector"].includes(p.get("mode")) ? p.get("mode") : "";
    for (const [k, el] of Object.entries(filters)) el.value = p.get(k) || "";
    compare.checked = p.get("view") === "compare";
    vault = vaultName(p.get("vault") || "");
    showVault();
    if (Object.values(filters).some((el) => el.value)) $("filters").open = true;
  }

  function writeUrl(push) {
    const p = new URLSearchParams();
    if (q.value) p.set("q", q.value);
    if (mode.value) p.set("mode", mode.value);
    for (const [k, el] of Object.entries(filters)) if (el.value.trim()) p.set(k, el.value.trim());
    if (compare.checked) p.set("view", "compare");
    if (vault) p.set("vault", vault);
    const url = p.toString() ? `/?${p}` : "/";
    if (url === location.pathname + location.search) return;
    if (push) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
    lastUrlWrite = Date.now();
  }

  function vaultName(value) {
    // An address from before vaults had names in it (a folder): the vault's name.
    const known = served.find((v) => v.name === value || v.path === value);
    return known ? known.name : value;
  }

  function checkVault() {
    // An address naming a vault this server does not serve: say so, and search
    // every vault (or the only one) rather than answer each search with an error.
    if (!vault || !served.length || served.some((v) => v.name === vault)) return;
    notice.textContent = `No vault named “${vault}”; searching ${served.length > 1 ? "all vaults" : served[0].name}.`;
    notice.hidden = false;
    vault = "";
    writeUrl(false);
    showVault();
  }

  function showVault() {
    if (vaults.length) vaultBox.value = vaults.some((v) => v.name === vault) ? vault : "";
  }

  // -- requests --------------------------------------------------------------
  function withVault(p, name) {
    const v = name === undefined ? vault : name;
    if (v) p.set("vault", v);
    return p;
  }

  function params(extra, name) {
    // log=0: searches as you type are not what the query log is for (log_queries);
    // explain=1: the words each list matched, which the page highlights.
    const p = withVault(new URLSearchParams({ q: q.value, limit: String(LIMIT), explain: "1", log: "0", ...extra }),
                        name);
    for (const [k, el] of Object.entries(filters)) if (el.value.trim()) p.set(k, el.value.trim());
    return p;
  }

  async function getJson(path, p, signal) {
    // The header says the request is this page's: another site's page cannot
    // send it (a preflight this server refuses), and the server lets only
    // such requests write the query log.
    const headers = { Accept: "application/json", "X-Vault-Search-Client": "page" };
    const resp = await fetch(`${path}?${p}`, { signal, headers });
    const data = await resp.json();
    if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
    return data;
  }

  function schedule() {
    if (composing) return;   // a half-typed word of an input method is no query yet
    clearTimeout(timer);
    timer = setTimeout(() => run("type"), DEBOUNCE_MS);
  }

  // how: "type" (a query being typed: a new history entry once the last one
  // has settled), "control" (a menu, a box, Enter: a new entry), "load" and
  // "back" (the address is already this state).
  async function run(how) {
    if (how === "type") writeUrl(Date.now() - lastUrlWrite > SETTLE_MS);
    else if (how === "control") writeUrl(true);
    else writeUrl(false);
    const mine = ++seq;
    if (inflight) inflight.abort();
    inflight = new AbortController();
    const query = q.value;
    if (!query.trim()) {
      render(mine, query, null);
      return;
    }
    const extra = mode.value ? { mode: mode.value } : {};
    try {
      if (compare.checked) {
        // Side by side is each vault's own: its lists, its weights, its model's
        // cosines. With several vaults and none chosen, one panel per vault.
        const signal = inflight.signal;
        const several = await knowVaults;   // (and an old address's folder made a name)
        if (mine !== seq) return;
        checkVault();
        const names = vault ? [vault] : several.map((v) => v.name);
        const answers = await Promise.all((names.length ? names : [""]).map((name) =>
          getJson("/search", params(extra, name), signal).catch((e) => {
            if (e.name === "AbortError") throw e;
            return { error: e.message, results: [], warnings: [] };
          })));
        if (mine === seq) renderCompare(query, names, answers);
      } else {
        const signal = inflight.signal;
        if (vault) {   // the address named a vault: known to this server?
          await knowVaults;
          if (mine !== seq) return;
          checkVault();
        }
        const data = await getJson("/search", params(extra), signal);
        render(mine, query, data);
      }
    } catch (err) {
      if (err.name === "AbortError" || mine !== seq) return;
      results.replaceChildren(el("p", "warning", String(err.message || err)));
      results.dataset.query = query;
    }
  }

  // -- rendering (text nodes only: a note's text is never HTML here) --------
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  // -- highlighting: the words the server matched ----------------------------
  // Function words of one or two letters the server searches only when a
  // query has nothing else ("how to"); marked, they would light up most lines.
  const SHORT_FUNCTION_WORDS = new Set(
    "a i s t d m an am as at be by do he if in is it me my of on or so to up we ll re ve".split(" "));
  // Scripts written without spaces: a word is found inside a run of them.
  const SPACELESS = new RegExp("[\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Thai}"
                               + "\\p{Script=Lao}\\p{Script=Khmer}\\p{Script=Myanmar}]", "u");
  const WORD_CHAR = "[\\p{Script=Latin}\\p{Script=Greek}\\p{Script=Cyrillic}\\p{N}]";
  // Other endings of an English word, which the index's stemmer merges with it
  // (statuses, sorting, added); a consonant may double before them (recurring).
  const ENDINGS = "(?:[a-z]?(?:s|es|ed|d|ing|er|ers|ly|ies|ied|y|e|ion|ions))?";

  function fold(text) {
    // Case, width and accents folded as the index folds them, with each folded
    // unit's place in the raw text.
    let out = "";
    const from = [], to = [];
    for (let i = 0; i < text.length;) {
      const ch = String.fromCodePoint(text.codePointAt(i));
      const f = ch.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase() || ch;
      out += f;
      for (let k = 0; k < f.length; k++) { from.push(i); to.push(i + ch.length); }
      i += ch.length;
    }
    return { text: out, from, to };
  }

  function quoted(match) {
    // The words of an FTS5 MATCH expression: each is a "quoted" string.
    return match ? [...match.matchAll(/"((?:[^"]|"")*)"/g)].map((m) => m[1].replace(/""/g, '"')) : [];
  }

  function termsOf(data) {
    // Each vault's own words (it segmented and translated the query itself),
    // by its name; "" : the answer's, all vaults' together.
    const out = new Map([["", matchedTerms([data])]]);
    const each = data && data.explain && data.explain.vaults;
    if (each) for (const [name, e] of Object.entries(each)) out.set(name, matchedTerms([{ explain: e }]));
    return out;
  }

  function matchedTerms(answers) {
    // The query's words as the server segmented and searched them, and the
    // words a question in the other language was translated to.
    const words = [];
    for (const data of answers) {
      const e = data && data.explain;
      if (!e) continue;
      words.push(...e.terms, ...quoted(e.translated_match));
    }
    return [...new Set(words.map((w) => fold(w).text.trim()))]
      .filter((w) => w && !SHORT_FUNCTION_WORDS.has(w));
  }

  function stems(word) {
    // As snippet.py: shorter forms that cover what a stemmer merges.
    const out = new Set([word]);
    for (const suffix of ["ies", "ing", "ed", "es", "ly", "er", "s"]) {
      if (word.endsWith(suffix) && word.length - suffix.length >= 3) {
        const stem = word.slice(0, -suffix.length);
        out.add(stem);
        if (stem.length > 3 && stem.at(-1) === stem.at(-2)) out.add(stem.slice(0, -1));
        if (suffix === "ies") out.add(stem + "y");
        break;
      }
    }
    if (word.length >= 5 && "ey".includes(word.at(-1))) out.add(word.slice(0, -1));
    return out;
  }

  function termPattern(words) {
    const escape = (w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const alts = [];
    for (const word of words) {
      if (SPACELESS.test(word)) alts.push(escape(word));
      else if (/^[a-z]+$/.test(word)) {
        for (const stem of stems(word)) alts.push(`(?<!${WORD_CHAR})${escape(stem)}${ENDINGS}(?!${WORD_CHAR})`);
      } else alts.push(`(?<!${WORD_CHAR})${escape(word)}(?!${WORD_CHAR})`);
    }
    if (!alts.length) return null;
    alts.sort((a, b) => b.length - a.length);
    return new RegExp(alts.join("|"), "gu");
  }

  const patterns = new WeakMap();   // words -> their pattern, built once per answer

  function highlighted(text, words) {
    const frag = document.createDocumentFragment();
    if (!patterns.has(words)) patterns.set(words, termPattern(words));
    const pattern = patterns.get(words);
    if (!pattern) {
      frag.append(text);
      return frag;
    }
    const folded = fold(text);
    let last = 0;
    for (const m of folded.text.matchAll(pattern)) {
      if (!m[0]) continue;
      const start = folded.from[m.index], end = folded.to[m.index + m[0].length - 1];
      if (start < last) continue;
      frag.append(text.slice(last, start), el("mark", null, text.slice(start, end)));
      last = end;
    }
    frag.append(text.slice(last));
    return frag;
  }

  function render(mine, query, data) {
    if (mine !== seq) return;            // an older query's answer: results for the last query only
    hits = data ? data.results : [];
    terms = termsOf(data);
    selected = hits.length ? 0 : -1;
    results.dataset.query = query;
    const out = [];
    if (data) for (const w of data.warnings) out.push(el("p", "warning", w));
    // A word no note holds, searched as the one it begins or nearly is: say so.
    const corrected = data && data.corrections ? Object.entries(data.corrections) : [];
    if (corrected.length) out.push(el("p", "hint corrections", "Searched " + corrected.map(([w, to]) => `${w} as ${to}`).join(", ")));
    if (!data) out.push(el("p", "hint", "Type to search. ↑ ↓ to move, Enter to preview, Shift+Enter to open in Obsidian, Esc to clear."));
    else if (!hits.length) out.push(el("p", "empty", `No results for “${query}” (${data.mode}).`));
    else {
      const list = el("ol", "results");
      hits.forEach((r, i) => list.append(resultItem(r, i)));
      out.push(list, el("p", "hint", `${hits.length} result${hits.length === 1 ? "" : "s"} (${data.mode}, ${Math.round(data.took_ms)} ms)`));
    }
    results.replaceChildren(...out);
    mark();
    closePreview();   // a new list: the old preview's note may not be in it
  }

  function wordsOf(r) {
    return (r.vault && terms.get(r.vault)) || terms.get("") || [];
  }

  function resultItem(r, i) {
    const li = el("li", "result");
    li.dataset.index = String(i);
    li.dataset.path = r.path;
    const head = el("div");
    head.append(el("span", "title", r.title || r.path), el("span", "where", `${r.path}:${r.start_line}-${r.end_line}`));
    li.append(head);
    if (r.heading) li.append(el("div", "heading", r.heading));
    const snippet = el("div", "snippet");
    snippet.append(highlighted(r.snippet || "", wordsOf(r)));
    li.append(snippet);
    const meta = el("div", "meta");
    if (r.match) meta.append(el("span", `match-${r.match}`, r.related ? "related" : `match: ${r.match}`));
    if (r.relevance !== null && r.relevance !== undefined) meta.append(el("span", null, `relevance ${r.relevance.toFixed(2)}`));
    if (r.date) meta.append(el("span", null, r.date.replace("T", " ")));
    if (r.stale) meta.append(el("span", "stale", "stale"));
    if (r.vault) meta.append(el("span", "chip vault", r.vault));
    for (const t of r.tags.slice(0, 8)) meta.append(el("span", "chip", `#${t}`));
    const open = el("a", null, "open in Obsidian");
    open.href = r.uri;
    open.addEventListener("click", (e) => e.stopPropagation());
    meta.append(open);
    li.append(meta);
    li.addEventListener("click", () => { selected = i; mark(); openPreview(); });
    return li;
  }

  // Side by side: each list that voted in the fusion, as the server's explain
  // names it (search --explain), and the fused order that cites them.
  const LISTS = {
    fts: ["keyword", "keyword (BM25)", "bm25"], translated: ["translated", "translated (BM25)", "bm25"],
    vector: ["vector", "vector (cosine)", "cos"],
    latent: ["latent", "latent terms", "score"], title: ["title", "title (name alike)", "name alike"],
  };
  const listName = (name, i) => (LISTS[name] || [name, name, "score"])[i];

  function renderCompare(query, names, answers) {
    hits = [];
    selected = -1;
    terms = new Map([["", matchedTerms(answers)]]);
    results.dataset.query = query;
    const panels = answers.map((data, i) => comparePanel(data, names[i], vaults.length > 1));
    results.replaceChildren(...panels);
    closePreview();
  }

  function comparePanel(data, name, several) {
    const panel = el("section", "compare-vault");
    if (name) panel.dataset.vault = name;
    if (several) {
      const info = vaults.find((v) => v.name === name);
      panel.append(el("h2", "vault-name", info && info.model ? `${name} · ${info.model}` : name));
    }
    if (data.error) {
      panel.append(el("p", "warning", data.error));
      return panel;
    }
    for (const w of data.warnings) panel.append(el("p", "warning", w));
    if (!data.results.length) {
      panel.append(el("p", "empty", `No results (${data.mode}).`));
      return panel;
    }
    const e = data.explain || { weights: {}, ranks: [] };
    const rows = data.results.map((r, i) => ({
      r, place: i + 1, x: e.ranks.find((x) => x.path === r.path) || { ranks: {}, scores: {} },
    }));
    const lists = [...Object.keys(e.weights)];
    for (const { x } of rows) for (const l of Object.keys(x.ranks)) if (!lists.includes(l)) lists.push(l);
    const grid = el("div", "compare");
    for (const list of lists) grid.append(listColumn(list, e, rows));
    const fused = column(`fused (${data.mode})`, data.mode === "hybrid" && e.rrf_k ? `RRF k=${e.rrf_k}` : null);
    fused.dataset.list = "fused";
    const ol = el("ol");
    for (const { r, x, place } of rows) {
      const cited = lists.map((l) => (x.ranks[l] ? `${listName(l, 0)} #${x.ranks[l]}` : `${listName(l, 0)} –`));
      ol.append(entry(r, [`#${place}`, ...cited, r.match && `match ${r.match}`].filter(Boolean).join(" · ")));
    }
    fused.append(ol);
    grid.append(fused);
    panel.append(grid);
    return panel;
  }

  function column(title, detail) {
    const box = el("div");
    box.append(el("h3", null, title));
    if (detail) box.append(el("p", "list-detail", detail));
    return box;
  }

  function entry(r, line) {
    const li = el("li");
    li.dataset.path = r.path;
    li.append(el("span", null, r.title || r.path), document.createElement("br"), el("span", "rank", line));
    return li;
  }

  function listColumn(list, e, rows) {
    // The fused notes this list ranked, in its own order: its rank among all it
    // found (a gap is a note of its own that did not reach the fused list).
    const weight = e.weights[list];
    const box = column(listName(list, 1), weight === undefined ? null
      : weight === 0 ? "weight 0: did not count" : `weight ${weight}`);
    box.dataset.list = list;
    if (list === "translated" && e.translated_match) {
      box.append(el("p", "list-detail", `as ${quoted(e.translated_match).join(" ")}`));
    }
    const mine = rows.filter(({ x }) => x.ranks[list]).sort((a, b) => a.x.ranks[list] - b.x.ranks[list]);
    const ol = el("ol");
    for (const { r, x, place } of mine) {
      const score = x.scores[list] === undefined ? "" : ` · ${listName(list, 2)} ${x.scores[list]}`;
      ol.append(entry(r, `#${x.ranks[list]}${score} · fused #${place}`));
    }
    box.append(mine.length ? ol : el("p", "empty", "none of the fused notes"));
    return box;
  }

  function mark() {
    results.querySelectorAll(".result").forEach((node) => {
      node.classList.toggle("selected", Number(node.dataset.index) === selected);
    });
    const node = results.querySelector(".result.selected");
    if (node) node.scrollIntoView({ block: "nearest" });
  }

  // -- preview ---------------------------------------------------------------
  async function openPreview() {
    const r = hits[selected];
    if (!r) return;
    const mine = ++previewSeq;   // only the last preview asked for is shown
    const start = Math.max(1, r.start_line - CONTEXT_LINES);
    const p = withVault(new URLSearchParams({ path: r.path, start: String(start), end: String(r.end_line + CONTEXT_LINES) }),
                        r.vault || undefined);
    try {
      const note = await getJson("/get", p);
      if (mine !== previewSeq) return;
      const pre = $("preview-text");
      const lines = note.text.split("\n").map((text, i) => {
        const no = note.start_line + i;
        const line = el("span", no >= r.start_line && no <= r.end_line ? "line hit" : "line");
        line.append(el("span", "no", String(no)), highlighted(text, wordsOf(r)));
        return line;
      });
      pre.replaceChildren(...lines);
      $("preview-title").textContent = `${note.path}:${note.start_line}-${note.end_line} of ${note.total_lines}`;
      $("preview-open").href = r.uri;
      preview.hidden = false;
      preview.dataset.path = note.path;
      const hit = pre.querySelector(".line.hit");   // scroll the pane only, never the page
      if (hit) preview.scrollTop = Math.max(0, hit.offsetTop - preview.clientHeight / 3);
    } catch (err) {
      if (mine !== previewSeq) return;
      $("preview-text").textContent = String(err.message || err);
      preview.hidden = false;
    }
  }

  function closePreview() {
    previewSeq++;   // an answer still on its way is dropped
    clearTimeout(previewTimer);
    preview.hidden = true;
    delete preview.dataset.path;
  }

  // -- status ----------------------------------------------------------------
  let statusTimer = 0;

  async function pollStatus() {
    clearTimeout(statusTimer);   // one poll at a time, also when the vault changes
    let next = 15000;
    try {
      // Every vault's status (the menu lists them), the line the chosen one's.
      const s = await getJson("/status", new URLSearchParams());
      if (!served.length) served = (s.vaults || [s]).map((v) => ({ name: v.vault_name || v.vault, path: v.vault }));
      if (s.vaults) fillVaults(s.vaults);
      else knowOne();
      const all = s.vaults ? s.vaults.filter((v) => !vault || v.vault_name === vault) : [s];
      const one = all.reduce((a, v) => ({
        notes: a.notes + v.notes, chunks: a.chunks + v.chunks, waiting_chunks: a.waiting_chunks + v.waiting_chunks,
        embedding_now: a.embedding_now || Boolean(v.embedding_now),
        model: a.model || v.model, last_sync: !a.last_sync || (v.last_sync && v.last_sync.at > a.last_sync.at) ? v.last_sync : a.last_sync,
        server: { pending_changes: (a.server.pending_changes || 0) + ((v.server && v.server.pending_changes) || 0) },
      }), { notes: 0, chunks: 0, waiting_chunks: 0, embedding_now: false, model: null, last_sync: null, server: {} });
      // The count `status` and a search's warning tell (one count, issue 37).
      const embedding = one.embedding_now ? ` (being embedded now: ${one.chunks - one.waiting_chunks} so far)` : "";
      const waiting = one.model ? `${one.waiting_chunks} waiting for vectors${embedding}` : "keyword only";
      const when = one.last_sync ? new Date(one.last_sync.at * 1000).toLocaleTimeString() : "never";
      const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
      statusLine.textContent = `${plural(one.notes, "note")} · ${plural(one.chunks, "chunk")} · ${waiting} · last sync ${when}`;
      statusLine.dataset.waiting = String(one.waiting_chunks);
      if (one.waiting_chunks > 0 || (one.server && one.server.pending_changes > 0)) next = 2000;
    } catch (err) {
      // Searching needs no status: say it could not be read, and let nothing wait for it.
      statusLine.textContent = `status could not be read (${err.message || err}); searching still works`;
      statusLine.dataset.failed = "1";
      vaultsKnown([]);
      next = 5000;
    }
    statusTimer = setTimeout(pollStatus, next);
  }

  function knowOne() {
    delete statusLine.dataset.failed;
    const named = vaultName(vault);
    if (named !== vault) {   // an old address named the vault by its folder
      vault = named;
      writeUrl(false);
    }
    vaultsKnown([]);
  }

  function fillVaults(several) {
    delete statusLine.dataset.failed;
    if (vaults.length) return;
    vaults = several.map((v) => ({ name: v.vault_name || v.vault, path: v.vault, model: v.model }));
    for (const v of vaults) {
      const o = document.createElement("option");
      o.value = v.name;
      o.textContent = v.name;
      o.title = v.path;
      vaultBox.append(o);
    }
    vaultBox.hidden = false;
    const named = vaultName(vault);
    if (named !== vault) {   // an old address named the vault by its folder
      vault = named;
      writeUrl(false);
    }
    showVault();
    vaultsKnown(vaults);
  }

  async function loadTags() {
    try {
      const data = await getJson("/tags", withVault(new URLSearchParams(), vault || (vaults[0] && vaults[0].name) || ""));
      $("tags").replaceChildren(...data.tags.slice(0, 200).map((t) => {
        const o = document.createElement("option");
        o.value = t.tag;
        return o;
      }));
    } catch (err) { /* the datalist is a convenience */ }
  }

  // -- events ----------------------------------------------------------------
  // An input method's half-typed word (pinyin) is no query yet, in any text box.
  for (const node of [q, ...Object.values(filters)]) {
    node.addEventListener("compositionstart", () => { composing = true; clearTimeout(timer); });
    node.addEventListener("compositionend", () => { composing = false; schedule(); });
    node.addEventListener("input", (e) => { if (!e.isComposing) schedule(); });
  }
  for (const node of [mode, compare]) node.addEventListener("change", () => { clearTimeout(timer); run("control"); });
  vaultBox.addEventListener("change", () => {
    clearTimeout(timer);
    notice.hidden = true;
    vault = vaultBox.value;
    loadTags();
    pollStatus();
    run("control");
  });
  $("search").addEventListener("submit", (e) => { e.preventDefault(); clearTimeout(timer); run("control"); });
  // Back and forward: the entry's search, its vault's status and tags.
  window.addEventListener("popstate", () => {
    const before = vault;
    clearTimeout(timer);
    readUrl();
    if (vault !== before) { loadTags(); pollStatus(); }
    run("back");
  });

  document.addEventListener("keydown", (e) => {
    if (e.isComposing || composing) return;
    const at = document.activeElement;
    if (at && at !== q && at !== document.body && at.tagName !== "A") {
      // Another control has the keys: a filter box, the mode menu. Esc empties a filter box only.
      if (e.key === "Escape" && Object.values(filters).includes(at) && at.value) {
        e.preventDefault();
        at.value = "";
        schedule();
      }
      return;
    }
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      if (!hits.length || compare.checked) return;
      e.preventDefault();
      selected = Math.max(0, Math.min(hits.length - 1, selected + (e.key === "ArrowDown" ? 1 : -1)));
      mark();
      if (!preview.hidden) {
        clearTimeout(previewTimer);   // holding an arrow asks for the last note only
        previewTimer = setTimeout(openPreview, 120);
      }
    } else if (e.key === "Enter" && at !== document.body && at && at.tagName === "A") {
      return;   // a focused link opens itself
    } else if (e.key === "Enter") {
      if (hits.length && selected >= 0 && !compare.checked) {
        e.preventDefault();
        if (e.shiftKey || e.ctrlKey || e.metaKey) location.href = hits[selected].uri;   // open in Obsidian
        else openPreview();
      }
    } else if (e.key === "Escape") {
      e.preventDefault();
      if (!preview.hidden) closePreview();
      else {
        q.value = "";
        clearTimeout(timer);
        run("type");
      }
      q.focus();
    }
  });

  readUrl();
  q.focus();
  if (q.value) run("load");
  pollStatus();
  knowVaults.then(loadTags);   // with several vaults, the first one's tags while none is chosen
})();
