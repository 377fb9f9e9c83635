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
  const results = $("results"), preview = $("preview"), statusLine = $("status");

  let timer = 0, seq = 0, inflight = null, composing = false, previewSeq = 0, previewTimer = 0;
  let hits = [], selected = -1, terms = [];

  // -- state in the URL ------------------------------------------------------
  function readUrl() {
    const p = new URLSearchParams(location.search);
    q.value = p.get("q") || "";
    mode.value = ["hybrid", "fts", "vector"].includes(p.get("mode")) ? p.get("mode") : "";
    for (const [k, el] of Object.entries(filters)) el.value = p.get(k) || "";
    compare.checked = p.get("view") === "compare";
    wantedVault = p.get("vault") || "";
    if (Object.values(filters).some((el) => el.value)) $("filters").open = true;
  }

  function writeUrl() {
    const p = new URLSearchParams();
    if (q.value) p.set("q", q.value);
    if (mode.value) p.set("mode", mode.value);
    for (const [k, el] of Object.entries(filters)) if (el.value.trim()) p.set(k, el.value.trim());
    if (compare.checked) p.set("view", "compare");
    if (vaultBox.value) p.set("vault", vaultBox.value);
    const url = p.toString() ? `/?${p}` : "/";
    if (url !== location.pathname + location.search) history.replaceState(null, "", url);
  }

  // -- requests --------------------------------------------------------------
  let wantedVault = "";

  function withVault(p, vault) {
    const v = vault === undefined ? vaultBox.value : vault;
    if (v) p.set("vault", v);
    return p;
  }

  function params(extra) {
    // log=0: searches as you type are not what the query log is for (log_queries)
    const p = withVault(new URLSearchParams({ q: q.value, limit: String(LIMIT), explain: "1", log: "0", ...extra }));
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
    timer = setTimeout(run, DEBOUNCE_MS);
  }

  async function run() {
    writeUrl();
    const mine = ++seq;
    if (inflight) inflight.abort();
    inflight = new AbortController();
    const query = q.value;
    if (!query.trim()) {
      render(mine, query, null);
      return;
    }
    try {
      if (compare.checked) {
        const [kw, vec, fused] = await Promise.all([
          getJson("/search", params({ mode: "fts" }), inflight.signal),
          getJson("/search", params({ mode: "vector" }), inflight.signal).catch((e) => ({ error: e.message, results: [] })),
          getJson("/search", params(mode.value ? { mode: mode.value } : {}), inflight.signal),
        ]);
        if (mine === seq) renderCompare(query, kw, vec, fused);
      } else {
        const data = await getJson("/search", params(mode.value ? { mode: mode.value } : {}), inflight.signal);
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

  function highlighted(text, words) {
    const frag = document.createDocumentFragment();
    const usable = words.filter((w) => w && w.length > 0).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    if (!usable.length) {
      frag.append(text);
      return frag;
    }
    usable.sort((a, b) => b.length - a.length);
    const re = new RegExp(usable.join("|"), "giu");
    let last = 0;
    for (const m of text.matchAll(re)) {
      if (!m[0]) continue;
      frag.append(text.slice(last, m.index), el("mark", null, m[0]));
      last = m.index + m[0].length;
    }
    frag.append(text.slice(last));
    return frag;
  }

  function render(mine, query, data) {
    if (mine !== seq) return;            // an older query's answer: results for the last query only
    hits = data ? data.results : [];
    terms = data && data.explain ? data.explain.terms : query.split(/\s+/);
    selected = hits.length ? 0 : -1;
    results.dataset.query = query;
    const out = [];
    if (data) for (const w of data.warnings) out.push(el("p", "warning", w));
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

  function resultItem(r, i) {
    const li = el("li", "result");
    li.dataset.index = String(i);
    li.dataset.path = r.path;
    const head = el("div");
    head.append(el("span", "title", r.title || r.path), el("span", "where", `${r.path}:${r.start_line}-${r.end_line}`));
    li.append(head);
    if (r.heading) li.append(el("div", "heading", r.heading));
    const snippet = el("div", "snippet");
    snippet.append(highlighted(r.snippet || "", terms));
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

  function renderCompare(query, kw, vec, fused) {
    hits = fused.results;
    terms = fused.explain ? fused.explain.terms : [];
    selected = -1;
    results.dataset.query = query;
    const ranks = new Map((fused.explain ? fused.explain.ranks : []).map((r) => [r.path, r]));
    const column = (title, data, describe) => {
      const box = el("div");
      box.append(el("h2", null, title));
      if (data.error) box.append(el("p", "warning", data.error));
      const list = el("ol");
      data.results.forEach((r, i) => {
        const li = el("li", ranks.has(r.path) ? "same" : null);
        li.dataset.path = r.path;
        li.append(el("span", null, r.title || r.path), document.createElement("br"), el("span", "rank", describe(r, i)));
        list.append(li);
      });
      if (!data.results.length) box.append(el("p", "empty", "nothing"));
      box.append(list);
      return box;
    };
    const notes = fused.warnings.map((w) => el("p", "warning", w));
    const grid = el("div", "compare");
    grid.append(
      column("keyword (BM25)", kw, (r, i) => `#${i + 1} · bm25 ${r.scores.fts}`),
      column("vector (cosine)", vec, (r, i) => `#${i + 1} · cos ${r.scores.vector}`),
      column(`fused (${fused.mode})`, fused, (r) => {
        const x = ranks.get(r.path) || {};
        const kwRank = x.fts_rank ? `keyword #${x.fts_rank}` : "keyword –";
        const vecRank = x.vector_rank ? `vector #${x.vector_rank}` : "vector –";
        return `${kwRank} · ${vecRank} · ${r.match || ""}`;
      }),
    );
    results.replaceChildren(...notes, grid);
    closePreview();
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
        line.append(el("span", "no", String(no)), highlighted(text, terms));
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
      const s = await getJson("/status", withVault(new URLSearchParams()));
      if (s.vaults) fillVaults(s.vaults.map((v) => v.vault));
      const all = s.vaults || [s];
      const one = all.reduce((a, v) => ({
        notes: a.notes + v.notes, chunks: a.chunks + v.chunks, waiting_chunks: a.waiting_chunks + v.waiting_chunks,
        model: a.model || v.model, last_sync: !a.last_sync || (v.last_sync && v.last_sync.at > a.last_sync.at) ? v.last_sync : a.last_sync,
        server: { pending_changes: (a.server.pending_changes || 0) + ((v.server && v.server.pending_changes) || 0) },
      }), { notes: 0, chunks: 0, waiting_chunks: 0, model: null, last_sync: null, server: {} });
      const waiting = one.model ? `${one.waiting_chunks} waiting for vectors` : "keyword only";
      const when = one.last_sync ? new Date(one.last_sync.at * 1000).toLocaleTimeString() : "never";
      const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
      statusLine.textContent = `${plural(one.notes, "note")} · ${plural(one.chunks, "chunk")} · ${waiting} · last sync ${when}`;
      statusLine.dataset.waiting = String(one.waiting_chunks);
      if (one.waiting_chunks > 0 || (one.server && one.server.pending_changes > 0)) next = 2000;
    } catch (err) {
      statusLine.textContent = `status: ${err.message || err}`;
      next = 5000;
    }
    statusTimer = setTimeout(pollStatus, next);
  }

  function fillVaults(paths) {
    if (vaultBox.options.length > 1) return;
    for (const path of paths) {
      const o = document.createElement("option");
      o.value = path;
      o.textContent = path.split("/").filter(Boolean).pop() || path;
      vaultBox.append(o);
    }
    vaultBox.hidden = false;
    if (wantedVault) vaultBox.value = wantedVault;
    loadTags();
  }

  async function loadTags() {
    try {
      const data = await getJson("/tags", withVault(new URLSearchParams(), vaultBox.value || (vaultBox.options[1] && vaultBox.options[1].value) || ""));
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
  for (const node of [mode, compare]) node.addEventListener("change", () => { clearTimeout(timer); run(); });
  vaultBox.addEventListener("change", () => { clearTimeout(timer); loadTags(); pollStatus(); run(); });
  $("search").addEventListener("submit", (e) => { e.preventDefault(); clearTimeout(timer); run(); });

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
        run();
      }
      q.focus();
    }
  });

  readUrl();
  q.focus();
  if (q.value) run();
  pollStatus();
  loadTags();
})();
