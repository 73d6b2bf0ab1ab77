// cmdstalk dashboard: polls /api/state and renders it. Everything from jobs (output,
// stderr, tube names) is untrusted: it only ever reaches the page through textContent.
"use strict";

const POLL_MS = 1000;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) tr.appendChild(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

function td(child, cls) {
  const cell = el("td", null, cls);
  if (child instanceof Node) cell.appendChild(child); else cell.textContent = child ?? "";
  return cell;
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows);
}

function when(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleTimeString() : "";
}

// Control characters (an ESC of a colour code, a CR) are shown as \xNN, as in the logs.
function visible(text) {
  return String(text).replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g,
    (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
}

function lines(list) {
  return el("pre", (list || []).map(visible).join("\n"));
}

// Sizes in binary units, as the log line gives a peak ("52 MiB peak"); null: not known.
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

function size(n) {
  if (n === null || n === undefined) return "-";
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) { value /= 1024; unit += 1; }
  return (unit === 0 ? String(value) : value.toFixed(value < 10 ? 1 : 0)) + " " + UNITS[unit];
}

function seconds(s) {
  return s === null || s === undefined ? "-" : Number(s).toFixed(2) + " s";
}

function count(n) {
  return n === null || n === undefined ? "-" : String(n);
}

// A job's tree: its memory, CPU seconds and processes (live, or the peak of a finished one).
function costCells(memory, cpu, procs) {
  return [td(size(memory), "num memory"), td(seconds(cpu), "num cpu"), td(count(procs), "num procs")];
}

// The limit that applies (Config.run_limit): the TTR, --max-runtime, or none at all
// (--keep-alive without --max-runtime: the command runs as long as it needs).
const LIMIT_NAMES = { ttr: "TTR", max_runtime: "max runtime" };

function elapsedCell(job) {
  const cell = el("td", null, "num elapsed");
  const elapsed = job.elapsed.toFixed(1) + "s";
  if (job.limit === null || job.limit === undefined) {
    cell.appendChild(el("span", elapsed + " (no limit)"));
    cell.dataset.limit = "none";
    return cell;
  }
  const name = LIMIT_NAMES[job.limit_kind] ?? String(job.limit_kind);
  cell.appendChild(el("span", elapsed + " / " + job.limit + "s " + name));
  cell.dataset.limit = String(job.limit_kind);
  const bar = el("div", null, "bar");
  const fillBar = el("span", null, job.elapsed >= job.limit ? "late" : "");
  fillBar.style.width = Math.min(100, (100 * job.elapsed) / Math.max(0.1, job.limit)) + "%";
  bar.appendChild(fillBar);
  cell.appendChild(bar);
  return cell;
}

function renderRunning(running) {
  document.getElementById("running-count").textContent = "(" + running.length + ")";
  fill("running", running.map((j) => {
    const tr = row([j.pool ?? "-", td(j.server, "server"), j.tube, td(j.slot, "num"),
      td(j.job_id, "num"), td(j.pid, "num"), elapsedCell(j),
      ...costCells(j.memory_bytes, j.cpu_s, j.procs), td(lines(j.output.slice(-5)))]);
    tr.dataset.job = String(j.job_id);
    return tr;
  }));
}

// A kick or delete that succeeded takes the row's buttons with it: the job is no longer
// buried there, and a second click could only be refused.
function actionButton(label, action, body, done) {
  const button = el("button", label);
  button.type = "button";
  button.addEventListener("click", async () => {
    button.disabled = true;
    if (await act(action, body) && done) done(action);
    else button.disabled = false;
  });
  return button;
}

function acted(cell, what) {
  cell.replaceChildren(el("span", what, "acted"));
}

// Each server's reachability on its own: one server down leaves the others' rows.
function renderQueueState(queue) {
  const servers = queue.servers ?? [{server: "", up: queue.up, error: queue.error}];
  const down = servers.filter((s) => s.up === false);
  const state = document.getElementById("queue-state");
  state.textContent = down.map((s) => (servers.length > 1 ? s.server + ": " : "") +
    "server unreachable: " + s.error).join("; ");
  state.className = down.length ? "down" : "muted";
}

function renderTubes(queue) {
  renderQueueState(queue);
  fill("tubes", queue.tubes.map((t) => {
    const pause = el("td", null, "action");
    const seconds = el("input");
    seconds.type = "number"; seconds.min = "0"; seconds.value = "60";
    pause.appendChild(seconds);
    const button = el("button", "pause");
    button.type = "button";
    button.addEventListener("click", () =>
      act("pause", {tube: t.tube, seconds: Number(seconds.value), server: t.server}));
    pause.appendChild(button);
    const rate = (v) => (v === null ? "-" : v.toFixed(2));
    const tr = row([td(t.server, "server"), t.tube, td(t.ready, "num"), td(t.reserved, "num"),
      td(t.delayed, "num"), td(t.buried, "num"), td(t.urgent, "num"), td(t.waiting, "num"),
      td(t.paused ? t.paused + "s" : "", "num"), td(rate(t.puts_per_s), "num"),
      td(rate(t.deletes_per_s), "num"), pause]);
    tr.dataset.server = String(t.server);
    tr.dataset.tube = String(t.tube);
    return tr;
  }));
}

function renderFinished(finished) {
  fill("finished", finished.map((f) => {
    const how = f.exit_code !== null ? f.exit_code : (f.signal || "");
    const acts = el("td", null, "action");
    if (f.acted) {
      acted(acts, f.acted);
    } else if (f.outcome.endsWith("buried")) {
      // A job id means nothing without its server: the action names the job's own.
      const job = {job_id: f.job_id, server: f.server};
      const done = (action) => acted(acts, action === "kick" ? "kicked" : "deleted");
      acts.appendChild(actionButton("kick", "kick", job, done));
      acts.appendChild(actionButton("delete", "delete", job, done));
    }
    const tail = f.error ? [...f.stderr_tail, "error: " + f.error] : f.stderr_tail;
    const tr = row([f.outcome, f.tube, td(f.server, "server"), td(f.slot, "num"),
      td(f.job_id, "num"), td(how, "num"),
      td(f.duration_ms.toFixed(0) + " ms", "num"),
      ...costCells(f.peak_memory_bytes, f.cpu_s, f.procs), when(f.ended_at), td(lines(tail)), acts]);
    if (f.failed) tr.className = "failed";
    tr.dataset.job = String(f.job_id);
    return tr;
  }));
}

function renderConnections(connections) {
  fill("connections", connections.map((c) => {
    const state = c.connected === null ? "not asked yet" : c.connected ? "connected" : "down";
    return row([c.where, td(c.server, "server"), td(state + (c.error ? ": " + c.error : ""), c.connected === false ?
      "down" : ""), td(c.reconnects ?? "", "num"), when(c.last_reconnect)]);
  }));
}

function render(state) {
  const s = state.supervisor;
  const servers = s.servers ?? [s.server];
  document.getElementById("who").textContent =
    s.hostname + " pid " + s.pid + " on " + servers.join(", ");
  // The server columns only where there is more than one server to tell apart.
  document.body.classList.toggle("servers", servers.length > 1);
  const badge = document.getElementById("state");
  badge.textContent = s.state;
  badge.className = "badge " + s.state;
  document.body.classList.toggle("actions", s.actions);
  renderRunning(state.running);
  renderTubes(state.queue);
  renderFinished(state.finished);
  renderConnections(state.connections);
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

// The answer goes to the header, which stays in view: whichever button was pressed, the
// operator sees what came of it. Resolves to whether the action was carried out.
async function act(action, body) {
  const result = document.getElementById("action-result");
  const token = document.getElementById("token").value;
  sessionStorage.setItem("cmdstalk-token", token);
  result.textContent = action + "…";
  result.className = "muted";
  let ok = false;
  try {
    const reply = await fetch("/api/actions/" + action, {
      method: "POST",
      headers: {"Content-Type": "application/json", "X-Cmdstalk-Token": token},
      body: JSON.stringify(body),
    });
    const data = await reply.json();
    ok = reply.ok;
    result.textContent = ok ? data.message : "refused (" + reply.status + "): " + data.error;
    result.className = ok ? "done" : "down";
  } catch (e) {
    result.textContent = "failed: " + e;
    result.className = "down";
  }
  poll();
  return ok;
}

// Draining cannot be undone from here (the supervisor exits once its jobs are done): the
// button only asks; the confirmation beside it acts.
function askDrain(asking) {
  document.getElementById("drain-confirm").hidden = !asking;
  document.getElementById("drain").hidden = asking;
}

async function poll() {
  try {
    const reply = await fetch("/api/state", {cache: "no-store"});
    if (reply.ok) render(await reply.json());
  } catch (e) {
    document.getElementById("updated").textContent = "supervisor unreachable";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token").value = sessionStorage.getItem("cmdstalk-token") || "";
  document.getElementById("drain").addEventListener("click", () => askDrain(true));
  document.getElementById("drain-no").addEventListener("click", () => askDrain(false));
  document.getElementById("drain-yes").addEventListener("click", () => {
    askDrain(false);
    act("drain", {});
  });
  poll();
  setInterval(poll, POLL_MS);
});
