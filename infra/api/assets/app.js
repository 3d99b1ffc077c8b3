// The Vergence status page. Plain JavaScript, no build step: the server
// embeds this file as it is. Everything shown comes from the /v1 API with
// the token the user gives, and is put into the page as text (never as
// markup), so nothing an API answer contains can run here.
'use strict';

(() => {
  /** How often the page reads the API again. */
  const POLL_MS = 2000;
  const TOKEN_KEY = 'vergence.token';
  const EVENTS_SHOWN = 30;
  /**
   * Delivery metrics are computed from every event of the application:
   * read once a minute, not at every poll.
   */
  const METRICS_MS = 60_000;
  const METRICS_SINCE = '30d';

  const $ = (id) => document.getElementById(id);

  // The token lives for the tab (sessionStorage) unless the user asks to
  // remember it on this browser (localStorage).
  const token = {
    get: () => sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY),
    set(value, remember) {
      sessionStorage.setItem(TOKEN_KEY, value);
      if (remember) localStorage.setItem(TOKEN_KEY, value);
    },
    forget() {
      sessionStorage.removeItem(TOKEN_KEY);
      localStorage.removeItem(TOKEN_KEY);
    },
  };

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  /** One API call; an error answer becomes an ApiError with its message. */
  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${token.get()}` };
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, `cannot reach the server: ${e.message}`);
    }
    const text = await response.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch (_) {
      // Not JSON (a proxy's error page): shown as it is below.
    }
    if (!response.ok) {
      const error = json && json.error;
      throw new ApiError(
        response.status,
        error ? `${response.status} ${error.code}: ${error.message}` : `${response.status}: ${text}`,
      );
    }
    return json;
  }

  /** An element with attributes and children (strings become text). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'onclick') node.addEventListener('click', value);
      else if (key === 'dataset') Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(typeof child === 'string' || typeof child === 'number' ? String(child) : child);
    }
    return node;
  }

  function statusBadge(status) {
    const kind = {
      CONVERGED: 'ok',
      PENDING: 'wait',
      WAITING_PRECONDITIONS: 'wait',
      WAITING_APPROVAL: 'wait',
      PAUSED: 'wait',
      APPLYING: 'run',
      VERIFYING: 'run',
      ROLLING_BACK: 'run',
      BLOCKED: 'bad',
      DRIFTED: 'bad',
      FAILED: 'bad',
      ROLLED_BACK: 'bad',
    }[status] || '';
    return el('span', { class: `status ${kind}`, dataset: { status } }, status);
  }

  /** Local time as `2026-11-26 22:06:00`: sortable, and the same in every locale. */
  function when(at) {
    if (!at) return '-';
    const d = new Date(at);
    const two = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
  }
  const version = (v) => v || '-';
  const seg = encodeURIComponent;

  function instancePath(app, service, channel) {
    return `/v1/applications/${seg(app)}/services/${seg(service)}/release-channels/${seg(channel)}`;
  }

  function pagePath(app, channel, service) {
    return `/ui/instances/${seg(app)}/${seg(channel)}/${seg(service)}`;
  }

  /** What the path asks for: one instance, or an application's overview. */
  function route() {
    const m = /^\/ui\/instances\/([^/]+)\/([^/]+)\/([^/]+)\/?$/.exec(location.pathname);
    if (m) {
      const [app, channel, service] = m.slice(1).map(decodeURIComponent);
      return { kind: 'instance', app, channel, service };
    }
    return { kind: 'overview', app: new URLSearchParams(location.search).get('app') };
  }

  // Who the token is, from /v1/whoami.
  let me = null;
  const can = (scope) => !!me && (me.scopes.includes(scope) || me.scopes.includes('admin'));

  // What was last drawn per section, so an unchanged answer does not
  // redraw (and a button being clicked is not replaced under the pointer).
  const drawn = new Map();
  function redraw(section, data, draw) {
    const key = JSON.stringify(data);
    if (drawn.get(section) === key) return;
    drawn.set(section, key);
    draw(data);
  }

  function showError(message) {
    $('error').textContent = message || '';
  }

  function setLive(ok, message) {
    const live = $('live');
    live.classList.toggle('stale', !ok);
    live.textContent = ok ? `live · updated ${when(new Date()).slice(11)}` : message;
  }

  // ---- overview: the release channel × service matrix -------------------

  async function refreshOverview(app) {
    const base = `/v1/applications/${seg(app)}`;
    const [status, alerts, events] = await Promise.all([
      api('GET', `${base}/status`),
      api('GET', '/v1/alerts'),
      api('GET', `${base}/events?limit=${EVENTS_SHOWN}`),
    ]);
    redraw('matrix', status.instances, (instances) => drawMatrix(app, instances));
    redraw('agents', status.agents, drawAgents);
    redraw('alerts', alerts.alerts, drawAlerts);
    redraw('app-events', events.events, (list) => drawEvents($('app-events'), list, true));
    await refreshMetrics(app);
  }

  // ---- delivery metrics ----------------------------------------------------

  let metricsReadAt = 0;

  async function refreshMetrics(app) {
    if (Date.now() - metricsReadAt < METRICS_MS) return;
    const metrics = await api('GET', `/v1/applications/${seg(app)}/metrics?since=${METRICS_SINCE}`);
    metricsReadAt = Date.now();
    redraw('metrics', metrics, drawMetrics);
  }

  /** Seconds in their two largest units: `45s`, `2m 5s`, `1h 30m`, `2d 3h`. */
  function span(seconds) {
    if (seconds < 60) return `${Math.round(seconds * 10) / 10}s`;
    const total = Math.round(seconds);
    const units = [
      ['d', Math.floor(total / 86400)],
      ['h', Math.floor(total / 3600) % 24],
      ['m', Math.floor(total / 60) % 60],
      ['s', total % 60],
    ];
    const first = units.findIndex(([, n]) => n > 0);
    return units
      .slice(first, first + 2)
      .filter(([, n]) => n > 0)
      .map(([unit, n]) => `${n}${unit}`)
      .join(' ');
  }

  /** The four measures, each with what it is computed from; '—' where there is nothing to measure. */
  function drawMetrics(m) {
    const lead = m.leadTimeSeconds;
    const restore = m.timeToRestoreSeconds;
    const channels = Object.values(m.lastReleaseChannels).join(', ');
    const tile = (name, label, value, from) =>
      el(
        'div',
        { class: 'metric', dataset: { metric: name } },
        el('div', { class: 'label' }, label),
        el('div', { class: 'value' }, value),
        el('div', { class: 'from' }, from),
      );
    $('metrics').replaceChildren(
      tile(
        'deployment-frequency',
        'Deployment frequency',
        `${m.deploymentFrequencyPerDay.toFixed(2)} / day`,
        `${m.deployments} deployment(s) to ${channels}`,
      ),
      tile(
        'lead-time',
        'Lead time for changes',
        lead.median === null ? '—' : `${span(lead.median)} median`,
        lead.p90 === null ? `${lead.count} release(s) deployed` : `p90 ${span(lead.p90)} · ${lead.count} release(s) deployed`,
      ),
      tile(
        'change-failure-rate',
        'Change failure rate',
        m.changeFailureRate === null ? '—' : `${Math.round(m.changeFailureRate * 1000) / 10}%`,
        `${m.failedReleases} of ${m.releases} release(s) failed`,
      ),
      tile(
        'time-to-restore',
        'Time to restore',
        restore.median === null ? '—' : `${span(restore.median)} median`,
        `${restore.count} failure(s) restored`,
      ),
    );
  }

  function drawMatrix(app, instances) {
    // Channels in promotion order: the API lists each service's instances
    // in that order.
    const channels = [];
    const services = [];
    const cells = new Map();
    for (const i of instances) {
      if (!channels.includes(i.releaseChannel)) channels.push(i.releaseChannel);
      if (!services.includes(i.service)) services.push(i.service);
      cells.set(`${i.service}/${i.releaseChannel}`, i);
    }
    const table = $('matrix');
    table.replaceChildren(
      el('thead', {}, el('tr', {}, el('th', {}, 'Service'), channels.map((c) => el('th', { dataset: { channel: c } }, c)))),
      el(
        'tbody',
        {},
        services.map((service) =>
          el(
            'tr',
            { dataset: { service } },
            el('th', {}, service),
            channels.map((channel) => {
              const instance = cells.get(`${service}/${channel}`);
              return instance ? matrixCell(app, instance) : el('td', { class: 'empty' }, '—');
            }),
          ),
        ),
      ),
    );
    if (instances.length === 0) {
      table.replaceChildren(el('tr', {}, el('td', { class: 'empty' }, 'No instances: push a config and a release.')));
    }
  }

  function matrixCell(app, i) {
    const approve =
      i.status === 'WAITING_APPROVAL' && can('approve')
        ? el(
            'button',
            {
              type: 'button',
              class: 'primary',
              dataset: { action: 'approve' },
              onclick: () => act(`approve ${i.service} in ${i.releaseChannel}`, () => approve_(app, i.service, i.releaseChannel)),
            },
            'Approve',
          )
        : null;
    return el(
      'td',
      {
        class: 'cell',
        id: `cell-${i.service}-${i.releaseChannel}`,
        dataset: { service: i.service, channel: i.releaseChannel, status: i.status },
      },
      el(
        'a',
        { class: 'open', href: pagePath(app, i.releaseChannel, i.service), title: 'Explain, jobs and events' },
        statusBadge(i.status),
        el('div', { class: 'versions' }, `desired ${version(i.desiredVersion)} · current ${version(i.currentVersion)}`),
        el('div', { class: 'reason' }, i.reason),
      ),
      approve,
    );
  }

  function drawAgents(agents) {
    $('agents').replaceChildren(
      ...(agents.length
        ? agents.map((a) =>
            el('li', {}, el('strong', {}, a.name), ` ${a.alive ? 'connected' : 'silent'}, ${a.lastContact} (vergence-agent ${a.version})`),
          )
        : [el('li', { class: 'empty' }, 'No agent has called (only the kubernetes runner uses them).')]),
    );
  }

  function drawAlerts(alerts) {
    $('alerts').replaceChildren(
      ...(alerts.length
        ? alerts.map((a) =>
            el(
              'li',
              {},
              el('span', { class: `status ${a.state === 'firing' ? 'bad' : 'ok'}` }, a.state),
              ' ',
              el('strong', {}, a.name),
              ` since ${when(a.since)} (set by ${a.actor})`,
              a.summary ? ` — ${a.summary}` : '',
            ),
          )
        : [el('li', { class: 'empty' }, 'No alert has been set.')]),
    );
  }

  /** Newest first; `where` adds the instance each event is about. */
  function drawEvents(list, events, where) {
    const shown = events.slice(-EVENTS_SHOWN).reverse();
    list.replaceChildren(
      ...(shown.length
        ? shown.map((e) =>
            el(
              'li',
              { dataset: { type: e.type } },
              el('span', { class: 'when' }, when(e.at)),
              el('span', { class: 'kind' }, e.type),
              el(
                'span',
                {},
                where && e.service && e.releaseChannel ? `${e.service}/${e.releaseChannel}: ` : '',
                e.message,
                el('span', { class: 'when' }, ` — ${e.actor}`),
              ),
            ),
          )
        : [el('li', { class: 'empty' }, 'No events yet.')]),
    );
  }

  // ---- one instance: explain, jobs, events, actions ----------------------

  /**
   * Text with each http(s) URL in it as a link. The text stays text (never
   * markup); a link is made only of what the URL parser reads as an
   * absolute http: or https: URL (never javascript: or data:), and opens
   * in a new tab without access to this page or its address.
   */
  function linked(text) {
    const parts = [];
    const url = /https?:\/\/[^\s<>"'`]+/g;
    let last = 0;
    let m;
    while ((m = url.exec(text)) !== null) {
      // Punctuation that ends a sentence is not part of the link.
      const written = m[0].replace(/[.,;:!?)\]}]+$/, '');
      let href = null;
      try {
        const parsed = new URL(written);
        if (parsed.protocol === 'http:' || parsed.protocol === 'https:') href = parsed.href;
      } catch (_) {
        // Not a URL after all: shown as text.
      }
      parts.push(text.slice(last, m.index));
      parts.push(href ? el('a', { href, target: '_blank', rel: 'noopener noreferrer nofollow' }, written) : written);
      last = m.index + written.length;
      url.lastIndex = Math.max(last, m.index + 1);
    }
    parts.push(text.slice(last));
    return parts;
  }

  /** What getInfo reported: its failure, its outputs, or what it printed. */
  function drawInfo(i) {
    const parts = [];
    if (i.infoFailure) parts.push(el('p', { class: 'error' }, i.infoFailure));
    if (i.info && i.info.length) {
      parts.push(el('dl', {}, i.info.flatMap((o) => [el('dt', {}, o.name), el('dd', {}, linked(o.text))])));
    }
    if (typeof i.infoText === 'string') parts.push(el('pre', { class: 'info-text' }, linked(i.infoText)));
    if (parts.length === 0) parts.push(el('p', { class: 'empty' }, 'getInfo has reported nothing.'));
    $('info').replaceChildren(...parts);
  }

  async function refreshInstance(r) {
    const query = `service=${seg(r.service)}&releaseChannel=${seg(r.channel)}&limit=${EVENTS_SHOWN}`;
    const [detail, events] = await Promise.all([
      api('GET', instancePath(r.app, r.service, r.channel)),
      api('GET', `/v1/applications/${seg(r.app)}/events?${query}`),
    ]);
    redraw('summary', detail, drawInstance);
    redraw('instance-events', events.events, (list) => drawEvents($('instance-events'), list, false));
  }

  function drawInstance(d) {
    const i = d.instance;
    $('instance').dataset.status = i.status;
    $('instance-summary').replaceChildren(
      ...[
        statusBadge(i.status),
        el('span', { class: 'versions' }, `desired ${version(i.desiredVersion)} · current ${version(i.currentVersion)}`),
        el('span', { class: 'reason' }, i.reason),
        d.paused ? el('span', { class: 'status wait' }, `paused by ${d.paused.actor}`) : null,
        d.pinned ? el('span', { class: 'status wait' }, `pinned to ${d.pinned.version}`) : null,
        i.windowOverride
          ? el(
              'span',
              { class: 'status wait' },
              `freeze overridden for ${i.windowOverride.version} by ${i.windowOverride.actor} until ${when(i.windowOverride.expiresAt)}: ${i.windowOverride.reason}`,
            )
          : null,
        d.running ? el('span', { class: 'status run' }, `running ${d.running.kind} of ${d.running.version} since ${when(d.running.since)}`) : null,
      ].filter(Boolean),
    );
    drawInfo(i);
    $('explain').textContent = d.explain.join('\n');
    $('jobs').replaceChildren(
      ...(d.lastJobs.length
        ? d.lastJobs.map((j) =>
            el(
              'div',
              { class: 'job', dataset: { kind: j.kind } },
              el(
                'div',
                { class: 'head' },
                el('strong', {}, j.kind),
                ` of ${j.version} (attempt ${j.attempt}): ${j.outcome}${j.exitCode === null || j.exitCode === undefined ? '' : ` ${j.exitCode}`}`,
                ` at ${when(j.finishedAt)}, took ${j.durationMs} ms`,
              ),
              el('pre', {}, j.output.trim() ? j.output : '(no output)'),
            ),
          )
        : [el('p', { class: 'empty' }, 'No job has finished yet.')]),
    );
    const admin = can('admin');
    const noAdmin = admin ? null : 'needs a token with the admin scope';
    setButton('approve', can('approve'), 'needs a token with the approve scope');
    setButton('pause', admin, noAdmin);
    setButton('resume', admin, noAdmin);
    setButton('rollback', admin, noAdmin);
    $('rollback-version').disabled = !admin;
    const override = can('override');
    setButton('override', override, 'needs a token with the override scope');
    $('override-reason').disabled = !override;
    $('pause').hidden = !!d.paused;
    $('resume').hidden = !d.paused;
  }

  function setButton(id, enabled, why) {
    const button = $(id);
    button.disabled = !enabled;
    button.title = enabled ? '' : why;
  }

  // ---- actions -------------------------------------------------------------

  function approve_(app, service, channel) {
    // No version: the server approves the instance's desired version (or,
    // during a rollback, the version it goes back to) and its plan.
    return api('POST', `${instancePath(app, service, channel)}/approvals`, {});
  }

  /** Runs an action, says what happened, and reads the API again at once. */
  async function act(what, action) {
    // Shown until the next action, unlike polling errors, which clear as
    // soon as a read succeeds again.
    const result = $('action-result');
    result.textContent = '';
    try {
      await action();
      result.className = 'result';
      result.textContent = `Done: ${what}.`;
    } catch (e) {
      result.className = 'error';
      result.textContent = `Could not ${what}: ${e.message}`;
    }
    await refresh();
  }

  let wired = false;
  function wireInstanceActions(r) {
    if (wired) return;
    wired = true;
    const path = instancePath(r.app, r.service, r.channel);
    const what = `${r.service} in ${r.channel}`;
    $('approve').addEventListener('click', () => act(`approve ${what}`, () => approve_(r.app, r.service, r.channel)));
    $('pause').addEventListener('click', () => act(`pause ${what}`, () => api('POST', `${path}/pause`)));
    $('resume').addEventListener('click', () => act(`resume ${what}`, () => api('POST', `${path}/resume`)));
    $('rollback').addEventListener('click', () => {
      const v = $('rollback-version').value.trim();
      const to = v || 'the last version that converged';
      if (!window.confirm(`Roll ${what} back to ${to}?`)) return;
      act(`roll ${what} back to ${to}`, () => api('POST', `${path}/rollback`, v ? { version: v } : {}));
    });
    $('override').addEventListener('click', () => {
      const reason = $('override-reason').value.trim();
      if (!reason) {
        $('action-result').className = 'error';
        $('action-result').textContent = 'Breaking the glass needs a reason: it goes on the record.';
        return;
      }
      if (!window.confirm(`Let ${what} apply through its freezes and closed windows? Recorded as: ${reason}`)) return;
      act(`override the freezes of ${what}`, () => api('POST', `${path}/override`, { reason }));
    });
  }

  // ---- the loop ------------------------------------------------------------

  let current = null;
  let timer = null;

  async function refresh() {
    try {
      if (current.kind === 'instance') await refreshInstance(current);
      else await refreshOverview(current.app);
      setLive(true);
      showError('');
    } catch (e) {
      if (e.status === 401) {
        signOut(`The token was refused: ${e.message}`);
        return;
      }
      setLive(false, 'not updating');
      showError(e.message);
    }
  }

  function loop() {
    clearTimeout(timer);
    refresh().finally(() => {
      if (current) timer = setTimeout(loop, POLL_MS);
    });
  }

  function signOut(message) {
    clearTimeout(timer);
    current = null;
    me = null;
    token.forget();
    drawn.clear();
    metricsReadAt = 0;
    $('view').hidden = true;
    $('forget').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    setLive(false, 'not connected');
  }

  async function start() {
    if (!token.get()) {
      signOut('');
      return;
    }
    try {
      me = await api('GET', '/v1/whoami');
    } catch (e) {
      signOut(e.status === 401 ? `The token was refused: ${e.message}` : e.message);
      return;
    }
    const r = route();
    if (r.kind === 'overview' && !r.app) r.app = me.application;
    if (!r.app) {
      signOut('This token belongs to no application: use an application token, or open /ui/?app=NAME.');
      return;
    }
    current = r;
    $('login').hidden = true;
    $('view').hidden = false;
    $('forget').hidden = false;
    const crumbs = $('crumbs');
    if (r.kind === 'instance') {
      document.title = `${r.service} in ${r.channel} · ${r.app} · Vergence`;
      crumbs.replaceChildren('/ ', el('a', { href: `/ui/?app=${seg(r.app)}` }, r.app), ` / ${r.service} / ${r.channel}`);
      $('instance-title').textContent = `${r.app}: ${r.service} in ${r.channel}`;
      $('instance').hidden = false;
      wireInstanceActions(r);
    } else {
      document.title = `${r.app} · Vergence`;
      crumbs.replaceChildren(`/ ${r.app}`);
      $('app-title').textContent = r.app;
      $('overview').hidden = false;
    }
    loop();
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const value = $('token').value.trim();
      if (!value) return;
      token.set(value, $('remember').checked);
      $('token').value = '';
      start();
    });
    $('forget').addEventListener('click', () => signOut('Token forgotten.'));
    start();
  });
})();
