// The route rooms' panel (issue 28): every route room's state from
// GET /admin/rooms, polled every 2 s, and its queueing method switched with
// POST /admin/rooms, live on every edge; over time: the last minute's
// figures the edge computes (admitted a minute, abandon rate, average and p90
// wait) and a line of waiting and active over the last 10 minutes this page
// has seen. A file of its own beside dash.js:
// it shares nothing with it but the admin token the page keeps.
(function () {
  'use strict';
  var URL_ROOMS = '/admin/rooms';
  var POLL_MS = 2000, IDLE_MS = 10000;
  var METHODS = ['fifo', 'random', 'passthrough', 'reject', 'queue_all', 'config'];
  var panel = document.getElementById('routerooms');
  var body = document.getElementById('routerooms-rows');
  var result = document.getElementById('routerooms-result');
  if (!panel || !body) return;
  var timer = 0, busy = false;
  var HISTORY = 300; // 10 minutes of polls
  var hist = {};     // room → [{w: waiting, a: active}]
  var SVG = 'http://www.w3.org/2000/svg';

  function token() {
    var t = '';
    try { t = sessionStorage.getItem('flashgate.adminToken') || ''; } catch (e) { /* storage off */ }
    var f = document.getElementById('token');
    return t || (f ? f.value.trim() : '');
  }
  function headers(json) {
    var h = {}, t = token();
    if (t) h.Authorization = 'Bearer ' + t;
    if (json) h['Content-Type'] = 'application/json';
    return h;
  }
  function show(ok, msg) { result.textContent = msg; result.setAttribute('data-ok', ok); }
  function num(n) { return typeof n === 'number' && isFinite(n) ? n.toLocaleString('en-US') : '—'; }
  function secs(n) { return typeof n === 'number' && n >= 0 ? (n < 10 ? n.toFixed(1) : Math.round(n)) + ' s' : '—'; }
  function pct(n) { return typeof n === 'number' && n >= 0 ? (100 * n).toFixed(1) + ' %' : '—'; }

  // spark draws waiting (and active, dashed) over the room's history.
  function spark(td, h) {
    var W = 120, H = 28, svg = td.querySelector('svg');
    if (!svg) {
      svg = document.createElementNS(SVG, 'svg');
      svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
      svg.setAttribute('width', W);
      svg.setAttribute('height', H);
      svg.setAttribute('role', 'img');
      ['w', 'a'].forEach(function (k) {
        var p = document.createElementNS(SVG, 'polyline');
        p.setAttribute('class', 'spark-' + k);
        p.setAttribute('fill', 'none');
        p.setAttribute('stroke', 'currentColor');
        if (k === 'a') p.setAttribute('stroke-dasharray', '3 2');
        svg.appendChild(p);
      });
      td.appendChild(svg);
    }
    var top = 1;
    h.forEach(function (x) { top = Math.max(top, x.w, x.a); });
    ['w', 'a'].forEach(function (k) {
      var pts = h.map(function (x, i) {
        return (h.length > 1 ? i * W / (HISTORY - 1) : 0).toFixed(1) + ',' + (H - 1 - x[k] * (H - 2) / top).toFixed(1);
      });
      svg.querySelector('.spark-' + k).setAttribute('points', pts.join(' '));
    });
    var last = h[h.length - 1];
    svg.setAttribute('aria-label', 'Waiting ' + last.w + ', active ' + last.a + '; the highest over the last ' + h.length + ' readings: ' + top);
  }

  function row(name) {
    var tr = body.querySelector('tr[data-room="' + name + '"]');
    if (tr) return tr;
    tr = document.createElement('tr');
    tr.setAttribute('data-room', name);
    var th = document.createElement('th');
    th.textContent = name;
    tr.appendChild(th);
    ['method', 'num waiting', 'num active', 'num admitted', 'num abandoned', 'num ended', 'num perMin', 'num waitAvg',
      'num waitP90', 'num abandonRate', 'spark'].forEach(function (c) {
      var td = document.createElement('td');
      td.className = c;
      tr.appendChild(td);
    });
    var ctl = document.createElement('td');
    var sel = document.createElement('select');
    sel.setAttribute('aria-label', 'Queueing method of ' + name);
    METHODS.forEach(function (m) {
      var o = document.createElement('option');
      o.value = m;
      o.textContent = m === 'config' ? 'as configured' : m;
      sel.appendChild(o);
    });
    var btn = document.createElement('button');
    btn.type = 'button';
    btn.textContent = 'Apply';
    ctl.appendChild(sel);
    ctl.appendChild(btn);
    tr.appendChild(ctl);
    body.appendChild(tr);
    return tr;
  }

  function render(rooms) {
    var names = Object.keys(rooms).sort();
    panel.hidden = names.length === 0;
    var empty = body.querySelector('tr.empty');
    if (empty && names.length) empty.remove();
    names.forEach(function (n) {
      var r = rooms[n], tr = row(n);
      var m = tr.querySelector('.method');
      m.textContent = r.method + (r.methodSet ? ' (operator)' : '');
      ['waiting', 'active', 'admitted', 'abandoned', 'ended'].forEach(function (k) {
        tr.querySelector('.' + k).textContent = num(r[k]);
      });
      tr.querySelector('.perMin').textContent = num(Math.round(r.admittedPerMin || 0));
      tr.querySelector('.waitAvg').textContent = secs(r.waitAvgS);
      tr.querySelector('.waitP90').textContent = secs(r.waitP90S);
      tr.querySelector('.abandonRate').textContent = pct(r.abandonRate);
      var h = hist[n] || (hist[n] = []);
      h.push({ w: r.waiting || 0, a: r.active || 0 });
      if (h.length > HISTORY) h.shift();
      spark(tr.querySelector('.spark'), h);
    });
  }

  function poll() {
    clearTimeout(timer);
    fetch(URL_ROOMS, { cache: 'no-store', credentials: 'same-origin', headers: headers(false) }).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    }).then(function (rooms) {
      render(rooms || {});
      timer = setTimeout(poll, Object.keys(rooms || {}).length ? POLL_MS : IDLE_MS);
    }, function () {
      timer = setTimeout(poll, IDLE_MS);
    });
  }

  body.addEventListener('click', function (e) {
    var btn = e.target.closest ? e.target.closest('button') : null;
    if (!btn || busy) return;
    var tr = btn.closest('tr'), name = tr.getAttribute('data-room');
    var method = tr.querySelector('select').value;
    busy = true;
    show('busy', 'Sending…');
    fetch(URL_ROOMS, { method: 'POST', credentials: 'same-origin', cache: 'no-store', headers: headers(true),
      body: JSON.stringify({ room: name, method: method }) }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (d) {
        if (r.ok) show('true', 'Room ' + name + ' now queues by ' + d.method + ', on every edge.');
        else show('false', (d && d.message) || 'Refused (HTTP ' + r.status + ').');
      });
    }, function (err) {
      show('false', 'Could not reach the edge: ' + err.message);
    }).then(function () { busy = false; poll(); });
  });

  poll();
})();
