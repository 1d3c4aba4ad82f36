// flashgate ops dashboard: the charts. The last 15 minutes at 1 s, drawn
// here as SVG (no library, no third-party request: the CSP allows only the
// admin listener).
//
// This edge: GET /admin/dashboard/history, the edge's own ring (everything
// it saw), in full once, then the seconds after the last one held, every
// second. All edges: GET /admin/dashboard/fleet, the sales' timelines every
// edge writes to Redis, summed by second (attempts, answers, latency, the
// room, the stock; per edge too), every 3 s. Markers on the time axis come
// from the ring: a breaker opening or closing, a sale fenced and recovered,
// a reload, the degrade switch.
'use strict';
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var root = $('charts');
  if (!root) return;
  var HISTORY_URL = '/admin/dashboard/history';
  var FLEET_URL = '/admin/dashboard/fleet';
  var REPORT_URL = '/admin/report';
  var TOKEN_KEY = 'flashgate.adminToken';
  var WINDOW_MS = 15 * 60 * 1000;
  var POLL_MS = 1000, FLEET_MS = 3000, HIDDEN_MS = 5000, RETRY_MS = 3000;
  var SVGNS = 'http://www.w3.org/2000/svg';
  var FIELDS = ['attempts', 'p50', 'p99', 'left', 'unpaid', 'paid', 'expired', 'waiting', 'admitted', 'active'];
  var MARK_TEXT = {
    breaker_open: 'breaker open', breaker_closed: 'breaker closed', fenced: 'fenced', recovered: 'recovered',
    reload: 'reload', reload_failed: 'reload FAILED', degrade_on: 'degrade on', degrade_off: 'degrade off'
  };

  var el = {
    product: $('chart-product'), scope: $('chart-scope'), span: $('chart-span'), title: $('charts-h'), grid: $('chart-grid'), marks: $('chart-marks'),
    report: $('report-btn'), result: $('report-result'), note: $('charts-note')
  };

  // data: this edge's ring as the page holds it. Every array has one value
  // per second of t (null: the sale was not in that second's sample).
  var data = { t: [], outbox: [], lag: [], p50: [], p99: [], products: {}, order: [], marks: [], codes: [], dropped: 0 };
  // fleet: the all-edges view, by second from fromSec.
  var fleet = { fromSec: 0, to: 0, products: {}, all: null, nodes: [] };
  var st = { lastT: 0, timer: 0, fleetTimer: 0, resize: 0 };

  function headers() {
    var h = {}, t = '';
    try { t = sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { /* storage off */ }
    if (!t && $('token')) t = $('token').value.trim();
    if (t) h.Authorization = 'Bearer ' + t;
    return h;
  }
  function getJSON(url) {
    return fetch(url, { cache: 'no-store', credentials: 'same-origin', headers: headers() }).then(function (r) {
      if (!r.ok) { var e = new Error('HTTP ' + r.status); e.status = r.status; throw e; }
      return r.json();
    });
  }

  // ---- this edge's ring ----

  function emptySeries(n) {
    var s = { codes: [] };
    FIELDS.forEach(function (f) { s[f] = nulls(n); });
    return s;
  }
  function nulls(n) { var a = new Array(n); for (var i = 0; i < n; i++) a[i] = null; return a; }

  function mergeHistory(v) {
    if (!v || !Array.isArray(v.t)) return;
    if (v.codes) data.codes = v.codes;
    data.dropped = v.dropped || 0;
    var n0 = data.t.length, add = v.t.length;
    for (var k = 0; k < add; k++) {
      data.t.push(v.t[k]); data.outbox.push(v.outbox[k]); data.lag.push(v.lag[k]);
      data.p50.push(v.p50[k]); data.p99.push(v.p99[k]);
    }
    var seen = {};
    (v.products || []).forEach(function (p) {
      var d = data.products[p.productId];
      if (!d) { d = data.products[p.productId] = emptySeries(n0); data.order.push(p.productId); }
      seen[p.productId] = true;
      FIELDS.forEach(function (f) { for (var k = 0; k < add; k++) d[f].push(p[f][k]); });
      (p.codes || []).forEach(function (series, c) {
        if (!d.codes[c]) d.codes[c] = nulls(n0);
        for (var k = 0; k < add; k++) d.codes[c].push(series[k]);
      });
    });
    Object.keys(data.products).forEach(function (id) {
      if (seen[id]) return;
      var d = data.products[id];
      FIELDS.forEach(function (f) { for (var k = 0; k < add; k++) d[f].push(null); });
      d.codes.forEach(function (s) { for (var k = 0; k < add; k++) s.push(null); });
    });
    var have = {};
    data.marks.forEach(function (m) { have[m.t + m.kind + (m.product || '')] = true; });
    (v.marks || []).forEach(function (m) { if (!have[m.t + m.kind + (m.product || '')]) data.marks.push(m); });
    if (add) st.lastT = data.t[data.t.length - 1];
    trim();
  }

  // trim drops what fell out of the window.
  function trim() {
    var end = st.lastT, cut = 0;
    while (cut < data.t.length && data.t[cut] <= end - WINDOW_MS) cut++;
    if (!cut) return;
    ['t', 'outbox', 'lag', 'p50', 'p99'].forEach(function (f) { data[f].splice(0, cut); });
    Object.keys(data.products).forEach(function (id) {
      var d = data.products[id];
      FIELDS.forEach(function (f) { d[f].splice(0, cut); });
      d.codes.forEach(function (s) { s.splice(0, cut); });
      if (d.left.every(function (x) { return x === null; })) {
        delete data.products[id];
        data.order = data.order.filter(function (x) { return x !== id; });
      }
    });
    data.marks = data.marks.filter(function (m) { return m.t > end - WINDOW_MS; });
  }

  // ---- all edges ----

  // mergeFleet writes a fleet answer's seconds over what is held: the
  // last few seconds are asked again, since an edge's record of a second
  // may arrive after another's.
  function mergeFleet(v) {
    if (!v || !v.all) return;
    var from = v.all.fromSec;
    if (!fleet.fromSec || from < fleet.fromSec) fleet.fromSec = from;
    var off = from - fleet.fromSec;
    (v.products || []).forEach(function (p) {
      fleet.products[p.productId] = put(fleet.products[p.productId], p, off);
    });
    fleet.all = put(fleet.all, v.all, off);
    fleet.to = v.all.toSec;
    fleet.nodes = v.all.nodes || [];
    // Keep the window only.
    var cut = Math.max(0, (fleet.to - 900 + 1) - fleet.fromSec);
    if (cut > 0) {
      fleet.fromSec += cut;
      Object.keys(fleet.products).forEach(function (id) { fleet.products[id] = shift(fleet.products[id], cut); });
      fleet.all = shift(fleet.all, cut);
    }
  }
  function put(dst, src, off) {
    dst = dst || {};
    Object.keys(src).forEach(function (k) {
      var s = src[k];
      if (!Array.isArray(s)) {
        if (s && typeof s === 'object' && k === 'byNode') {
          dst.byNode = dst.byNode || {};
          Object.keys(s).forEach(function (n) { dst.byNode[n] = write(dst.byNode[n], s[n], off); });
        }
        return;
      }
      if (k === 'nodes' || k === 'buckets') { dst[k] = s; return; }
      if (s.length && Array.isArray(s[0])) {
        dst[k] = dst[k] || [];
        s.forEach(function (inner, i) { dst[k][i] = write(dst[k][i], inner, off); });
        return;
      }
      dst[k] = write(dst[k], s, off);
    });
    return dst;
  }
  function write(dst, src, off) {
    dst = dst || [];
    while (dst.length < off) dst.push(null);
    for (var i = 0; i < src.length; i++) dst[off + i] = src[i];
    return dst;
  }
  function shift(s, n) {
    if (!s) return s;
    Object.keys(s).forEach(function (k) {
      var v = s[k];
      if (k === 'nodes' || k === 'buckets' || !v || typeof v !== 'object') return;
      if (k === 'byNode') { Object.keys(v).forEach(function (node) { v[node].splice(0, n); }); return; }
      if (v.length && Array.isArray(v[0])) { v.forEach(function (inner) { inner.splice(0, n); }); return; }
      v.splice(0, n);
    });
    return s;
  }

  // ---- series for the charts ----

  function num(x) { return typeof x === 'number' && x >= 0 ? x : null; }
  function sumOf(arrays, n) {
    var out = nulls(n);
    arrays.forEach(function (a) {
      for (var i = 0; i < n; i++) {
        var v = num(a[i]);
        if (v !== null) out[i] = (out[i] || 0) + v;
      }
    });
    return out;
  }
  function perMinute(admitted, t) {
    // New shoppers let in over the last minute (or what there is of it),
    // per minute.
    var out = nulls(admitted.length), j = 0;
    for (var i = 0; i < admitted.length; i++) {
      while (j < i && (t[i] - t[j] > 60000 || num(admitted[j]) === null)) j++;
      var a = num(admitted[i]), b = num(admitted[j]);
      if (a === null || b === null || i === j) continue;
      out[i] = Math.max(0, (a - b) * 60000 / (t[i] - t[j]));
    }
    return out;
  }
  function fleetTimes() {
    var a = fleet.all, n = a ? a.attempts.length : 0, t = new Array(n);
    for (var i = 0; i < n; i++) t[i] = (fleet.fromSec + i) * 1000;
    return t;
  }

  // model builds every chart's lines for the selection.
  function model() {
    var pid = el.product.value, fleetOn = el.scope.value === 'fleet' && fleet.all;
    var ids = pid ? [pid] : data.order.slice();
    var lt = data.t, ln = lt.length;
    var charts = [];
    var codes = data.codes.length ? data.codes : ['200', '401', '403', '409', '410', '429', '503', 'other'];

    // Attempts and answers.
    var t, total, byCode = [], perEdge = [];
    if (fleetOn) {
      var fs = pid ? fleet.products[pid] : fleet.all;
      t = fleetTimes();
      total = fs ? fs.attempts : [];
      codes.forEach(function (c, i) { byCode.push(fs && fs.codes ? fs.codes[i] || [] : []); });
      if (fs && fs.byNode && Object.keys(fs.byNode).length > 1) {
        Object.keys(fs.byNode).sort(function (a, b) { return a - b; }).forEach(function (n, i) {
          perEdge.push({ name: 'edge ' + n, cls: 'edge e' + (i % 6), t: t, v: fs.byNode[n], dash: true });
        });
      }
    } else {
      t = lt;
      total = sumOf(ids.map(function (id) { return data.products[id].attempts; }), ln);
      codes.forEach(function (c, i) {
        byCode.push(sumOf(ids.map(function (id) { return data.products[id].codes[i] || []; }), ln));
      });
    }
    var lines = [{ name: 'attempts', cls: 'total', t: t, v: total, top: true }];
    codes.forEach(function (c, i) {
      if (byCode[i].some(function (x) { return x > 0; })) lines.push({ name: c, cls: 'code c' + c, t: t, v: byCode[i] });
    });
    charts.push({ key: 'attempts', title: 'Purchase attempts and answers, per second', unit: '/s', lines: lines.concat(perEdge), labels: true });

    // Latency.
    var p50, p99;
    if (fleetOn) {
      var fl = pid ? fleet.products[pid] : fleet.all;
      p50 = fl ? fl.p50 : []; p99 = fl ? fl.p99 : [];
    } else if (pid && data.products[pid]) {
      p50 = data.products[pid].p50; p99 = data.products[pid].p99;
    } else {
      p50 = data.p50; p99 = data.p99;
    }
    charts.push({ key: 'latency', title: '“do” latency', unit: 'ms', lines: [
      { name: 'p50', cls: 'p50', t: t, v: p50 }, { name: 'p99', cls: 'p99', t: t, v: p99, width: 2 }] });

    // Stock left.
    var stock = [];
    ids.forEach(function (id, i) {
      var v = fleetOn && fleet.products[id] ? fleet.products[id].left : data.products[id] ? data.products[id].left : [];
      stock.push({ name: id, cls: 'prod s' + (data.order.indexOf(id) % 8), t: fleetOn ? t : lt, v: v });
    });
    charts.push({ key: 'stock', title: 'Stock left', unit: 'units', lines: stock });

    // The waiting room.
    var roomIds = ids.filter(function (id) {
      var d = data.products[id];
      return d && d.waiting.some(function (x) { return x !== null && x >= 0; });
    });
    var rt = fleetOn ? t : lt, rn = rt.length, src = function (id, f) {
      if (fleetOn && fleet.products[id]) return fleet.products[id][f] || [];
      return data.products[id][f];
    };
    var admitted = sumOf(roomIds.map(function (id) { return src(id, 'admitted'); }), rn);
    charts.push({ key: 'room', title: 'Waiting room', unit: 'shoppers', empty: roomIds.length ? '' : 'No waiting room on ' + (pid || 'these sales') + '.',
      lines: [
        { name: 'waiting', cls: 'waiting', t: rt, v: sumOf(roomIds.map(function (id) { return src(id, 'waiting'); }), rn), width: 2 },
        { name: 'admitted /min', cls: 'admitted', t: rt, v: perMinute(admitted, rt) },
        { name: 'active', cls: 'active', t: rt, v: sumOf(roomIds.map(function (id) { return src(id, 'active'); }), rn) }] });

    // Payments (shared figures from Redis: the same on every edge).
    charts.push({ key: 'payments', title: 'Payments', unit: 'units', lines: ['unpaid', 'paid', 'expired'].map(function (f) {
      return { name: f, cls: f, t: lt, v: sumOf(ids.map(function (id) { return data.products[id][f]; }), ln) };
    }) });

    // The order pipeline.
    charts.push({ key: 'pipeline', title: 'Outbox pending and Kafka lag', unit: 'events', lines: [
      { name: 'outbox pending', cls: 'outbox', t: lt, v: data.outbox, width: 2 },
      { name: 'Kafka lag', cls: 'lag', t: lt, v: data.lag }] });

    var marks = data.marks.filter(function (m) { return !m.product || !pid || m.product === pid; });
    return { charts: charts, marks: marks, end: Math.max(st.lastT, fleetOn ? (fleet.to || 0) * 1000 : 0) };
  }

  // ---- drawing ----

  function svg(name, attrs, parent) {
    var n = document.createElementNS(SVGNS, name);
    Object.keys(attrs || {}).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(n);
    return n;
  }
  function nice(max) {
    if (!(max > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(max))), f = max / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
  }
  function fmtNum(v) {
    if (v === null || v === undefined) return '—';
    if (v >= 10000) return (v / 1000).toFixed(v >= 100000 ? 0 : 1) + 'k';
    if (v >= 100 || v === Math.round(v)) return String(Math.round(v));
    return v.toFixed(v < 10 ? 1 : 0);
  }
  function pad(n) { return (n < 10 ? '0' : '') + n; }
  function hhmm(ms) { var d = new Date(ms); return pad(d.getHours()) + ':' + pad(d.getMinutes()); }
  function hhmmss(ms) { var d = new Date(ms); return hhmm(ms) + ':' + pad(d.getSeconds()); }
  function lastOf(v) {
    for (var i = v.length - 1; i >= 0; i--) if (num(v[i]) !== null) return v[i];
    return null;
  }

  var cards = {};
  function card(c) {
    var box = cards[c.key];
    if (!box) {
      box = document.createElement('figure');
      box.className = 'chart';
      box.setAttribute('data-chart', c.key);
      box.innerHTML = '<figcaption><span class="title"></span> <small class="unit"></small></figcaption>' +
        '<div class="legend"></div><div class="plot"></div><p class="chart-empty" hidden></p>';
      el.grid.appendChild(box);
      cards[c.key] = box;
    }
    return box;
  }

  function draw(c, marks, end) {
    var box = card(c);
    box.querySelector('.title').textContent = c.title;
    box.querySelector('.unit').textContent = c.unit;
    var emptyP = box.querySelector('.chart-empty');
    emptyP.hidden = !c.empty;
    emptyP.textContent = c.empty || '';
    var plot = box.querySelector('.plot');
    var w = Math.max(240, Math.floor(plot.clientWidth || 300)), h = w < 420 ? 150 : 170;
    var m = { l: 40, r: 8, t: c.labels ? 16 : 8, b: 20 };
    var span = spanMs();
    var x0 = end - span, x1 = end;
    var max = 0, points = 0;
    c.lines.forEach(function (ln) {
      for (var i = 0; i < ln.v.length; i++) {
        var v = num(ln.v[i]);
        if (v !== null && ln.t[i] > x0) { max = Math.max(max, v); points++; }
      }
    });
    var top = nice(max * 1.1);
    var X = function (t) { return m.l + (t - x0) / (x1 - x0) * (w - m.l - m.r); };
    var Y = function (v) { return h - m.b - v / top * (h - m.t - m.b); };

    var s = svg('svg', { width: w, height: h, viewBox: '0 0 ' + w + ' ' + h, role: 'img', class: 'plot-svg',
      'data-points': points, 'data-max': max });
    svg('title', {}, s).textContent = c.title + ', last ' + (span / 60000) + ' min';
    // Grid and axes.
    [0, top / 2, top].forEach(function (v) {
      svg('line', { x1: m.l, x2: w - m.r, y1: Y(v), y2: Y(v), class: v ? 'grid' : 'axis' }, s);
      svg('text', { x: m.l - 4, y: Y(v) + 4, class: 'ytick' }, s).textContent = fmtNum(v);
    });
    // Time labels: about one per 90 px, on round times.
    var steps = [10000, 15000, 30000, 60000, 120000, 180000, 300000];
    var step = steps[steps.length - 1];
    for (var si = 0; si < steps.length; si++) {
      if ((w - m.l - m.r) / (span / steps[si]) >= 90) { step = steps[si]; break; }
    }
    var first = Math.ceil(x0 / step) * step;
    for (var tk = first; tk <= x1; tk += step) {
      svg('line', { x1: X(tk), x2: X(tk), y1: h - m.b, y2: h - m.b + 4, class: 'axis' }, s);
      svg('text', { x: X(tk), y: h - 5, class: 'xtick' }, s).textContent = step < 60000 ? hhmmss(tk) : hhmm(tk);
    }
    // Markers behind the lines; a label only where it does not run into
    // the one before.
    var labelEnd = [-1, -1];
    marks.forEach(function (mk) {
      if (mk.t <= x0 || mk.t > x1 + 1000) return;
      var g = svg('g', { class: 'mk mk-' + mk.kind, 'data-mark': mk.kind, 'data-product': mk.product || '' }, s);
      svg('line', { x1: X(mk.t), x2: X(mk.t), y1: m.t - (c.labels ? 4 : 0), y2: h - m.b }, g);
      svg('title', {}, g).textContent = hhmmss(mk.t) + ' ' + MARK_TEXT[mk.kind] + (mk.product ? ' ' + mk.product : '') +
        (mk.version ? ' (config version ' + mk.version + ')' : '');
      if (c.labels) {
        // Two rows of labels: above the plot, then just inside it.
        var label = MARK_TEXT[mk.kind], lw = label.length * 6, lx = Math.min(X(mk.t) + 2, w - m.r - lw);
        var row = lx > labelEnd[0] ? 0 : lx > labelEnd[1] ? 1 : -1;
        if (row < 0 && X(mk.t) - lw - 2 > Math.max(labelEnd[0], m.l)) { lx = X(mk.t) - lw - 2; row = 0; }
        if (row >= 0) {
          svg('text', { x: lx, y: row ? m.t + 8 : m.t - 6, class: 'mk-label' }, g).textContent = label;
          labelEnd[row] = lx + lw;
        }
      }
    });
    // The lines; a gap where a value is unknown. The total goes on top.
    c.lines.slice().sort(function (a, b) { return (a.top ? 1 : 0) - (b.top ? 1 : 0); }).forEach(function (ln) {
      // A lone second (a gap on each side) is drawn as a dot.
      var d = '', run = 0, last = null, lone = [];
      for (var i = 0; i <= ln.v.length; i++) {
        var v = i < ln.v.length ? num(ln.v[i]) : null;
        if (v === null || ln.t[i] <= x0) {
          if (run === 1) lone.push(i - 1);
          run = 0;
          continue;
        }
        d += (run ? 'L' : 'M') + X(ln.t[i]).toFixed(1) + ' ' + Y(v).toFixed(1);
        run++;
        last = v;
      }
      if (!d) return;
      lone.forEach(function (i) {
        svg('circle', { cx: X(ln.t[i]).toFixed(1), cy: Y(num(ln.v[i])).toFixed(1), r: 2.5, class: 'dot ' + ln.cls }, s);
      });
      var p = svg('path', { d: d, class: 'ln ' + ln.cls, 'data-series': ln.name, 'data-last': last }, s);
      if (ln.width) p.setAttribute('stroke-width', ln.width);
      if (ln.dash) p.setAttribute('stroke-dasharray', '4 3');
    });
    plot.textContent = '';
    plot.appendChild(s);
    // Legend: each line's name and its latest value.
    var lg = box.querySelector('.legend');
    lg.textContent = '';
    c.lines.forEach(function (ln) {
      var item = document.createElement('span');
      item.className = 'lg ' + ln.cls + (ln.dash ? ' dashed' : '');
      item.setAttribute('data-series', ln.name);
      var sw = document.createElement('i');
      item.appendChild(sw);
      item.appendChild(document.createTextNode(ln.name + ' '));
      var b = document.createElement('b');
      b.textContent = fmtNum(lastOf(ln.v));
      item.appendChild(b);
      lg.appendChild(item);
    });
  }

  function spanMs() { return (Number(el.span.value) || 15) * 60000; }

  function render() {
    if (!data.t.length) return;
    el.title.textContent = 'Last ' + (spanMs() / 60000) + (spanMs() === 60000 ? ' minute' : ' minutes');
    syncProducts();
    var mdl = model();
    mdl.charts.forEach(function (c) { draw(c, mdl.marks, mdl.end); });
    renderMarks(mdl.marks);
    var notes = [];
    if (data.dropped) notes.push(data.dropped + ' sale(s) not charted: the edge charts the first 16.');
    if (el.scope.value === 'fleet') {
      notes.push(fleet.all ? 'All edges: ' + (fleet.nodes.length ? fleet.nodes.map(function (n) { return 'edge ' + n; }).join(', ') : 'no edge has written yet') +
        ' (answers, latency, room and stock from the sales\' timelines; payments and pipeline are shared figures).' : 'All edges: waiting for data…');
    }
    el.note.textContent = notes.join(' ');
  }

  function renderMarks(marks) {
    el.marks.textContent = '';
    if (!marks.length) {
      var li = document.createElement('li');
      li.className = 'dim';
      li.textContent = 'Nothing marked in the last 15 minutes.';
      el.marks.appendChild(li);
      return;
    }
    marks.slice(-12).reverse().forEach(function (m) {
      var li = document.createElement('li');
      li.setAttribute('data-mark', m.kind);
      li.className = 'mk-' + m.kind;
      var b = document.createElement('b');
      b.textContent = hhmmss(m.t);
      li.appendChild(b);
      li.appendChild(document.createTextNode(' ' + MARK_TEXT[m.kind] + (m.product ? ' — ' + m.product : ' — every sale') +
        (m.version ? ' (config version ' + m.version + ')' : '')));
      el.marks.appendChild(li);
    });
  }

  function syncProducts() {
    var want = [''].concat(data.order).join('\n');
    if (el.product.getAttribute('data-ids') === want) return;
    el.product.setAttribute('data-ids', want);
    var cur = el.product.value;
    el.product.textContent = '';
    [''].concat(data.order).forEach(function (id) {
      var o = document.createElement('option');
      o.value = id;
      o.textContent = id || 'All sales';
      el.product.appendChild(o);
    });
    el.product.value = data.order.indexOf(cur) >= 0 ? cur : '';
    el.report.disabled = !el.product.value;
  }

  // ---- polling ----

  function poll() {
    clearTimeout(st.timer);
    getJSON(HISTORY_URL + (st.lastT ? '?since=' + st.lastT : '')).then(function (v) {
      mergeHistory(v);
      render();
      st.timer = setTimeout(poll, document.hidden ? HIDDEN_MS : POLL_MS);
    }, function () {
      st.timer = setTimeout(poll, RETRY_MS);
    });
  }
  function pollFleet() {
    clearTimeout(st.fleetTimer);
    if (el.scope.value !== 'fleet') return;
    getJSON(FLEET_URL + (fleet.to ? '?since=' + (fleet.to - 5) * 1000 : '')).then(function (v) {
      mergeFleet(v);
      render();
      st.fleetTimer = setTimeout(pollFleet, document.hidden ? HIDDEN_MS : FLEET_MS);
    }, function () {
      st.fleetTimer = setTimeout(pollFleet, RETRY_MS);
    });
  }

  el.product.addEventListener('change', function () {
    el.report.disabled = !el.product.value;
    render();
  });
  el.span.addEventListener('change', render);
  el.scope.addEventListener('change', function () {
    if (el.scope.value === 'fleet') pollFleet(); else clearTimeout(st.fleetTimer);
    render();
  });
  window.addEventListener('resize', function () {
    clearTimeout(st.resize);
    st.resize = setTimeout(render, 150);
  });
  var tokenForm = $('token-form');
  if (tokenForm) tokenForm.addEventListener('submit', function () { setTimeout(poll, 0); });

  // The sale report: one self-contained HTML page, fetched with the admin
  // token and saved as a file (a link cannot send the token).
  el.report.addEventListener('click', function () {
    var id = el.product.value;
    if (!id) return;
    el.report.disabled = true;
    el.result.setAttribute('data-ok', 'busy');
    el.result.textContent = 'Building the report of ' + id + '…';
    fetch(REPORT_URL + '?productId=' + encodeURIComponent(id), { cache: 'no-store', credentials: 'same-origin', headers: headers() })
      .then(function (r) {
        if (!r.ok) return r.text().then(function (t) { throw new Error('HTTP ' + r.status + ': ' + t.slice(0, 200)); });
        return r.blob();
      }).then(function (b) {
        var a = document.createElement('a');
        a.href = URL.createObjectURL(b);
        a.download = 'report-' + id + '.html';
        document.body.appendChild(a);
        a.click();
        setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
        el.result.setAttribute('data-ok', 'true');
        el.result.textContent = 'Saved report-' + id + '.html (' + Math.round(b.size / 1024) + ' KB).';
      }, function (e) {
        el.result.setAttribute('data-ok', 'false');
        el.result.textContent = 'Report failed: ' + e.message;
      }).then(function () { el.report.disabled = !el.product.value; });
  });

  poll();
})();
