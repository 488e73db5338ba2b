// The console: the retrieve API asked from a page, each answer's trace drawn. No build step, no dependency.
// State lives in the address's fragment (never sent to the server), so a view can be linked and reloaded:
//   #how=mode:agent_query&q=...&as_of=2026-12-01T10:00:00Z&n=10   an answer
//   #memory=<id>                                                   a memory, its provenance and chain
//   #review=1                                                      held decisions, undecided candidates, job queues
// A `token=` in the fragment is moved to this tab's session storage and taken out of the address.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "agent-memory-token";

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${token()}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await response.json().catch(() => null);
  if (!response.ok) {
    const message = json && json.error ? `${json.error.code}: ${json.error.message}` : response.statusText;
    throw new Error(`${response.status} ${message}`);
  }
  return json;
}

function fragment() {
  return new URLSearchParams(location.hash.slice(1));
}

function setFragment(params) {
  const next = `#${params.toString()}`;
  if (location.hash !== next) history.pushState(null, "", next);
  route();
}

function status(text) {
  $("status").textContent = text;
}

// ---- asking ----

function bar(label, value, max = 1, text) {
  const share = Math.max(0, Math.min(1, Math.abs(value) / max));
  const fill = el("span");
  fill.style.width = `${(share * 100).toFixed(1)}%`; // through the CSSOM: the page's policy refuses style attributes
  return [
    el("span", {}, label),
    el("div", { class: value < 0 ? "bar negative" : "bar", "data-feature": label }, fill),
    el("span", {}, text ?? value.toFixed(3)),
  ];
}

function explanationOf(explanation) {
  if (!explanation) return null;
  const rows = [];
  const branch = (name, evidence) =>
    evidence
      ? bar(`${name} #${evidence.rank}`, evidence.in_range, 1, `${evidence.score.toFixed(3)}`)
      : [el("span", {}, `${name}`), el("div", { class: "bar" }), el("span", {}, "not found")];
  rows.push(branch("vector", explanation.vector), branch("keyword", explanation.keyword));
  if (explanation.relevance !== undefined) {
    rows.push(bar("relevance", explanation.relevance));
    if (explanation.name_said > 0) rows.push(bar("name said", explanation.name_said));
    rows.push(bar("recency", explanation.recency), bar("confidence", explanation.confidence));
  }
  if (explanation.of_the_named_time !== undefined) {
    rows.push([el("span", {}, "named date"), el("span", {}), el("span", {}, explanation.of_the_named_time ? "of it" : "not of it")]);
  }
  if (explanation.contributions) {
    const contributions = Object.entries(explanation.contributions);
    const largest = Math.max(...contributions.map(([, v]) => Math.abs(v)), 1e-9);
    for (const [name, value] of contributions) rows.push(bar(name, value, largest));
  }
  return el("div", { class: "bars" }, rows, el("span", {}, `fused #${explanation.fused_rank}`));
}

function traceOf(result) {
  const trace = result.trace;
  const items = [];
  const add = (term, ...description) => items.push(el("dt", {}, term), el("dd", {}, ...description));
  if (trace) {
    const blend = trace.blend;
    add("blend", blend.kind.replaceAll("_", " "), blend.vector_weight !== undefined ? ` (cosine weighs ${blend.vector_weight.toFixed(2)})` : "");
    add("candidates", `${trace.candidates.vector} vector, ${trace.candidates.keyword} keyword, ${trace.candidates.fused} fused`);
    const left = Object.entries(trace.excluded).filter(([, n]) => n > 0).map(([why, n]) => `${n} ${why.replaceAll("_", " ")}`);
    add("left out", left.length ? left.join(", ") : "nothing");
    const t = trace.timings_ms;
    add("timings", `context ${t.context_ms.toFixed(1)} ms, branches ${t.branches_ms.toFixed(1)} ms, rank ${t.rank_ms.toFixed(1)} ms`);
  }
  if (result.taxonomy) add("taxonomy", result.taxonomy.join(", ") || "none", result.fallback_used ? " (fallback: every candidate)" : "");
  if (result.degraded) add("degraded", result.degraded_reasons.join(", "));
  if (result.record) add("record", `${result.record.embedding_model}, ranking ${result.record.ranking_digest}, v${result.record.service_version}`);
  return el("dl", {}, items);
}

// A button that opens a memory's view.
function openButton(id, label = id) {
  return el("button", { class: "open", type: "button", onclick: () => setFragment(new URLSearchParams({ memory: id })) }, label);
}

function memoryLine(memory, score, extra) {
  const badges = [el("span", { class: "badge" }, memory.memory_type), el("span", { class: "badge" }, memory.scope)];
  if (memory.provenance.trust_level === "untrusted") badges.push(el("span", { class: "badge warn" }, "untrusted"));
  if (memory.status !== "active") badges.push(el("span", { class: "badge warn" }, memory.status));
  return el(
    "li",
    { class: "result", "data-memory": memory.id },
    el("div", { class: "content" }, memory.content),
    el(
      "div",
      { class: "meta" },
      badges,
      `score ${score.toFixed(3)} · confidence ${memory.confidence.toFixed(2)} · written ${memory.created_at} · `,
      openButton(memory.id, "open"),
    ),
    extra,
  );
}

async function ask(params) {
  const [kind, name] = (params.get("how") || "mode:agent_query").split(":");
  const query = params.get("q") || "";
  const asOf = params.get("as_of");
  const max = Number(params.get("n") || 10);
  $("how").value = `${kind}:${name}`;
  $("query").value = query;
  $("as-of").value = asOf ? asOf.replace("Z", "").slice(0, 19) : "";
  $("max-results").value = max;
  $("answer").hidden = false;
  $("memory").hidden = true;
  $("review").hidden = true;
  status("asking…");
  let results;
  if (kind === "mode") {
    const body = { mode: name, query, max_results: max, explain: true };
    if (name === "passive") Object.assign(body, { session_id: "console", turn: Date.now() % 1000000 });
    if (asOf) body.as_of = asOf;
    const result = await call("POST", "/v1/retrieve", body);
    // Modes answer most relevant last (for injection); shown best first.
    results = [...result.memories].reverse().map((m) => memoryLine(m.memory, m.score, explanationOf(m.explanation)));
    $("trace").replaceChildren(traceOf(result));
    $("profiles").replaceChildren(...result.entity_profiles.map((p) => el("p", { class: "result" }, el("strong", {}, "profile: "), p.profile.content)));
    $("answer-summary").textContent = `${result.memories.length} memories, ${name}${asOf ? `, as of ${asOf}` : ""}`;
  } else {
    const filters = asOf ? { as_of: asOf } : {};
    const result = await call("POST", "/v1/search", { query, strategy: name, max_results: max, filters, explain: true });
    const branches = (h) => {
      const e = h.explanation;
      if (!e) return el("div", { class: "meta" }, `match: ${h.match}${h.hops ? `, ${h.hops} entity hops` : ""}`);
      return explanationOf({ vector: e.vector, keyword: e.keyword, fused_rank: e.fused_rank });
    };
    results = result.hits.map((h) => memoryLine(h.memory, h.score, branches(h)));
    $("trace").replaceChildren(traceOf(result));
    $("profiles").replaceChildren();
    $("answer-summary").textContent = `${result.hits.length} hits, ${name} search${asOf ? `, as of ${asOf}` : ""}`;
  }
  $("results").replaceChildren(...results);
  status("");
}

// ---- a memory ----

async function openMemory(id) {
  $("answer").hidden = true;
  $("review").hidden = true;
  $("memory").hidden = false;
  $("memory-id").textContent = id;
  status("reading…");
  const path = `/v1/memories/${encodeURIComponent(id)}`;
  const [memory, chain, profiles] = await Promise.all([call("GET", path), call("GET", `${path}/chain`), call("GET", `${path}/profiles`)]);
  const facts = [];
  const add = (term, value) => value !== null && value !== undefined && value !== "" && facts.push(el("dt", {}, term), el("dd", {}, value));
  add("content", memory.content);
  add("status", memory.status);
  add("type, scope", `${memory.memory_type}, ${memory.scope}`);
  add("confidence", memory.confidence.toFixed(2));
  add("source", `${memory.provenance.source_kind}${memory.provenance.source_ref ? ` (${memory.provenance.source_ref})` : ""}, ${memory.provenance.trust_level}`);
  add("written", memory.created_at);
  add("expires", memory.expires_at);
  if (memory.file_path) {
    const anchor = memory.anchor ? ` ${memory.anchor.symbol}, lines ${memory.anchor.start_line}-${memory.anchor.end_line}` : "";
    add("file", `${memory.repository ? `${memory.repository}: ` : ""}${memory.file_path}${anchor}`);
    const fresh = memory.file_missing_since
      ? `missing since ${memory.file_missing_since}`
      : memory.file_changed_at
        ? `changed since ${memory.file_changed_at}`
        : `as written (checked ${memory.file_last_scanned_at || "not yet"})`;
    add("file freshness", fresh);
  }
  $("memory-body").replaceChildren(el("dl", {}, facts));
  $("chain").replaceChildren(
    ...chain.chain.map((m) =>
      el(
        "li",
        { class: m.id === id ? "current" : "", "data-memory": m.id },
        el("strong", {}, m.status), ` ${m.created_at}`,
        m.superseded_at ? ` → superseded ${m.superseded_at}` : "",
        el("div", {}, m.content),
      ),
    ),
  );
  $("memory-profiles").replaceChildren(
    ...(profiles.profiles.length
      ? profiles.profiles.map((p) => el("p", { class: "result" }, el("strong", {}, `${p.name} (${p.entity_type}): `), p.profile.content))
      : [el("p", {}, "none")]),
  );
  status("");
}

// ---- review ----

async function openReview() {
  for (const section of ["answer", "memory"]) $(section).hidden = true;
  $("review").hidden = false;
  status("reading…");
  // Each part needs its own scope; a token may have either or both.
  const [review, queues] = await Promise.allSettled([call("GET", "/v1/review"), call("GET", "/v1/queues")]);
  const refused = (part) => (part.status === "rejected" ? String(part.reason.message || part.reason) : "");
  $("review-note").textContent = refused(review);
  const { held = [], undecided = [] } = review.value || {};
  $("held").tBodies[0].replaceChildren(
    ...held.map((h) =>
      el("tr", {}, el("td", {}, h.job), el("td", {}, h.action), el("td", {}, openButton(h.memory_id)),
        el("td", {}, openButton(h.other_memory_id)), el("td", {}, h.reason)),
    ),
  );
  $("undecided").replaceChildren(...undecided.map((u) => el("li", {}, openButton(u.id), ` waiting since ${u.since}`)));
  const { queues: depths = [], not_configured: missing = [] } = queues.value || {};
  $("queues-note").textContent =
    refused(queues) || (missing.length ? `not configured on this instance: ${missing.join(", ")}` : "");
  $("queues").tBodies[0].replaceChildren(
    ...depths.map((q) =>
      el("tr", { class: q.dead ? "dead" : "" }, el("td", {}, q.job), el("td", {}, q.waiting), el("td", {}, q.in_flight),
        el("td", {}, q.dead === null ? "no dead-letter queue" : q.dead)),
    ),
  );
  if (review.status === "rejected" && queues.status === "rejected") throw review.reason;
  status(held.length || undecided.length || depths.some((q) => q.dead) ? "" : "nothing waits on review");
}

// ---- wiring ----

async function route() {
  const params = fragment();
  if (params.has("token")) {
    sessionStorage.setItem(TOKEN_KEY, params.get("token"));
    params.delete("token");
    history.replaceState(null, "", `#${params.toString()}`);
  }
  $("whoami").textContent = token() ? "token set" : "no token";
  try {
    if (params.has("memory")) await openMemory(params.get("memory"));
    else if (params.has("review")) await openReview();
    else if (params.has("q")) await ask(params);
  } catch (error) {
    status(String(error.message || error));
  }
  document.body.dataset.ready = "true";
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  route();
});

$("ask").addEventListener("submit", (event) => {
  event.preventDefault();
  const params = new URLSearchParams({ how: $("how").value, q: $("query").value, n: $("max-results").value });
  if ($("as-of").value) params.set("as_of", `${$("as-of").value}${$("as-of").value.length === 16 ? ":00" : ""}Z`);
  setFragment(params);
});

window.addEventListener("popstate", route);
route();
