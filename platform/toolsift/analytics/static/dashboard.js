// The analytics dashboard: asks for an admin key, keeps it in this tab's sessionStorage and
// calls the JSON endpoints with it as a Bearer header (never in a URL).
"use strict";

const KEY = "toolsift.adminKey";
const COLORS = ["#2f6fde", "#e8710a", "#1a9e5c", "#b42318", "#7a4fd6", "#0f8fa8", "#9a6b00"];
const charts = {};
window.dashboard = { loaded: false, charts };

function status(text, error = false) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.classList.toggle("error", error);
}

async function fetchJson(path, key, params) {
  const query = new URLSearchParams(params).toString();
  const response = await fetch(`analytics/${path}${query ? "?" + query : ""}`, {
    headers: { Authorization: `Bearer ${key}` },
    cache: "no-store",
  });
  const body = await response.json();
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    const error = new Error(`${path}: ${response.status} ${message}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

function days(rows) {
  return [...new Set(rows.map((r) => r.day))].sort();
}

function series(rows, labels, groupKey, valueKey) {
  const groups = [...new Set(rows.map((r) => r[groupKey]))].sort();
  return groups.map((group, i) => ({
    label: group,
    data: labels.map((day) => {
      const row = rows.find((r) => r.day === day && r[groupKey] === group);
      return row ? row[valueKey] : null;
    }),
    borderColor: COLORS[i % COLORS.length],
    backgroundColor: COLORS[i % COLORS.length],
    spanGaps: true,
  }));
}

function draw(id, config) {
  if (charts[id]) charts[id].destroy();
  config.options = Object.assign(
    { responsive: true, maintainAspectRatio: false, animation: false },
    config.options || {},
  );
  charts[id] = new Chart(document.getElementById(id), config);
}

function percent(axisTitle) {
  return { y: { min: 0, max: 100, title: { display: true, text: axisTitle } } };
}

function recallChart(rows) {
  const labels = days(rows);
  const datasets = series(rows, labels, "mode", "recall").map((d) => ({
    ...d,
    data: d.data.map((v) => (v === null ? null : Math.round(v * 1000) / 10)),
  }));
  draw("chart-recall", { type: "line", data: { labels, datasets }, options: { scales: percent("%") } });
}

function tokensChart(rows) {
  const labels = days(rows);
  draw("chart-tokens", {
    type: "bar",
    data: {
      labels,
      datasets: [
        { label: "sent", data: rows.map((r) => r.avg_tokens), backgroundColor: COLORS[0] },
        { label: "whole allowed catalog", data: rows.map((r) => r.avg_catalog_tokens),
          backgroundColor: "#c7d3e6" },
      ],
    },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: "tokens" } } } },
  });
}

function latencyChart(rows) {
  const labels = days(rows);
  const p50 = series(rows, labels, "mode", "p50_ms").map((d) => ({ ...d, label: `${d.label} p50` }));
  const p95 = series(rows, labels, "mode", "p95_ms").map((d) => ({
    ...d, label: `${d.label} p95`, borderDash: [6, 4],
  }));
  draw("chart-latency", {
    type: "line",
    data: { labels, datasets: [...p50, ...p95] },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: "ms" } } } },
  });
}

// The rows are the period's totals, summed and ranked by the database: every day counts,
// however many (tool, day) rows the period holds.
function toolsChart(rows) {
  draw("chart-tools", {
    type: "bar",
    data: {
      labels: rows.map((r) => r.tool_name),
      datasets: [
        { label: "offered", data: rows.map((r) => r.selections), backgroundColor: COLORS[0] },
        { label: "called", data: rows.map((r) => r.calls), backgroundColor: COLORS[1] },
      ],
    },
    options: {
      indexAxis: "y",
      scales: { x: { beginAtZero: true, title: { display: true, text: "times" } } },
    },
  });
}

function fill(tableId, rows, cells) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = body.insertRow();
    const td = tr.insertCell();
    td.colSpan = 4;
    td.textContent = "none";
    return;
  }
  for (const row of rows) {
    const tr = body.insertRow();
    for (const value of cells(row)) {
      const td = tr.insertCell();
      td.textContent = value; // text, never HTML: queries are user input
      if (typeof value === "number") td.className = "num";
    }
  }
}

function fixed(v, digits = 3) {
  return v === null || v === undefined ? "-" : Number(v).toFixed(digits);
}

function summary(recall, tokens, latency) {
  const calls = recall.reduce((n, r) => n + r.calls, 0);
  const hits = recall.reduce((n, r) => n + r.hits, 0);
  const selects = tokens.reduce((n, r) => n + r.selections, 0);
  const sent = tokens.reduce((n, r) => n + r.tokens_sent, 0);
  const catalog = tokens.reduce((n, r) => n + r.catalog_tokens, 0);
  const worst = latency.reduce((m, r) => Math.max(m, r.p95_ms), 0);
  const figures = [
    [selects, "selects"],
    [calls ? `${((100 * hits) / calls).toFixed(1)}%` : "-", "recall of the called tool"],
    [catalog ? `${(100 - (100 * sent) / catalog).toFixed(1)}%` : "-", "tokens saved"],
    [latency.length ? `${worst.toFixed(1)} ms` : "-", "worst daily p95"],
  ];
  const box = document.getElementById("summary");
  box.replaceChildren(
    ...figures.map(([value, label]) => {
      const div = document.createElement("div");
      div.className = "figure";
      const b = document.createElement("b");
      b.textContent = String(value);
      const span = document.createElement("span");
      span.textContent = label;
      div.append(b, span);
      return div;
    }),
  );
}

async function load(key, since) {
  status("Loading…");
  const params = since ? { since } : {};
  // One request first: a wrong key is then one failed authentication, not six (the API
  // limits them per client address).
  const tokens = await fetchJson("tokens", key, params);
  const [recall, latency, top, duplicates, zero] = await Promise.all([
    fetchJson("recall", key, params),
    fetchJson("latency", key, params),
    fetchJson("top-tools", key, { ...params, limit: 6 }),
    fetchJson("near-duplicates", key, { limit: 50 }),
    fetchJson("zero-results", key, { ...params, limit: 50 }),
  ]);
  document.getElementById("panels").hidden = false;
  summary(recall, tokens, latency);
  recallChart(recall);
  tokensChart(tokens);
  latencyChart(latency);
  toolsChart(top);
  fill("table-duplicates", duplicates, (r) => [
    r.name_a, r.name_b, fixed(r.cosine_similarity), fixed(r.name_similarity),
  ]);
  fill("table-zero", zero, (r) => [r.query, r.kind, r.selections, r.last_seen.slice(0, 16).replace("T", " ")]);
  status(`${tokens.reduce((n, r) => n + r.selections, 0)} selects${since ? ` since ${since}` : ""}.`);
  window.dashboard.loaded = true;
}

function start() {
  const form = document.getElementById("login");
  const keyInput = document.getElementById("key");
  const sinceInput = document.getElementById("since");
  const run = () =>
    load(keyInput.value.trim(), sinceInput.value).catch((error) => {
      // A refused key is not kept: reloading the page must not try it again.
      if (error.status === 401) sessionStorage.removeItem(KEY);
      window.dashboard.error = error.message;
      status(error.message, true);
    });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, keyInput.value.trim());
    run();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    keyInput.value = "";
    document.getElementById("panels").hidden = true;
    status("Key forgotten.");
  });
  if (!sinceInput.value) {
    // The last 30 days unless the user picks another start.
    const start = new Date(Date.now() - 30 * 86400 * 1000);
    sinceInput.value = start.toISOString().slice(0, 10);
  }
  const saved = sessionStorage.getItem(KEY);
  if (saved) {
    keyInput.value = saved;
    run();
  }
}

document.addEventListener("DOMContentLoaded", start);
