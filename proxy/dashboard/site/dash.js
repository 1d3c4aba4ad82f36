// flashgate ops dashboard. Plain JS, no framework, no third-party requests:
// it must work from any edge's admin listener during an incident, with
// nothing else up.
//
// Data: GET /admin/dashboard.json (a Snapshot). When the listener needs no
// token, a Server-Sent Events stream pushes it every second; EventSource
// cannot send an Authorization header, so with a token the page polls the
// JSON every second instead, and it falls back to polling whenever the
// stream fails. Rates are computed here from the counters of successive
// snapshots, over the last few seconds of server time. The waiting rooms
// come from GET /admin/waitroom, polled every 2 s beside it; their buttons
// post to POST /admin/waitroom as the other actions post.
'use strict';
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var JSON_URL = '/admin/dashboard.json';
  var EVENTS_URL = '/admin/dashboard/events';
  var TOKEN_KEY = 'flashgate.adminToken';
  var POLL_MS = 1000;
  var POLL_HIDDEN_MS = 5000;   // a background tab needs no second-by-second data
  var RETRY_MS = 3000;         // after a network failure
  var STALE_MS = 3500;         // data older than this is flagged
  var RATE_WINDOW_MS = 3000;   // rates average over this much server time
  var MIN_SPAN_MS = 900;       // ... and over at least this much
  var SSE_QUIET_MS = 5000;     // a stream that says nothing (a buffering proxy) is given up
  var SSE_MAX_ERRORS = 3;      // reconnects in a row without a message before giving up

  var el = {
    node: $('node'), version: $('version'), serverTime: $('server-time'),
    breaker: $('breaker'), degradedAll: $('degraded-all'), reload: $('reload'), updated: $('updated'),
    notice: $('notice'), products: $('products'), payments: $('payments'), filters: $('filters'), pipeline: $('pipeline'),
    productIds: $('product-ids'), tokenForm: $('token-form'), token: $('token')
  };

  var state = {
    gen: 0,          // bumped on every (re)start; async answers of an older generation are dropped
    mode: '',        // 'sse', 'poll' or ''
    es: null,
    timer: 0,
    quietTimer: 0,
    last: null,      // last snapshot
    lastAt: 0,       // browser time it arrived
    history: [],     // [{t, node, a: {productId: attempts}, r: {filter: rejected}}], oldest first
    rows: { products: {}, payments: {}, filters: {} }
  };

  // ---- token ----

  function getToken() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  }
  function setToken(t) {
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage off: the token lives only in the field */ }
  }
  function headers(json) {
    var h = {};
    var t = getToken() || el.token.value.trim();
    if (t) h.Authorization = 'Bearer ' + t;
    if (json) h['Content-Type'] = 'application/json';
    return h;
  }

  // ---- formatting ----

  function fmt(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '—';
    return n.toLocaleString('en-US');
  }
  function fmtCount(n) { return typeof n === 'number' && n < 0 ? 'unknown' : fmt(n); }
  function fmtRate(r) {
    if (r === null || r === undefined) return '…'; // measuring: needs a second of history
    if (r === 0) return '0';
    return r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString('en-US');
  }
  function pad(n) { return (n < 10 ? '0' : '') + n; }
  function clock(d) { return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()); }
  function dateTime(d, ref) {
    var same = d.getFullYear() === ref.getFullYear() && d.getMonth() === ref.getMonth() && d.getDate() === ref.getDate();
    return same ? clock(d) : d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + clock(d);
  }
  function ago(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor(s % 3600 / 60) + ' min ago';
    return Math.floor(s / 86400) + ' d ago';
  }
  function text(node, s) { if (node.textContent !== s) node.textContent = s; }
  function attr(node, k, v) { if (node.getAttribute(k) !== v) node.setAttribute(k, v); }
  function badge(node, label, tone) { text(node, label); attr(node, 'data-tone', tone); }

  // ---- rates ----

  // remember keeps the counters of s; rates() compares s with the oldest
  // sample inside the window. A node change, a clock going back or a
  // counter going down (a restart) starts the history again.
  function remember(s) {
    var sample = { t: s.serverTimeMs, node: s.node, a: {}, r: {} };
    (s.products || []).forEach(function (p) { sample.a[p.productId] = p.attempts; });
    (s.filters || []).forEach(function (f) { sample.r[f.name] = f.rejected; });
    var h = state.history;
    if (h.length && (h[h.length - 1].node !== s.node || h[h.length - 1].t >= s.serverTimeMs)) h.length = 0;
    h.push(sample);
    while (h.length > 2 && h[1].t <= s.serverTimeMs - RATE_WINDOW_MS) h.shift();
  }
  function rate(kind, key) {
    var h = state.history;
    if (h.length < 2) return null;
    var a = h[0], b = h[h.length - 1];
    var va = a[kind][key], vb = b[kind][key];
    // Two samples a few ms apart (the probe, then the stream's first
    // event) would give a wild rate: wait for a second's span.
    if (typeof va !== 'number' || typeof vb !== 'number' || vb < va || b.t - a.t < MIN_SPAN_MS) return null;
    return (vb - va) / ((b.t - a.t) / 1000);
  }

  // ---- rendering ----

  function apply(s) {
    if (!s || typeof s !== 'object') return;
    state.last = s;
    state.lastAt = Date.now();
    remember(s);
    var now = new Date(s.serverTimeMs);

    text(el.node, s.node || '—');
    text(el.version, s.version || '—');
    text(el.serverTime, s.serverTimeMs ? dateTime(now, new Date()) : '—');
    el.serverTime.title = s.serverTimeMs ? now.toISOString() : '';

    // One breaker per product: the badge says how many are not closed.
    var br = s.breaker || 'unknown';
    var nOpen = (s.products || []).filter(function (p) { return p.breaker === 'open'; }).length;
    var nHalf = (s.products || []).filter(function (p) { return p.breaker === 'half_open'; }).length;
    var brLabel = 'Breaker: ' + br.replace('_', '-');
    if (nOpen || nHalf) {
      var parts = [];
      if (nOpen) parts.push(nOpen + ' open');
      if (nHalf) parts.push(nHalf + ' half-open');
      brLabel += ' (' + parts.join(', ') + ' of ' + (s.products || []).length + ' products)';
    }
    badge(el.breaker, brLabel,
      br === 'closed' ? 'ok' : br === 'open' ? 'bad' : br === 'half_open' ? 'warn' : 'none');

    var nDeg = (s.products || []).filter(function (p) { return p.degraded; }).length;
    if (s.degradedAll) badge(el.degradedAll, 'DEGRADED: all products', 'bad');
    else if (nDeg) badge(el.degradedAll, 'Degraded: ' + nDeg + (nDeg === 1 ? ' product' : ' products'), 'warn');
    else badge(el.degradedAll, 'Degrade: off', 'ok');

    renderReload(s.reload || {}, s.serverTimeMs);
    renderProducts(s.products || []);
    renderPayments(s.products || []);
    renderFilters(s.filters || []);
    renderPipeline(s.pipeline || {});
    renderUpdated();
  }

  function renderReload(r, serverMs) {
    var n = el.reload;
    n.textContent = '';
    n.appendChild(document.createTextNode('Last reload: '));
    if (!r.at) {
      n.appendChild(document.createTextNode('none yet'));
      return;
    }
    var at = new Date(r.at);
    var b = document.createElement('b');
    b.textContent = isNaN(at) ? r.at : dateTime(at, new Date(serverMs)) + ' (' + ago(serverMs - at.getTime()) + ')';
    b.title = r.at;
    n.appendChild(b);
    n.appendChild(document.createTextNode(' by ' + (r.trigger || 'unknown') + ', config version ' + r.version));
    if (r.error) {
      var e = document.createElement('span');
      e.className = 'err';
      e.textContent = ' — FAILED: ' + r.error;
      n.appendChild(e);
    }
  }

  // keyed keeps one row per key across updates (no flicker, stable
  // elements for tests and for a reader's eye), in the snapshot's order.
  function keyed(tbody, rows, list, keyOf, attrName, make, update, emptyText, cols) {
    var seen = {};
    var prev = null;
    list.forEach(function (item) {
      var k = String(keyOf(item));
      seen[k] = true;
      var tr = rows[k];
      if (!tr) {
        tr = make(item);
        tr.setAttribute(attrName, k);
        rows[k] = tr;
      }
      update(tr, item, k);
      var want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    });
    Object.keys(rows).forEach(function (k) {
      if (!seen[k]) { rows[k].remove(); delete rows[k]; }
    });
    var empty = tbody.querySelector('tr.empty');
    if (list.length && empty) empty.remove();
    if (!list.length && !empty) {
      var tr = document.createElement('tr');
      tr.className = 'empty';
      var td = document.createElement('td');
      td.colSpan = cols;
      tr.appendChild(td);
      tbody.appendChild(tr);
      empty = tr;
    }
    if (empty) text(empty.firstChild, emptyText);
  }

  function cells(tr, specs) {
    specs.forEach(function (s) {
      var c = document.createElement(s[0]);
      c.className = s[1];
      if (s[0] === 'th') c.scope = 'row';
      tr.appendChild(c);
    });
  }

  function flag(td, on, label, tone) {
    td.textContent = '';
    if (on) {
      var b = document.createElement('span');
      b.className = 'badge';
      b.setAttribute('data-tone', tone);
      b.textContent = label;
      td.appendChild(b);
    } else {
      var d = document.createElement('span');
      d.className = 'dim';
      d.textContent = 'no';
      td.appendChild(d);
    }
  }

  var STATUS = {
    active: ['on sale', 'ok'], upcoming: ['upcoming', 'info'], soldout: ['sold out', 'bad'], ended: ['ended', 'none'],
    recovering: ['recovering', 'warn']
  };

  function renderProducts(list) {
    keyed(el.products, state.rows.products, list, function (p) { return p.productId; }, 'data-product',
      function () {
        var tr = document.createElement('tr');
        cells(tr, [['th', 'pid'], ['td', 'status'], ['td', 'num big remaining'], ['td', 'stock'], ['td', 'num sold'],
          ['td', 'num big aps'], ['td', 'soldout'], ['td', 'hot'], ['td', 'degraded'], ['td', 'breaker'], ['td', 'num outbox'], ['td', 'num stored']]);
        var pid = tr.firstChild;
        pid.innerHTML = '<span class="id"></span><span class="name"></span>';
        var stock = tr.querySelector('.stock');
        stock.innerHTML = '<span class="bar"><i></i></span><span class="of"></span>';
        return tr;
      },
      function (tr, p) {
        var q = function (c) { return tr.querySelector('.' + c); };
        text(q('id'), p.productId);
        text(q('name'), p.name || '');
        q('name').title = p.name || '';
        var st = STATUS[p.status] || [p.status || 'unknown', 'none'];
        var sc = q('status');
        if (!sc.firstChild) { var b = document.createElement('span'); b.className = 'badge'; sc.appendChild(b); }
        badge(sc.firstChild, st[0], st[1]);
        sc.title = p.recovering ? 'Redis lost this sale or went back in time: closed on every edge until it is rebuilt from the ledger' +
          (p.recoveries ? ' (' + p.recoveries + ' rebuild(s) run by this edge)' : '') : '';
        var level = p.remaining <= 0 ? 'zero' : p.stock > 0 && p.remaining * 10 <= p.stock ? 'low' : 'ok';
        var rem = q('remaining');
        text(rem, fmt(p.remaining));
        attr(rem, 'data-level', level);
        attr(rem, 'data-value', String(p.remaining));
        var bar = q('bar');
        attr(bar, 'data-level', level);
        var pct = p.stock > 0 ? Math.max(0, Math.min(100, p.remaining / p.stock * 100)) : 0;
        bar.firstChild.style.width = pct.toFixed(1) + '%';
        bar.title = pct.toFixed(1) + '% left';
        text(q('of'), 'of ' + fmt(p.stock));
        text(q('sold'), fmt(p.sold));
        attr(q('sold'), 'data-value', String(p.sold));
        var r = rate('a', p.productId);
        text(q('aps'), fmtRate(r));
        attr(q('aps'), 'data-value', r === null ? '' : String(r));
        q('aps').title = fmt(p.attempts) + ' attempts in all';
        flag(q('soldout'), p.soldOut, 'SOLD OUT', 'bad');
        flag(q('hot'), p.hot, 'HOT', 'warn');
        flag(q('degraded'), p.degraded, 'DEGRADED', 'bad');
        var pb = p.breaker || 'unknown', bc = q('breaker');
        if (bc.getAttribute('data-state') !== pb) {
          bc.textContent = '';
          var bs = document.createElement('span');
          if (pb === 'closed') {
            bs.className = 'dim';
          } else {
            bs.className = 'badge';
            bs.setAttribute('data-tone', pb === 'open' ? 'bad' : pb === 'half_open' ? 'warn' : 'none');
          }
          bs.textContent = pb === 'closed' ? 'closed' : pb.replace('_', '-').toUpperCase();
          bc.appendChild(bs);
          attr(bc, 'data-state', pb);
        }
        text(q('outbox'), fmtCount(p.outboxPending));
        text(q('stored'), fmtCount(p.stored));
      }, 'No sales on this edge.', 12);
    // The action forms offer the ids seen here.
    var ids = list.map(function (p) { return p.productId; }).join('\n');
    if (el.productIds.getAttribute('data-ids') !== ids) {
      el.productIds.setAttribute('data-ids', ids);
      el.productIds.textContent = '';
      list.forEach(function (p) {
        var o = document.createElement('option');
        o.value = p.productId;
        if (p.name) o.label = p.name;
        el.productIds.appendChild(o);
      });
    }
  }

  function renderPayments(list) {
    keyed(el.payments, state.rows.payments, list, function (p) { return p.productId; }, 'data-product',
      function () {
        var tr = document.createElement('tr');
        cells(tr, [['th', 'pid'], ['td', 'num unpaid'], ['td', 'num paid'], ['td', 'num expired'], ['td', 'num due'], ['td', 'deadlines']]);
        return tr;
      },
      function (tr, p) {
        var q = function (c) { return tr.querySelector('.' + c); };
        text(q('pid'), p.productId);
        text(q('unpaid'), fmtCount(p.unpaid));
        text(q('paid'), fmtCount(p.paid));
        text(q('expired'), fmtCount(p.expired));
        text(q('due'), fmtCount(p.due));
        text(q('deadlines'), fmtDeadlines(p));
      }, 'No sales on this edge.', 6);
  }

  // fmtDeadlines: "0:42, 1:10, 2:30, …" — time left on the edge's
  // clock (the snapshot's), "overdue" for one the sweep has not released yet.
  function fmtDeadlines(p) {
    if (typeof p.due !== 'number' || p.due < 0) return 'unknown';
    if (p.due === 0) return 'none';
    var now = state.last ? state.last.serverTimeMs : Date.now();
    var parts = (p.deadlines || []).slice(0, 5).map(function (d) {
      var left = Math.ceil((d.payByMs - now) / 1000);
      if (left <= 0) return 'overdue';
      var h = Math.floor(left / 3600), m = Math.floor(left / 60) % 60, s = left % 60;
      return (h ? h + ':' + (m < 10 ? '0' : '') + m : String(m)) + ':' + (s < 10 ? '0' : '') + s;
    });
    return parts.join(', ') + (p.due > parts.length ? ', …' : '');
  }

  function renderFilters(list) {
    keyed(el.filters, state.rows.filters, list, function (f) { return f.name; }, 'data-filter',
      function () {
        var tr = document.createElement('tr');
        cells(tr, [['th', 'fname'], ['td', 'ftype dim'], ['td', 'num passed'], ['td', 'num rejected'], ['td', 'num big rps'], ['td', 'num dry']]);
        return tr;
      },
      function (tr, f) {
        var q = function (c) { return tr.querySelector('.' + c); };
        text(q('fname'), f.name);
        text(q('ftype'), f.type || '');
        text(q('passed'), fmt(f.passed));
        text(q('rejected'), fmt(f.rejected));
        attr(q('rejected'), 'data-value', String(f.rejected));
        var r = rate('r', f.name);
        text(q('rps'), fmtRate(r));
        attr(q('rps'), 'data-value', r === null ? '' : String(r));
        attr(tr, 'data-rejecting', r > 0 ? 'true' : 'false');
        text(q('dry'), fmt(f.dryRunRejected));
      }, 'No filters in the chain.', 6);
  }

  function renderPipeline(p) {
    function set(key, value, tone, unknown) {
      var box = el.pipeline.querySelector('[data-key="' + key + '"]');
      var dd = box.querySelector('dd');
      text(dd, value);
      dd.classList.toggle('unknown', !!unknown);
      attr(box, 'data-tone', tone);
    }
    set('outboxPending', fmt(p.outboxPending), p.outboxPending > 0 ? 'warn' : 'none');
    var lagUnknown = typeof p.kafkaLag !== 'number' || p.kafkaLag < 0;
    set('kafkaLag', lagUnknown ? 'unknown' : fmt(p.kafkaLag), !lagUnknown && p.kafkaLag > 0 ? 'warn' : 'none', lagUnknown);
    var stUnknown = typeof p.stored !== 'number' || p.stored < 0;
    set('stored', stUnknown ? 'unknown' : fmt(p.stored), 'none', stUnknown);
    set('deadLettered', fmt(p.deadLettered), p.deadLettered > 0 ? 'bad' : 'none');
    set('consumerRunning', p.consumerRunning ? 'running' : 'stopped', p.consumerRunning ? 'ok' : 'bad');
  }

  function renderUpdated() {
    var how = state.mode === 'sse' ? 'live stream' : state.mode === 'poll' ? 'polling every second' : 'not connected';
    if (!state.lastAt) {
      text(el.updated, 'Waiting for data… (' + how + ')');
      attr(el.updated, 'data-stale', 'true');
      return;
    }
    var age = Date.now() - state.lastAt;
    var stale = age > STALE_MS;
    text(el.updated, (stale ? 'STALE: no update for ' + Math.round(age / 1000) + ' s — last ' : 'Updated ') +
      clock(new Date(state.lastAt)) + ' · ' + how);
    attr(el.updated, 'data-stale', stale ? 'true' : 'false');
  }

  function notice(msg) {
    text(el.notice, msg || '');
    el.notice.hidden = !msg;
  }

  // ---- connection ----

  function stop() {
    state.gen++;
    if (state.es) { state.es.close(); state.es = null; }
    clearTimeout(state.timer);
    clearTimeout(state.quietTimer);
    state.mode = '';
  }

  // fetchSnapshot resolves with the snapshot or rejects with an Error whose
  // .status is the HTTP status (0 for a network failure).
  function fetchSnapshot(withToken) {
    return fetch(JSON_URL, { cache: 'no-store', credentials: 'same-origin', headers: withToken ? headers(false) : {} })
      .then(function (r) {
        if (!r.ok) {
          var err = new Error('HTTP ' + r.status);
          err.status = r.status;
          throw err;
        }
        return r.json();
      }, function (e) {
        var err = new Error('network: ' + e.message);
        err.status = 0;
        throw err;
      });
  }

  // start probes the JSON without a token: 200 means the listener is open
  // and the stream can be used; 401 means a token is needed, so poll with it.
  function start() {
    stop();
    var gen = state.gen;
    renderUpdated();
    fetchSnapshot(false).then(function (s) {
      if (gen !== state.gen) return;
      notice('');
      apply(s);
      if (window.EventSource) startStream(gen); else startPolling(gen);
    }, function (err) {
      if (gen !== state.gen) return;
      if (err.status === 401 || err.status === 403) {
        if (getToken()) { startPolling(gen); return; }
        notice('This admin listener needs the admin token: enter it in "Admin token" at the top right.');
        el.token.focus();
        return;
      }
      notice('Cannot reach the edge (' + err.message + '). Retrying…');
      state.timer = setTimeout(start, RETRY_MS);
    });
  }

  function startPolling(gen) {
    state.mode = 'poll';
    renderUpdated();
    pollOnce(gen);
  }

  function pollOnce(gen) {
    fetchSnapshot(true).then(function (s) {
      if (gen !== state.gen) return;
      notice('');
      apply(s);
      schedule(gen, document.hidden ? POLL_HIDDEN_MS : POLL_MS);
    }, function (err) {
      if (gen !== state.gen) return;
      if (err.status === 401 || err.status === 403) {
        // Polling on with a refused token would only fill the audit log.
        notice('The admin token was refused (HTTP ' + err.status + '). Enter the right one in "Admin token".');
        state.mode = '';
        renderUpdated();
        return;
      }
      notice('Cannot get data from the edge (' + err.message + '). Retrying…');
      schedule(gen, RETRY_MS);
    });
  }

  function schedule(gen, ms) {
    clearTimeout(state.timer);
    state.timer = setTimeout(function () { if (gen === state.gen) pollOnce(gen); }, ms);
  }

  function startStream(gen) {
    state.mode = 'sse';
    renderUpdated();
    var es = new EventSource(EVENTS_URL);
    var errors = 0;
    state.es = es;
    armQuiet(gen);
    es.onmessage = function (e) {
      if (gen !== state.gen) return;
      errors = 0;
      var s;
      try { s = JSON.parse(e.data); } catch (x) { return; }
      notice('');
      apply(s);
      armQuiet(gen);
    };
    es.onerror = function () {
      if (gen !== state.gen) return;
      // The server ends a stream now and then; EventSource reconnects by
      // itself (CONNECTING). A refused or failing stream is CLOSED, or keeps
      // failing: poll instead.
      errors++;
      if (es.readyState === 2 || errors >= SSE_MAX_ERRORS) fallBack(gen);
    };
  }

  function armQuiet(gen) {
    clearTimeout(state.quietTimer);
    state.quietTimer = setTimeout(function () { if (gen === state.gen) fallBack(gen); }, SSE_QUIET_MS);
  }

  function fallBack(gen) {
    if (state.es) { state.es.close(); state.es = null; }
    clearTimeout(state.quietTimer);
    startPolling(gen);
  }

  // refresh fetches once, outside the stream or poll cycle, after an action.
  function refresh() {
    var gen = state.gen;
    fetchSnapshot(true).then(function (s) { if (gen === state.gen) apply(s); }, function () {});
  }

  // ---- actions ----

  // post resolves with {ok, status, data (parsed JSON or null), text}. It
  // is always JSON, a body or not: the admin listener refuses any other
  // state-changing call (what a cross-site form could send).
  function post(url, body) {
    var init = { method: 'POST', credentials: 'same-origin', cache: 'no-store', headers: headers(true) };
    if (body !== undefined) init.body = JSON.stringify(body);
    return fetch(url, init).then(function (r) {
      return r.text().then(function (t) {
        var data = null;
        try { data = JSON.parse(t); } catch (e) { /* not JSON */ }
        return { ok: r.ok, status: r.status, data: data, text: t };
      });
    });
  }

  // failure turns an answer into one plain sentence; never a JSON dump.
  function failure(res) {
    var d = res.data;
    if (res.status === 401) return 'Refused: the admin token is missing or wrong. Enter it in "Admin token" at the top.';
    if (d && typeof d === 'object') {
      if (typeof d.message === 'string' && d.message) {
        return 'Failed: ' + d.message + ' (HTTP ' + res.status + (d.code ? ', ' + d.code : '') + ')';
      }
      if (typeof d.error === 'string' && d.error) return 'Failed: ' + d.error + ' (HTTP ' + res.status + ')';
      return 'Failed with HTTP ' + res.status + '.';
    }
    var t = (res.text || '').trim();
    if (t && t.length <= 300 && t.charAt(0) !== '<') return 'Failed: ' + t + ' (HTTP ' + res.status + ')';
    return 'Failed with HTTP ' + res.status + '.';
  }

  function show(form, ok, msg) {
    var p = form.querySelector('.result');
    p.textContent = msg;
    p.setAttribute('data-ok', ok);
  }

  // action wires a form: build() returns [url, body] or a string to show as
  // an error; done(res) returns the success sentence.
  function action(id, build, done) {
    var form = $(id);
    var pressed = null;
    form.addEventListener('click', function (e) {
      if (e.target.tagName === 'BUTTON') pressed = e.target;
    });
    form.addEventListener('submit', function (e) {
      e.preventDefault();
      var btn = e.submitter || pressed;
      var req = build(form, btn);
      if (typeof req === 'string') { show(form, 'false', req); return; }
      var buttons = form.querySelectorAll('button');
      buttons.forEach(function (b) { b.disabled = true; });
      show(form, 'busy', 'Sending…');
      post(req[0], req[1]).then(function (res) {
        if (res.ok) {
          show(form, 'true', done(res.data || {}, req[1]));
          refresh();
        } else {
          show(form, 'false', failure(res));
        }
      }, function (err) {
        show(form, 'false', 'Could not reach the edge: ' + err.message);
      }).then(function () {
        buttons.forEach(function (b) { b.disabled = false; });
      });
    });
  }

  function val(form, name) { return form.elements[name].value.trim(); }
  function int(form, name) {
    var v = val(form, name);
    return v === '' ? NaN : Number(v);
  }

  action('form-activity', function (f) {
    var body = {
      productId: val(f, 'productId'), name: val(f, 'name'), price: val(f, 'price'),
      stock: int(f, 'stock'), limit: val(f, 'limit') === '' ? 1 : int(f, 'limit'),
      start: val(f, 'start'), end: val(f, 'end')
    };
    if (!Number.isInteger(body.stock) || !Number.isInteger(body.limit)) return 'Stock and limit must be whole numbers.';
    return ['/admin/activities', body];
  }, function (d, body) {
    return 'Saved sale ' + (d.productId || body.productId) + '.';
  });

  action('form-restock', function (f) {
    var body = { productId: val(f, 'productId'), add: int(f, 'add') };
    if (!Number.isInteger(body.add) || body.add < 1) return 'Add must be a whole number of at least 1.';
    return ['/admin/restock', body];
  }, function (d, body) {
    var s = 'Added ' + fmt(body.add) + ' to ' + body.productId + '.';
    if (typeof d.stock === 'number') s += ' Stock is now ' + fmt(d.stock) + '.';
    return s;
  });

  var degradeForm = $('form-degrade');
  function degradeLabels() {
    var id = val(degradeForm, 'productId');
    var bs = degradeForm.querySelectorAll('button');
    bs[0].textContent = id ? 'Degrade ' + id : 'Degrade ALL products';
    bs[1].textContent = id ? 'Restore ' + id : 'Restore ALL products';
  }
  degradeForm.elements.productId.addEventListener('input', degradeLabels);
  action('form-degrade', function (f, btn) {
    if (!btn || !btn.hasAttribute('data-on')) return 'Press Degrade or Restore.';
    return ['/admin/degrade', { productId: val(f, 'productId'), on: btn.getAttribute('data-on') === 'true' }];
  }, function (d, body) {
    var who = body.productId ? body.productId : 'every product';
    return body.on ? 'Degraded ' + who + ': purchases now get 503 DEGRADED.' : 'Restored ' + who + ': purchases are served again.';
  });

  action('form-cancel', function (f) {
    return ['/admin/orders/cancel', { productId: val(f, 'productId'), orderId: val(f, 'orderId') }];
  }, function (d, body) {
    var s = 'Order ' + body.orderId + ' cancelled';
    if (typeof d.status === 'string' && d.status) s += ' (now ' + d.status + ')';
    return s + '.';
  });

  action('form-reload', function () {
    return ['/admin/reload', undefined];
  }, function (d) {
    if (d.error) return 'Reload failed: ' + d.error;
    return 'Config reloaded: now version ' + d.version + '.';
  });

  // ---- waiting rooms ----

  // GET /admin/waitroom, polled on its own every 2 s: it reads the rooms'
  // state in Redis, so it is not part of the snapshot the stream pushes
  // every second. The panel shows only when a sale has a room.
  var WR_URL = '/admin/waitroom';
  var WR_POLL_MS = 2000;
  var WR_IDLE_MS = 10000;  // no room, or an edge without the call: look again now and then
  var CONFIRM_MS = 5000;   // "Confirm close" waits this long for the second press
  var wr = { timer: 0, rows: {}, busy: false };
  el.waitroom = $('waitroom');
  el.waitrooms = $('waitrooms');
  el.wrResult = $('waitroom-result');

  var QUEUE = {
    prequeue: ['pre-queue', 'info'], open: ['admitting', 'ok'], upcoming: ['not open yet', 'none'],
    paused: ['PAUSED', 'warn'], closed: ['CLOSED', 'bad'], soldout: ['sold out', 'bad'], ended: ['ended', 'none']
  };
  function queueState(r) {
    if (r.closed) return [r.soldOut ? 'CLOSED: sold out' : 'CLOSED', 'bad'];
    if (r.paused) return ['PAUSED', 'warn'];
    return QUEUE[r.status] || [r.status || 'unknown', 'none'];
  }
  function fmtEta(ms) {
    if (typeof ms !== 'number' || !isFinite(ms) || ms < 0) return '—';
    var s = Math.round(ms / 1000);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + pad(s % 60) + ' s';
    return Math.floor(s / 3600) + ' h ' + pad(Math.floor(s % 3600 / 60)) + ' min';
  }

  function renderWaitrooms(list) {
    var rooms = list.filter(function (r) { return r && r.enabled !== false; });
    el.waitroom.hidden = rooms.length === 0;
    keyed(el.waitrooms, wr.rows, rooms, function (r) { return r.productId; }, 'data-product',
      function () {
        var tr = document.createElement('tr');
        cells(tr, [['th', 'pid'], ['td', 'queue'], ['td', 'num big waiting'], ['td', 'num admitted'], ['td', 'num active'],
          ['td', 'num rate'], ['td', 'num eta'], ['td', 'controls']]);
        tr.firstChild.innerHTML = '<span class="id"></span>';
        tr.querySelector('.controls').innerHTML = '<div class="row-actions">' +
          '<button type="button" data-action="pause">Pause</button>' +
          '<input type="number" name="admitPerMinute" min="1" step="1" inputmode="numeric" aria-label="New admission rate, shoppers per minute">' +
          '<button type="button" data-action="rate">Set rate</button>' +
          '<button type="button" class="danger" data-action="close">Close queue</button></div>';
        return tr;
      },
      function (tr, r) {
        var q = function (c) { return tr.querySelector('.' + c); };
        text(q('id'), r.productId);
        var st = queueState(r), qc = q('queue');
        if (!qc.firstChild) { var b = document.createElement('span'); b.className = 'badge'; qc.appendChild(b); }
        badge(qc.firstChild, st[0], st[1]);
        qc.title = r.opensMs ? 'Opens ' + new Date(r.opensMs).toString() : '';
        ['waiting', 'admitted', 'active'].forEach(function (k) {
          text(q(k), fmtCount(r[k]));
          attr(q(k), 'data-value', String(r[k]));
        });
        text(q('rate'), fmt(r.admitPerMinute));
        attr(q('rate'), 'data-value', String(r.admitPerMinute));
        text(q('eta'), r.closed ? '—' : r.paused ? 'paused' : fmtEta(r.etaMs));
        attr(q('eta'), 'data-value', String(r.etaMs));
        var pause = tr.querySelector('[data-action=pause]');
        var want = r.paused ? 'resume' : 'pause';
        if (pause.getAttribute('data-do') !== want) {
          pause.setAttribute('data-do', want);
          pause.textContent = r.paused ? 'Resume' : 'Pause';
        }
        var input = tr.querySelector('input');
        input.placeholder = String(r.admitPerMinute || '');
        input.disabled = !!r.closed;
        if (!wr.busy) tr.querySelectorAll('button').forEach(function (b) { b.disabled = !!r.closed; });
      }, 'No waiting rooms.', 8);
  }

  function wrShow(ok, msg) {
    el.wrResult.textContent = msg;
    el.wrResult.setAttribute('data-ok', ok);
  }

  function wrPoll() {
    clearTimeout(wr.timer);
    fetch(WR_URL, { cache: 'no-store', credentials: 'same-origin', headers: headers(false) }).then(function (r) {
      if (!r.ok) { var e = new Error('HTTP ' + r.status); e.status = r.status; throw e; }
      return r.json();
    }).then(function (d) {
      var list = (d && d.sales) || [];
      renderWaitrooms(list);
      wr.timer = setTimeout(wrPoll, !list.length ? WR_IDLE_MS : document.hidden ? POLL_HIDDEN_MS : WR_POLL_MS);
    }, function (err) {
      // 404: an edge without waiting rooms. 401/403: the token notice is
      // the main loop's; try again once a token is given (or later).
      if (err.status === 404) el.waitroom.hidden = true;
      wr.timer = setTimeout(wrPoll, WR_IDLE_MS);
    });
  }

  var WR_DONE = {
    pause: function (id) { return 'Paused admission to ' + id + ': shoppers in line keep their places.'; },
    resume: function (id) { return 'Admission to ' + id + ' resumed.'; },
    rate: function (id, b) { return id + ' now admits ' + fmt(b.admitPerMinute) + ' shoppers per minute.'; },
    close: function (id) { return 'The queue of ' + id + ' is closed: everyone still in line is told.'; }
  };

  el.waitrooms.addEventListener('click', function (e) {
    var btn = e.target.closest ? e.target.closest('button[data-action]') : null;
    if (!btn || btn.disabled) return;
    var tr = btn.closest('tr'), id = tr.getAttribute('data-product');
    var body = { productId: id, action: btn.getAttribute('data-action') };
    if (body.action === 'pause') body.action = btn.getAttribute('data-do') || 'pause';
    if (body.action === 'rate') {
      var v = tr.querySelector('input').value.trim();
      var n = v === '' ? NaN : Number(v);
      if (!Number.isInteger(n) || n < 1) {
        wrShow('false', 'The rate must be a whole number of shoppers per minute, at least 1.');
        return;
      }
      body.admitPerMinute = n;
    }
    if (body.action === 'close' && btn.getAttribute('data-armed') !== 'true') {
      btn.setAttribute('data-armed', 'true');
      btn.textContent = 'Confirm close';
      wrShow('busy', 'Press "Confirm close" to close the queue of ' + id + ' for everyone in line.');
      setTimeout(function () { btn.removeAttribute('data-armed'); btn.textContent = 'Close queue'; }, CONFIRM_MS);
      return;
    }
    var buttons = tr.querySelectorAll('button');
    wr.busy = true;
    buttons.forEach(function (b) { b.disabled = true; });
    wrShow('busy', 'Sending…');
    post(WR_URL, body).then(function (res) {
      if (res.ok) {
        wrShow('true', WR_DONE[body.action](id, body));
        if (body.action === 'rate') tr.querySelector('input').value = '';
      } else {
        wrShow('false', failure(res));
      }
    }, function (err) {
      wrShow('false', 'Could not reach the edge: ' + err.message);
    }).then(function () {
      wr.busy = false;
      buttons.forEach(function (b) { b.disabled = false; });
      btn.removeAttribute('data-armed');
      if (body.action === 'close') btn.textContent = 'Close queue';
      wrPoll();
    });
  });

  // ---- token form ----

  el.token.value = getToken();
  el.tokenForm.addEventListener('submit', function (e) {
    e.preventDefault();
    setToken(el.token.value.trim());
    start();
    wrPoll();
  });

  // ---- ticking ----

  setInterval(renderUpdated, 1000);
  document.addEventListener('visibilitychange', function () {
    // Coming back to a slow-polled tab: fetch at once.
    if (!document.hidden && state.mode === 'poll') schedule(state.gen, 0);
  });

  start();
  wrPoll();
})();
