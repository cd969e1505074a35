// The job's dashboard: reads the admin API once a second and draws the topology, the job's
// throughput, the longest-running endpoints, the failures, and one actor's stack on a click.
'use strict';

const TOKEN_KEY = 'baton-admin-token';
let token = '';
let selected = '';
let shown = false;  // the actor named in the address has been shown
let lastHandled = null;
let lastTime = 0;
let chart = null;
const series = { labels: [], values: [] };

function takeToken() {
  const a = /actor=([^&]+)/.exec(window.location.hash);
  if (a) selected = decodeURIComponent(a[1]);  // shown once the page has read the job
  const m = /token=([^&]+)/.exec(window.location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    window.history.replaceState(null, '', window.location.pathname);  // not left in sight
  }
  token = sessionStorage.getItem(TOKEN_KEY) || '';
}

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: 'Bearer ' + token } });
  if (res.status === 401) throw new Error('unauthorized');
  if (!res.ok) throw new Error(path + ': ' + res.status + ' ' + (await res.text()));
  return res.json();
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/// "ns::(anonymous namespace)::Type::method" as "Type::method".
function shortName(name) {
  const parts = name.split('::');
  return parts.length > 2 ? parts.slice(-2).join('::') : name;
}

function actorState(a) {
  if (a.status !== 'running') return a.status;
  if (a.stalled) return 'stalled';
  return a.running ? 'busy' : 'idle';
}

function drawTopology(procs, actors) {
  const byProc = new Map();
  for (const a of actors) {
    if (a.id.includes('/agent[')) continue;  // the runtime's own
    if (!byProc.has(a.proc)) byProc.set(a.proc, []);
    byProc.get(a.proc).push(a);
  }
  const hosts = new Map();
  for (const p of procs) {
    const host = p.host ? 'host ' + p.host : 'this host';
    if (!hosts.has(host)) hosts.set(host, new Map());
    const mesh = p.controller ? 'controller' : 'proc mesh ' + p.mesh;
    const meshes = hosts.get(host);
    if (!meshes.has(mesh)) meshes.set(mesh, []);
    meshes.get(mesh).push(p);
  }
  const root = document.getElementById('topology');
  root.replaceChildren();
  for (const [host, meshes] of hosts) {
    const h = el('div', 'host');
    h.append(el('div', 'title', host));
    const row = el('div', 'meshes');
    for (const [mesh, members] of meshes) {
      const m = el('div', 'mesh');
      m.append(el('div', 'title', mesh + ' (' + members.length + ')'));
      const list = el('div', 'procs');
      for (const p of members) {
        const box = el('div', 'proc ' + (p.controller ? 'running' : p.state));
        box.append(el('div', 'name', p.name));
        let info = 'pid ' + p.pid + ' · ' + (p.controller ? 'controller' : p.state);
        if (p.cpu_s !== undefined) info += ' · cpu ' + p.cpu_s.toFixed(1) + ' s';
        if (p.rss_mb !== undefined) info += ' · ' + p.rss_mb.toFixed(0) + ' MB';
        box.append(el('div', '', info));
        if (p.report) box.append(el('div', 'report', p.report));
        for (const a of byProc.get(p.name) || []) {
          const chip = el('span', 'chip ' + actorState(a), a.id.slice(p.name.length + 1));
          chip.title = a.type + ': ' + (a.running ? shortName(a.running) : 'idle') +
              ', handled ' + a.handled;
          chip.dataset.actor = a.id;
          if (a.id === selected) chip.classList.add('selected');
          chip.onclick = () => {
            selected = a.id;
            shown = true;
            showActor(a);
          };
          box.append(chip);
        }
        list.append(box);
      }
      m.append(list);
      row.append(m);
    }
    h.append(row);
    root.append(h);
  }
}

/// `now`: the controller's uptime, in seconds: rates by the job's clock, not the page's.
function drawThroughput(actors, now) {
  let handled = 0;
  for (const a of actors) {
    if (!a.id.includes('/agent[')) handled += a.handled;  // not the runtime's own (this page's)
  }
  if (lastHandled !== null && now > lastTime) {
    series.labels.push(new Date().toLocaleTimeString());
    series.values.push((handled - lastHandled) / (now - lastTime));
    if (series.labels.length > 120) {
      series.labels.shift();
      series.values.shift();
    }
  }
  lastHandled = handled;
  lastTime = now;
  if (typeof Chart === 'undefined') {
    document.getElementById('no-chart').hidden = false;
    return;
  }
  if (!chart) {
    chart = new Chart(document.getElementById('throughput'), {
      type: 'line',
      data: { labels: series.labels,
              datasets: [{ label: 'messages/s', data: series.values, borderColor: '#1976d2',
                           pointRadius: 0, tension: 0.2 }] },
      options: { animation: false, scales: { y: { beginAtZero: true } },
                 plugins: { legend: { display: false } } },
    });
  }
  chart.update();
}

function drawLongest(actors) {
  const body = document.querySelector('#longest tbody');
  body.replaceChildren();
  const busy = actors.filter((a) => a.running && !a.id.includes('/agent['))
      .sort((x, y) => y.running_s - x.running_s).slice(0, 10);
  if (busy.length === 0) {
    const row = el('tr');
    row.append(el('td', '', 'every actor is idle'));
    body.append(row);
  }
  for (const a of busy) {
    const row = el('tr', a.stalled ? 'stalled' : '');
    row.append(el('td', '', a.id), el('td', '', shortName(a.running)),
               el('td', '', a.running_s.toFixed(1) + ' s' + (a.stalled ? ' (stalled)' : '')));
    body.append(row);
  }
}

function drawFailures(failures) {
  const list = document.getElementById('failures');
  list.replaceChildren();
  if (failures.length === 0) list.append(el('li', 'none', 'none'));
  for (const f of failures) list.append(el('li', '', f));
}

async function showActor(a) {
  document.querySelectorAll('.chip.selected').forEach((c) => c.classList.remove('selected'));
  document.querySelectorAll('.chip').forEach((c) => {
    if (c.dataset.actor === a.id) c.classList.add('selected');
  });
  document.getElementById('detail-name').textContent = a.id;
  document.getElementById('detail').textContent = a.type + ' · ' + actorState(a) +
      (a.running ? ' in ' + shortName(a.running) + ' for ' + a.running_s.toFixed(1) + ' s' : '') +
      ' · handled ' + a.handled + ' · queued ' + a.queued + ' · mean ' + a.mean_ms.toFixed(2) +
      ' ms · max ' + a.max_ms.toFixed(2) + ' ms';
  const out = document.getElementById('stack');
  out.textContent = 'asking ' + a.proc + ' for its stacks…';
  try {
    const procs = await api('/api/stacks?actor=' + encodeURIComponent(a.id));
    const lines = [];
    for (const p of procs) {
      if (p.error) lines.push(p.error);
      for (const t of p.threads) {
        lines.push('thread ' + t.tid + ' "' + t.name + '"  ' + t.actors.join(', '));
        t.native.forEach((f, i) => lines.push('  #' + i + ' ' + f));
        if (t.python.length) lines.push('  Python (most recent call last):');
        t.python.forEach((f) => lines.push('    ' + f));
      }
    }
    out.textContent = lines.join('\n');
  } catch (e) {
    out.textContent = String(e);
  }
}

async function refresh() {
  try {
    const [job, procs, actors, failures] = await Promise.all(
        [api('/api/job'), api('/api/procs'), api('/api/actors'), api('/api/failures')]);
    document.getElementById('job').textContent =
        'job of ' + job.controller + ' (pid ' + job.pid + ') · up ' + job.uptime_s.toFixed(0) + ' s';
    const states = {};
    for (const p of procs) if (!p.controller) states[p.state] = (states[p.state] || 0) + 1;
    document.getElementById('counts').textContent = Object.entries(states)
        .map(([s, n]) => n + ' ' + s).join(' · ') || 'no worker procs';
    drawTopology(procs, actors.actors);
    const chosen = actors.actors.find((a) => a.id === selected);
    if (chosen && !shown) {
      shown = true;
      showActor(chosen);
    }
    drawThroughput(actors.actors, job.uptime_s);
    drawLongest(actors.actors);
    drawFailures(failures);
    document.getElementById('updated').textContent =
        'updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (String(e).includes('unauthorized')) {
      document.getElementById('login').hidden = false;
      document.getElementById('main').hidden = true;
    }
    document.getElementById('updated').textContent = 'the job does not answer: ' + e;
  }
}

takeToken();
document.getElementById('use-token').onclick = () => {
  sessionStorage.setItem(TOKEN_KEY, document.getElementById('token').value.trim());
  window.location.reload();
};
refresh();
setInterval(refresh, 1000);
