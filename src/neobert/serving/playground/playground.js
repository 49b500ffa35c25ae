// The neobert playground: plain JavaScript over the service's public API (docs/serving.md, "The playground").
// Nothing is stored: the API key lives in this page's memory only. Nothing is fetched from another origin.
"use strict";

const state = { key: null, info: null, models: [], model: null };

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const STATUS_WORDS = {
  400: "bad request", 401: "unauthorized", 404: "not found", 405: "method not allowed",
  413: "request too large", 422: "invalid request", 500: "server error", 503: "service unavailable",
};

// One call of the API: JSON in and out, the key as a bearer token, the picked model where several are served.
async function api(path, body, signal) {
  const headers = { Accept: "application/json" };
  if (state.key) headers.Authorization = "Bearer " + state.key;
  const init = { method: body === undefined ? "GET" : "POST", headers, signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(state.models.length > 1 ? { ...body, model: state.model } : body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try {
    data = JSON.parse(text);
  } catch (err) {
    data = null;
  }
  if (!response.ok) {
    const message = (data && data.error && data.error.message) || text || response.statusText;
    throw new ApiError(response.status, message);
  }
  return data;
}

// The request limits a 413 may be about (/info's limits, by the names of neobert serve's options).
const REQUEST_LIMITS = ["max_texts", "max_chars", "max_body_bytes", "max_answer_bytes"];

function describeError(err) {
  if (err instanceof ApiError) {
    const words = STATUS_WORDS[err.status] || (err.status >= 500 ? "server error" : "error");
    let text = `HTTP ${err.status} (${words}): ${err.message}`;
    if (err.status === 413 && state.info && state.info.limits) {
      const limits = REQUEST_LIMITS.filter((name) => name in state.info.limits)
        .map((name) => `${name} ${state.info.limits[name].toLocaleString("en-US")}`);
      text += ` [this service's limits: ${limits.join(", ")}]`;
    }
    return text;
  }
  return `The call failed: ${err.message}`;
}

// --- small DOM helpers ---------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

function lines(textarea) {
  return textarea.value.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
}

function short(text, n = 40) {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

// A number to `digits` decimals; one too small to show so (a tiny probability) in exponent notation.
function fixed(value, digits) {
  const v = Number(value);
  return v !== 0 && Math.abs(v) < 10 ** -digits ? v.toExponential(2) : v.toFixed(digits);
}

// A number shown rounded, its full value in data-value (what the API answered, or what the page computed).
function number(tag, value, digits, cls) {
  return el(tag, { class: cls || "num", "data-value": String(value), text: fixed(value, digits) });
}

// A colour for a value in [-1, 1]: blue for high, white at 0, orange for negative.
function heat(node, value) {
  const v = Math.max(-1, Math.min(1, value));
  const light = 100 - Math.abs(v) * 55;
  node.style.backgroundColor = v >= 0 ? `hsl(215, 70%, ${light}%)` : `hsl(25, 85%, ${light}%)`;
  node.style.color = light < 62 ? "#fff" : "#111";
}

// A labelled bar: the label, a bar as wide as value / max, and the number.
function bar(label, value, max, digits) {
  const fill = el("span", { class: "fill" });
  fill.style.width = `${Math.max(0, Math.min(1, max > 0 ? value / max : 0)) * 100}%`;
  return el(
    "li",
    { class: "bar" },
    el("span", { class: "label", text: label }),
    el("span", { class: "track", "aria-hidden": "true" }, fill),
    number("span", value, digits),
  );
}

function bars(entries, digits, max) {
  const top = max === undefined ? Math.max(...entries.map(([, value]) => value), 0) : max;
  return el("ol", { class: "bars" }, ...entries.map(([label, value]) => bar(label, value, top, digits)));
}

// --- the math done in the page -------------------------------------------------------------------------

function cosineMatrix(vectors) {
  const unit = vectors.map((v) => {
    const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0)) || 1;
    return v.map((x) => x / norm);
  });
  return unit.map((a) => unit.map((b) => a.reduce((s, x, i) => s + x * b[i], 0)));
}

// Eigen-decomposition of a small symmetric matrix by cyclic Jacobi rotations: [values, vectors as columns].
function symmetricEigen(matrix) {
  const n = matrix.length;
  const a = matrix.map((row) => row.slice());
  const v = a.map((row, i) => row.map((_, j) => (i === j ? 1 : 0)));
  for (let sweep = 0; sweep < 100; sweep++) {
    let off = 0;
    for (let p = 0; p < n; p++) for (let q = p + 1; q < n; q++) off += a[p][q] * a[p][q];
    if (off < 1e-22) break;
    for (let p = 0; p < n; p++) {
      for (let q = p + 1; q < n; q++) {
        if (Math.abs(a[p][q]) < 1e-300) continue;
        const theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
        const t = Math.sign(theta || 1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1);
        const s = t * c;
        for (let k = 0; k < n; k++) {
          const akp = a[k][p];
          const akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (let k = 0; k < n; k++) {
          const apk = a[p][k];
          const aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
        for (let k = 0; k < n; k++) {
          const vkp = v[k][p];
          const vkq = v[k][q];
          v[k][p] = c * vkp - s * vkq;
          v[k][q] = s * vkp + c * vkq;
        }
      }
    }
  }
  return [a.map((row, i) => row[i]), v];
}

// The texts' coordinates on the first two principal components of their vectors (the centred Gram matrix's
// eigenvectors times the square roots of its eigenvalues: the same as an SVD of the centred vectors). Each
// component's sign is set so that its largest coordinate (in absolute value) is positive.
function pca2(vectors) {
  const n = vectors.length;
  const d = vectors[0].length;
  const mean = new Array(d).fill(0);
  for (const v of vectors) for (let j = 0; j < d; j++) mean[j] += v[j] / n;
  const centred = vectors.map((v) => v.map((x, j) => x - mean[j]));
  const gram = centred.map((a) => centred.map((b) => a.reduce((s, x, j) => s + x * b[j], 0)));
  const [values, vecs] = symmetricEigen(gram);
  const order = values.map((_, i) => i).sort((i, j) => values[j] - values[i]);
  const coords = vectors.map(() => [0, 0]);
  for (let c = 0; c < 2; c++) {
    const k = order[c];
    const scale = Math.sqrt(Math.max(values[k], 0));
    let column = vecs.map((row) => row[k] * scale);
    const largest = column.reduce((best, x) => (Math.abs(x) > Math.abs(best) ? x : best), 0);
    if (largest < 0) column = column.map((x) => -x);
    column.forEach((x, i) => { coords[i][c] = x; });
  }
  return coords;
}

// --- the panels ----------------------------------------------------------------------------------------

const PANELS = {
  embed: {
    async run(form, signal) {
      const texts = lines(form.querySelector("textarea"));
      const answer = await api("/embed", { texts }, signal);
      return renderEmbeddings(texts, answer.embeddings);
    },
  },
  rerank: {
    async run(form, signal) {
      const query = form.querySelector("input").value;
      const documents = lines(form.querySelector("textarea"));
      const answer = await api("/rerank", { query, documents }, signal);
      const results = answer.results;
      const max = Math.max(...results.map((r) => r.relevance_score), 0);
      const list = el("ol", { class: "bars ranked" });
      for (const r of results) {
        const item = bar(documents[r.index], r.relevance_score, max, 4);
        item.dataset.index = String(r.index);
        list.append(item);
      }
      return [el("h2", { text: "Documents, most relevant first" }), list];
    },
  },
  classify: {
    async run(form, signal) {
      const texts = lines(form.querySelector("textarea"));
      const answer = await api("/classify", { texts }, signal);
      return answer.results.map((row, i) => {
        const box = el("div", { class: "item" }, el("h2", { text: texts[i] }));
        if (row.probabilities) {
          const entries = Object.entries(row.probabilities).sort((a, b) => b[1] - a[1]);
          box.append(bars(entries, 4, 1));
        } else {
          const value = Array.isArray(row.value) ? row.value : [row.value];
          box.append(el("p", { class: "value" }, "value: ", ...value.map((x) => number("span", x, 4))));
        }
        return box;
      });
    },
  },
  tokens: {
    async run(form, signal) {
      const texts = lines(form.querySelector("textarea"));
      const answer = await api("/tokens", { texts }, signal);
      return answer.results.map((row, i) => renderEntities(texts[i], row.entities));
    },
  },
  "fill-mask": {
    async run(form, signal) {
      const texts = lines(form.querySelector("textarea"));
      const topK = Number(form.querySelector("input").value) || 5;
      const answer = await api("/fill-mask", { texts, top_k: topK }, signal);
      return answer.results.map((masks, i) => {
        const box = el("div", { class: "item" }, el("h2", { text: texts[i] }));
        masks.forEach((candidates, m) => {
          box.append(el("h3", { text: `mask ${m + 1}` }));
          box.append(bars(candidates.map((c) => [c.token, c.score]), 4)); // scaled to the first
        });
        return box;
      });
    },
  },
  embed_sparse: {
    async run(form, signal) {
      const texts = lines(form.querySelector("textarea"));
      const topK = Number(form.querySelector("input").value) || 10;
      const answer = await api("/embed_sparse", { inputs: texts, top_k: topK, return_tokens: true }, signal);
      return answer.map((row, i) => {
        const box = el("div", { class: "item" }, el("h2", { text: texts[i] }));
        box.append(bars(row.map((e) => [e.token, e.value]), 3));
        return box;
      });
    },
  },
  maxsim_alignment: {
    async run(form, signal) {
      const query = form.querySelector("input").value;
      const documents = lines(form.querySelector("textarea"));
      const answer = await api("/maxsim", { query, documents }, signal);
      return answer.results.map((r) => renderAlignment(documents[r.index], r));
    },
  },
};

function renderEmbeddings(texts, vectors) {
  const out = [];
  const cos = cosineMatrix(vectors);
  out.push(el("h2", { text: "Cosine similarity" }));
  const table = el("table", { class: "heatmap cosine" });
  table.append(el("caption", { text: `${texts.length} texts, ${vectors[0].length} dimensions` }));
  const head = el("tr", {}, el("th", { scope: "col", text: "" }));
  texts.forEach((t, j) => head.append(el("th", { scope: "col", title: t, text: String(j + 1) })));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  cos.forEach((row, i) => {
    const tr = el("tr", {}, el("th", { scope: "row", title: texts[i], text: `${i + 1}. ${short(texts[i], 32)}` }));
    row.forEach((value) => {
      const cell = number("td", value, 3);
      heat(cell, value);
      tr.append(cell);
    });
    body.append(tr);
  });
  table.append(body);
  out.push(el("div", { class: "scroll" }, table));
  if (texts.length >= 3) {
    out.push(el("h2", { text: "Projection on two principal components" }));
    out.push(renderProjection(texts, pca2(vectors)));
  } else {
    out.push(el("p", { class: "hint", text: "Three texts or more also show a 2-D projection (PCA)." }));
  }
  return out;
}

function renderProjection(texts, coords) {
  const width = 360;
  const height = 260;
  const pad = 28;
  const xs = coords.map((c) => c[0]);
  const ys = coords.map((c) => c[1]);
  const span = (v) => Math.max(...v) - Math.min(...v) || 1;
  const x = (v) => pad + ((v - Math.min(...xs)) / span(xs)) * (width - 2 * pad);
  const y = (v) => height - pad - ((v - Math.min(...ys)) / span(ys)) * (height - 2 * pad);
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "pca", role: "img",
    "aria-label": "the texts on the first two principal components" });
  plot.append(svg("rect", { x: 0.5, y: 0.5, width: width - 1, height: height - 1, class: "frame" }));
  coords.forEach((c, i) => {
    const dot = svg("circle", { cx: x(c[0]), cy: y(c[1]), r: 6, class: "dot" });
    const title = svg("title", {});
    title.textContent = texts[i];
    dot.append(title);
    const label = svg("text", { x: x(c[0]) + 8, y: y(c[1]) + 4, class: "dot-label" });
    label.textContent = String(i + 1);
    plot.append(dot, label);
  });
  const table = el("table", { class: "coords" }, el("caption", { text: "Coordinates" }));
  table.append(el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "text" }),
    el("th", { scope: "col", text: "PC 1" }), el("th", { scope: "col", text: "PC 2" }))));
  const body = el("tbody");
  coords.forEach((c, i) => {
    body.append(el("tr", {}, el("th", { scope: "row", text: `${i + 1}. ${short(texts[i], 32)}` }),
      number("td", c[0], 4), number("td", c[1], 4)));
  });
  table.append(body);
  return el("div", { class: "projection" }, plot, el("div", { class: "scroll" }, table));
}

const ENTITY_COLOURS = 8;
const entityLabels = []; // one colour per label across the page's texts

function colour(label) {
  if (!entityLabels.includes(label)) entityLabels.push(label);
  return `entity-${entityLabels.indexOf(label) % ENTITY_COLOURS}`;
}

function renderEntities(text, entities) {
  const para = el("p", { class: "tagged" });
  let at = 0;
  for (const e of [...entities].sort((a, b) => a.start - b.start)) {
    if (e.start < at) continue;
    para.append(text.slice(at, e.start));
    const mark = el("mark", { class: colour(e.label), "data-label": e.label, "data-start": String(e.start),
      "data-end": String(e.end) }, text.slice(e.start, e.end), el("span", { class: "tag", text: e.label }));
    para.append(mark);
    at = e.end;
  }
  para.append(text.slice(at));
  const box = el("div", { class: "item" }, para);
  if (entities.length === 0) {
    box.append(el("p", { class: "hint", text: "No entities." }));
    return box;
  }
  const table = el("table", { class: "entities" });
  table.append(el("thead", {}, el("tr", {}, ...["entity", "label", "start", "end", "score"].map(
    (h) => el("th", { scope: "col", text: h })))));
  const body = el("tbody");
  for (const e of entities) {
    body.append(el("tr", {}, el("td", { text: e.text }), el("td", { text: e.label }),
      el("td", { class: "num", text: String(e.start) }), el("td", { class: "num", text: String(e.end) }),
      number("td", e.score, 4)));
  }
  table.append(body);
  box.append(el("div", { class: "scroll" }, table));
  return box;
}

function renderAlignment(document_, r) {
  const box = el("div", { class: "item alignment", "data-index": String(r.index) });
  box.append(el("h2", {}, `${short(document_, 60)} — MaxSim `, number("span", r.score, 4, "num score")));
  const table = el("table", { class: "heatmap maxsim" });
  table.append(el("caption", { text: "Rows: query tokens; columns: document tokens; outlined: the match" }));
  const head = el("tr", {}, el("th", { scope: "col", text: "query token" }));
  r.document_tokens.forEach((t) => head.append(el("th", { scope: "col", class: "token", text: t })));
  head.append(el("th", { scope: "col", text: "matched" }), el("th", { scope: "col", text: "score" }));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  r.similarities.forEach((row, i) => {
    const tr = el("tr", {}, el("th", { scope: "row", class: "token", text: r.query_tokens[i] }));
    row.forEach((value, j) => {
      const cell = number("td", value, 2);
      heat(cell, value);
      if (j === r.matched[i]) cell.classList.add("match");
      tr.append(cell);
    });
    tr.append(el("td", { class: "matched token", text: r.document_tokens[r.matched[i]] }),
      number("td", row[r.matched[i]], 4, "num best"));
    body.append(tr);
  });
  table.append(body);
  box.append(el("div", { class: "scroll" }, table));
  return box;
}

// --- running a panel: one call at a time per panel, cancellable, timed ---------------------------------

function setupPanel(section) {
  const panel = PANELS[section.dataset.task];
  const form = section.querySelector("form");
  const run = form.querySelector("button[type=submit]");
  const cancel = form.querySelector("button.cancel");
  const status = section.querySelector(".status");
  const error = section.querySelector(".error");
  const result = section.querySelector(".result");
  let controller = null;

  cancel.addEventListener("click", () => controller && controller.abort());
  form.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (controller) return;
    controller = new AbortController();
    const started = performance.now();
    const seconds = () => ((performance.now() - started) / 1000).toFixed(1);
    run.disabled = true;
    cancel.disabled = false;
    error.hidden = true;
    section.setAttribute("aria-busy", "true");
    status.textContent = "Running…";
    const clock = setInterval(() => { status.textContent = `Running… ${seconds()} s`; }, 100);
    try {
      const nodes = await panel.run(form, controller.signal);
      result.replaceChildren(...[nodes].flat());
      status.textContent = `Done in ${seconds()} s.`;
    } catch (err) {
      if (err.name === "AbortError") {
        status.textContent = `Cancelled after ${seconds()} s.`;
      } else {
        status.textContent = "";
        error.textContent = describeError(err);
        error.hidden = false;
      }
    } finally {
      clearInterval(clock);
      controller = null;
      run.disabled = false;
      cancel.disabled = true;
      section.removeAttribute("aria-busy");
    }
  });
}

// --- tabs (arrow keys move between them) ---------------------------------------------------------------

function showTab(tab) {
  for (const other of document.querySelectorAll("[role=tab]")) {
    const selected = other === tab;
    other.setAttribute("aria-selected", String(selected));
    other.tabIndex = selected ? 0 : -1;
    document.getElementById(other.getAttribute("aria-controls")).hidden = !selected;
  }
}

function buildTabs(serves) {
  const nav = document.getElementById("tabs");
  nav.replaceChildren();
  const tabs = [];
  for (const section of document.querySelectorAll("section.panel")) {
    section.hidden = true;
    if (!serves.includes(section.dataset.task)) continue;
    const tab = el("button", { type: "button", role: "tab", id: `tab-${section.dataset.task}`,
      "aria-controls": section.id, text: section.dataset.title });
    section.setAttribute("aria-labelledby", tab.id);
    tab.addEventListener("click", () => showTab(tab));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (!step) return;
      const next = tabs[(tabs.indexOf(tab) + step + tabs.length) % tabs.length];
      next.focus();
      showTab(next);
    });
    tabs.push(tab);
    nav.append(tab);
  }
  document.getElementById("nothing").hidden = tabs.length > 0;
  if (tabs.length) showTab(tabs[0]);
}

// --- the model: /info, and /v1/models for the switcher -------------------------------------------------

function showInfo(info) {
  state.info = info;
  const line = document.getElementById("model-line");
  line.replaceChildren(el("strong", { text: info.model }),
    ` — ${info.model_type}, ${info.head} head, serves ${info.serves.join(", ")}`);
  const limits = document.getElementById("limits");
  const facts = { dimensions: info.dimensions, "max input tokens": info.max_input_tokens,
    pooling: info.pooling, backend: `${info.backend} ${info.precision}`, ...info.limits };
  limits.replaceChildren(...Object.entries(facts).flatMap(([name, value]) =>
    [el("dt", { text: name }), el("dd", { text: String(value) })]));
  document.getElementById("limits-box").hidden = false;
  if (info.mask_token) {
    for (const code of document.querySelectorAll(".mask-token")) code.textContent = info.mask_token;
    const area = document.getElementById("fill-mask-texts");
    if (!area.value) area.value = `Paris is the ${info.mask_token} of France.\nThe cat sat on the ${info.mask_token}.`;
  }
  buildTabs(info.serves);
}

async function loadModels() {
  let list;
  try {
    list = await api("/v1/models");
  } catch (err) {
    return; // the switcher is optional
  }
  state.models = (list.data || []).map((m) => m.id);
  const picker = document.getElementById("model-picker");
  picker.hidden = state.models.length < 2;
  if (picker.hidden) return;
  const select = document.getElementById("model-select");
  select.replaceChildren(...state.models.map((id) => el("option", { value: id, text: id })));
  if (!state.models.includes(state.model)) state.model = state.models[0];
  select.value = state.model;
}

async function loadInfo() {
  const pageError = document.getElementById("page-error");
  pageError.hidden = true;
  try {
    const query = state.models.length > 1 ? `?model=${encodeURIComponent(state.model)}` : "";
    const info = await api(`/info${query}`);
    if (state.model === null) state.model = info.model;
    showInfo(info);
    await loadModels();
  } catch (err) {
    document.getElementById("model-line").textContent = "";
    pageError.textContent = err instanceof ApiError && err.status === 401
      ? "This service needs an API key: enter it above (it stays in this page's memory only)."
      : describeError(err);
    pageError.hidden = false;
    if (err instanceof ApiError && err.status === 401) document.getElementById("api-key").focus();
  }
}

function start() {
  for (const section of document.querySelectorAll("section.panel")) setupPanel(section);
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.key = document.getElementById("api-key").value.trim() || null;
    loadInfo();
  });
  document.getElementById("model-select").addEventListener("change", (event) => {
    state.model = event.target.value;
    loadInfo();
  });
  loadInfo();
}

document.addEventListener("DOMContentLoaded", start);
