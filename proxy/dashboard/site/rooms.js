// The route rooms' panel (issue 28): every route room's state from
// GET /admin/rooms, polled every 2 s, and its queueing method switched with
// POST /admin/rooms, live on every edge. A file of its own beside dash.js:
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

  function row(name) {
    var tr = body.querySelector('tr[data-room="' + name + '"]');
    if (tr) return tr;
    tr = document.createElement('tr');
    tr.setAttribute('data-room', name);
    var th = document.createElement('th');
    th.textContent = name;
    tr.appendChild(th);
    ['method', 'num waiting', 'num active', 'num admitted', 'num abandoned', 'num ended'].forEach(function (c) {
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
