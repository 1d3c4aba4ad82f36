// Flash-sale page. Plain JS, no framework, no third-party requests: the page
// must load fast for a million shoppers at the same second and must not
// depend on anyone else's CDN being up at that second.
'use strict';
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var el = {
    name: $('product-name'), price: $('price'), status: $('status'), countdown: $('countdown'),
    image: $('product-image'), placeholder: $('placeholder'), conn: $('conn'),
    loginForm: $('login-form'), userId: $('user-id'), loginBtn: $('login-btn'), loginError: $('login-error'),
    user: $('user'), logout: $('logout-btn'),
    qty: $('qty'), buy: $('buy'), limitNote: $('limit-note'),
    message: $('message'), orderLine: $('order-line'), orderId: $('order-id')
  };

  // Same rule as static.ValidProductID on the server.
  var PRODUCT_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
  var SESSION_KEY = 'flashgate.userId';
  var POLL_MS = 1000;
  var POLL_HIDDEN_MS = 5000;  // a background tab needs no second-by-second status
  var POLL_MAX_BACKOFF_MS = 5000;
  var DEFAULT_MAX_QTY = 5;    // when the sale sets no per-shopper limit
  var RESULT_GIVE_UP_MS = 5 * 60 * 1000;
  var EVENTS_QUIET_MS = 10000; // an event stream that says nothing (a buffering proxy) falls back to polling

  var NETWORK = 'Network problem — check your connection.';
  var GENERIC = 'Something went wrong — please try again.';
  var MESSAGES = {
    SOLD_OUT: 'Sold out — every item has been claimed.',
    LIMIT_REACHED: 'You\u2019ve already bought the maximum for this product.',
    DEGRADED: 'The sale is busy right now — please try again in a moment.',
    RECOVERING: 'The sale is catching up — hold on, it reopens by itself in a few seconds.',
    NOT_STARTED: 'The sale hasn\u2019t started yet — the button turns on when it does.',
    ENDED: 'Sorry, the sale has ended.',
    BAD_TOKEN: 'Your purchase link expired — please press Buy again.',
    UNAUTHENTICATED: 'Please sign in again to continue.',
    UNKNOWN_PRODUCT: 'This product does not exist.',
    FORBIDDEN: 'Sorry, this purchase isn\u2019t allowed from your account or network.',
    BAD_REQUEST: 'Something about that request was wrong — please reload the page and try again.',
    TOO_LARGE: 'That request was too large — please reload the page and try again.',
    released: 'It was cancelled, and the item went back on sale.'
  };
  var STATUS_TEXT = { upcoming: 'Coming soon', active: 'On sale now', soldout: 'Sold out', ended: 'Sale ended' };

  var state = {
    productId: productIdFromPath(location.pathname),
    product: null,       // last status answer
    unknown: false,      // the server says there is no such product
    samples: [],         // recent clock samples {offset, rtt}
    offset: 0,           // server clock minus browser clock, ms
    user: loadUser(),
    busy: false,         // a purchase is in flight
    limitReached: false,
    bought: 0,        // units this shopper bought here since signing in
    cooldownUntil: 0,    // browser ms; a 429's Retry-After is relative, so no server clock needed
    msgKey: '',
    pollTimer: 0,
    pollFailures: 0,
    polling: false
  };

  // ---- helpers ----

  function productIdFromPath(path) {
    var m = /^\/seckill\/([^/]+)\/?$/.exec(path);
    if (!m) return '';
    var id;
    try { id = decodeURIComponent(m[1]); } catch (e) { return ''; }
    return PRODUCT_ID.test(id) ? id : '';
  }

  function loadUser() {
    try { return sessionStorage.getItem(SESSION_KEY) || ''; } catch (e) { return ''; }
  }
  function saveUser(id) {
    try {
      if (id) sessionStorage.setItem(SESSION_KEY, id); else sessionStorage.removeItem(SESSION_KEY);
    } catch (e) { /* private mode: the page still works for this visit */ }
  }

  // Writing only on change keeps layout work and screen-reader chatter down:
  // render runs five times a second.
  function setText(node, text) { if (node.textContent !== text) node.textContent = text; }
  function show(node, on) { if (node.hidden === on) node.hidden = !on; }

  function serverNow() { return Date.now() + state.offset; }

  function pad(n) { return n < 10 ? '0' + n : '' + n; }
  function formatDuration(ms) {
    var total = Math.max(0, Math.ceil(ms / 1000));
    var d = Math.floor(total / 86400), h = Math.floor(total / 3600) % 24, m = Math.floor(total / 60) % 60, s = total % 60;
    return (d ? d + 'd ' : '') + pad(h) + ':' + pad(m) + ':' + pad(s);
  }

  var priceFormat = null;
  function formatPrice(p) {
    var n = typeof p === 'number' ? p : parseFloat(p);
    if (!isFinite(n)) return p == null ? '—' : String(p);
    var cur = (state.product && state.product.currency) || document.documentElement.getAttribute('data-currency');
    if (cur && (!priceFormat || priceFormat.cur !== cur)) {
      try {
        priceFormat = { cur: cur, f: new Intl.NumberFormat(document.documentElement.lang || 'en', { style: 'currency', currency: cur, currencyDisplay: 'narrowSymbol' }) };
      } catch (e) { priceFormat = { cur: cur, f: null }; }
    }
    return cur && priceFormat.f ? priceFormat.f.format(n) : n.toFixed(2);
  }

  function seconds(n) { return n + (n === 1 ? ' second' : ' seconds'); }

  function parseRetryAfter(v) {
    if (!v) return 0;
    if (/^\s*\d+\s*$/.test(v)) return parseInt(v, 10);
    var t = Date.parse(v);  // an HTTP date is on the server's clock
    return isNaN(t) ? 0 : Math.max(0, Math.ceil((t - serverNow()) / 1000));
  }

  function codeForStatus(status) {
    switch (status) {
      case 401: return 'UNAUTHENTICATED';
      case 413: return 'TOO_LARGE';
      case 429: return 'RATE_LIMITED';
      case 503: return 'DEGRADED';
      default: return '';
    }
  }

  function messageFor(r) {
    if (r.code === 'RATE_LIMITED') return 'Too many tries — please wait ' + seconds(r.retryAfter) + '.';
    return MESSAGES[r.code] || GENERIC;
  }

  // request resolves with {ok, status, data, code, retryAfter, at} for every
  // HTTP answer and rejects only when there is none (network, timeout).
  function request(method, url, body, timeoutMs) {
    var ctl = typeof AbortController === 'function' ? new AbortController() : null;
    var timer = ctl ? setTimeout(function () { ctl.abort(); }, timeoutMs || 10000) : 0;
    var headers = { 'Accept': 'application/json' };
    if (body) headers['Content-Type'] = 'application/json';
    return fetch(url, {
      method: method, headers: headers, body: body ? JSON.stringify(body) : undefined,
      credentials: 'same-origin', cache: 'no-store', signal: ctl ? ctl.signal : undefined
    }).then(function (res) {
      var at = performance.now();
      return res.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { /* an HTML error page from a proxy */ }
        var r = { ok: res.ok, status: res.status, data: data, at: at, code: '', retryAfter: 0 };
        if (!res.ok) {
          r.code = data && typeof data.code === 'string' ? data.code : codeForStatus(res.status);
          if (res.status === 429 || r.code === 'RATE_LIMITED') {
            r.code = 'RATE_LIMITED';
            r.retryAfter = Math.min(3600, Math.max(1, parseRetryAfter(res.headers.get('Retry-After')) || 1));
          }
        }
        return r;
      });
    }).finally(function () { clearTimeout(timer); });
  }

  // ---- messages ----

  function setMessage(text, kind, key) {
    setText(el.message, text || '');
    if (kind) el.message.setAttribute('data-kind', kind); else el.message.removeAttribute('data-kind');
    state.msgKey = key || '';
  }
  function showOrder(id) {
    setText(el.orderId, id || '');
    show(el.orderLine, !!id);
  }

  // ---- sign in ----

  function renderUser() {
    var signedIn = !!state.user;
    show(el.loginForm, !signedIn);
    show(el.user, signedIn);
    show(el.logout, signedIn);
    if (signedIn) {
      el.user.textContent = '';
      var label = document.createElement('span');
      label.className = 'who-label';
      label.textContent = 'Signed in as ';
      el.user.appendChild(label);
      var b = document.createElement('strong');
      b.textContent = state.user;
      el.user.appendChild(b);
    }
  }

  function signIn(id) {
    state.user = id;
    state.limitReached = false;
    state.bought = 0;
    saveUser(id);
    setText(el.loginError, '');
    if (state.msgKey === 'auth') setMessage('');
    renderUser();
    render();
    (el.buy.disabled ? el.name : el.buy).focus();
  }

  function signOut(reason) {
    state.user = '';
    saveUser('');
    renderUser();
    if (reason) setMessage(reason, 'bad', 'auth');
    render();
  }

  el.loginForm.addEventListener('submit', function (ev) {
    ev.preventDefault();
    if (el.loginBtn.disabled) return;  // Enter pressed again while signing in
    var id = el.userId.value.trim();
    if (!id) {
      setText(el.loginError, 'Please enter your user ID.');
      el.userId.setAttribute('aria-invalid', 'true');
      el.userId.focus();
      return;
    }
    el.userId.removeAttribute('aria-invalid');
    setText(el.loginError, '');
    el.loginBtn.disabled = true;
    setText(el.loginBtn, 'Signing in…');
    request('POST', '/api/login', { userId: id }, 8000).then(function (r) {
      if (r.ok) {
        signIn(r.data && typeof r.data.userId === 'string' && r.data.userId ? r.data.userId : id);
      } else if (r.status === 404 && !MESSAGES[r.code]) {
        setText(el.loginError, 'Sign-in is not available right now.');
      } else if (r.code === 'BAD_REQUEST') {
        setText(el.loginError, 'That user ID is not valid — please check it and try again.');
      } else {
        setText(el.loginError, messageFor(r));
      }
    }, function () {
      setText(el.loginError, NETWORK);
    }).finally(function () {
      el.loginBtn.disabled = false;
      setText(el.loginBtn, 'Sign in');
    });
  });

  el.logout.addEventListener('click', function () {
    signOut('');
    el.userId.focus();
  });

  // ---- status and clock ----

  // The countdown must agree with the server, not with a phone whose clock
  // is minutes off. Each poll gives a sample: the server's time against the
  // browser time halfway through the round trip. The sample with the shortest
  // round trip among the last few is the least skewed by network delay.
  function addClockSample(serverTimeMs, sentAt, rtt) {
    state.samples.push({ offset: serverTimeMs - (sentAt + rtt / 2), rtt: rtt });
    if (state.samples.length > 8) state.samples.shift();
    var best = state.samples[0];
    for (var i = 1; i < state.samples.length; i++) if (state.samples[i].rtt <= best.rtt) best = state.samples[i];
    state.offset = best.offset;
  }

  function effectiveStatus() {
    var p = state.product;
    if (!p) return '';
    var now = serverNow();
    // Between polls the clock decides: the button turns on at zero, not up
    // to a second later when the next answer arrives.
    if (p.status === 'upcoming' && p.startMs && now >= p.startMs) return p.endMs && now >= p.endMs ? 'ended' : 'active';
    if (p.status === 'active' && p.endMs && now >= p.endMs) return 'ended';
    return p.status;
  }

  function applyStatus(d) {
    var prev = state.product;
    state.product = d;
    state.unknown = false;
    setText(el.name, d.name || state.productId);
    document.title = (d.name || state.productId) + ' — Flash sale';
    setText(el.price, formatPrice(d.price));
    if (d.image && typeof d.image === 'string' && (!prev || prev.image !== d.image)) {
      el.image.alt = d.name || '';
      el.image.src = d.image;
    }
    var max = d.limit > 0 ? Math.min(99, Math.floor(d.limit)) : DEFAULT_MAX_QTY;
    if (el.qty.options.length !== max) {
      var keep = Math.min(parseInt(el.qty.value, 10) || 1, max);
      el.qty.textContent = '';
      for (var i = 1; i <= max; i++) el.qty.appendChild(new Option(String(i), String(i), false, i === keep));
    }
    show(el.limitNote, d.limit > 0);
    setText(el.limitNote, d.limit > 0 ? 'Limit ' + d.limit + ' per shopper.' : '');
  }

  el.image.addEventListener('load', function () { show(el.image, true); show(el.placeholder, false); });
  el.image.addEventListener('error', function () { show(el.image, false); show(el.placeholder, true); });

  function schedulePoll(ms) {
    clearTimeout(state.pollTimer);
    state.pollTimer = setTimeout(pollStatus, ms);
  }

  function pollStatus() {
    if (state.polling) return;
    state.polling = true;
    var sentAt = Date.now(), t0 = performance.now();
    var next = document.hidden ? POLL_HIDDEN_MS : POLL_MS;
    request('GET', '/api/seckill/status?productId=' + encodeURIComponent(state.productId), null, 5000).then(function (r) {
      if (r.ok && r.data && typeof r.data.status === 'string') {
        if (typeof r.data.serverTimeMs === 'number') addClockSample(r.data.serverTimeMs, sentAt, r.at - t0);
        applyStatus(r.data);
        state.pollFailures = 0;
        show(el.conn, false);
      } else if (r.code === 'UNKNOWN_PRODUCT') {
        productUnknown();
        state.pollFailures = 0;
        show(el.conn, false);
        next = POLL_HIDDEN_MS;  // it may be published later; no need to hurry
      } else {
        if (r.status === 401) signOut(MESSAGES.UNAUTHENTICATED);
        next = r.retryAfter ? r.retryAfter * 1000 : failed();
      }
    }, function () {
      next = failed();
    }).finally(function () {
      state.polling = false;
      render();
      schedulePoll(next);
    });

    function failed() {
      state.pollFailures++;
      show(el.conn, true);
      return Math.min(POLL_MAX_BACKOFF_MS, POLL_MS * state.pollFailures);
    }
  }

  function productUnknown() {
    state.unknown = true;
    state.product = null;
    setText(el.name, 'Product not found');
    setText(el.price, '—');
    if (state.msgKey !== 'unknown') setMessage(MESSAGES.UNKNOWN_PRODUCT, 'bad', 'unknown');
  }

  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && state.productId) schedulePoll(0);
  });

  // ---- render ----

  var cdLabel = document.createTextNode('');
  var cdTime = document.createElement('b');
  el.countdown.appendChild(cdLabel);
  el.countdown.appendChild(cdTime);

  function render() {
    var st = effectiveStatus();
    var p = state.product;
    var now = serverNow();

    el.status.setAttribute('data-status', st || (state.unknown ? 'ended' : 'loading'));
    setText(el.status, STATUS_TEXT[st] || (state.unknown ? 'Unavailable' : 'Loading…'));

    var label = '', time = '';
    if (st === 'upcoming' && p.startMs) { label = 'Starts in '; time = formatDuration(p.startMs - now); }
    else if (st === 'active' && p.endMs) { label = 'Ends in '; time = formatDuration(p.endMs - now); }
    setText(cdLabel, label);
    setText(cdTime, time);

    var wait = Math.ceil((state.cooldownUntil - Date.now()) / 1000);
    if (state.msgKey === 'rate') {
      if (wait > 0) setText(el.message, 'Too many tries — please wait ' + seconds(wait) + '.');
      else setMessage('');
    }

    var text, enabled = false;
    if (state.unknown) text = 'Unavailable';
    else if (!st) text = 'Loading…';
    else if (st === 'soldout') text = 'Sold out';
    else if (st === 'ended') text = 'Ended';
    else if (st === 'upcoming') text = p.startMs ? 'Starts in ' + formatDuration(p.startMs - now) : 'Not started';
    else if (st !== 'active') text = 'Unavailable';
    else if (!state.user) text = 'Sign in to buy';
    else if (state.busy) text = 'Processing…';
    else if (state.limitReached) text = 'Limit reached';
    else if (wait > 0) text = 'Try again in ' + wait + 's';
    else { text = 'Buy now'; enabled = true; }
    setText(el.buy, text);
    if (el.buy.disabled === enabled) el.buy.disabled = !enabled;
    // The quantity can be chosen ahead of the start, so the shopper only has
    // to press one button when the countdown ends.
    el.qty.disabled = state.busy || !(st === 'active' || st === 'upcoming');
  }

  // ---- buy ----

  el.buy.addEventListener('click', buy);

  function buy() {
    if (el.buy.disabled || state.busy) return;
    var qty = parseInt(el.qty.value, 10) || 1;
    var pid = state.productId;
    state.busy = true;
    showOrder('');
    setMessage('Reserving your item…', 'info');
    render();
    request('POST', '/api/seckill/token', { productId: pid }, 8000).then(function (r) {
      if (!r.ok || !r.data || typeof r.data.token !== 'string') return refused(r);
      return request('POST', '/api/seckill/do', { productId: pid, token: r.data.token, quantity: qty }, 10000).then(function (r) {
        if (!r.data || r.data.orderId == null) return refused(r);
        var id = String(r.data.orderId);
        showOrder(id);
        // A 503 that names an order: the purchase went through but is not
        // confirmed yet (status "pending"), or the sale could not tell
        // whether it did (status "unknown"). Either way the order's result
        // says how it ended; NOT_FOUND there only means "not yet".
        var unknown = !r.ok && r.data.status === 'unknown';
        if (!unknown) {
          // Reaching the per-shopper limit turns Buy off rather than invite a 409.
          state.bought += qty;
          if (state.product && state.product.limit > 0 && state.bought >= state.product.limit) state.limitReached = true;
        }
        if (r.ok && r.data.status === 'success') return settle(id, r.data);
        setMessage(unknown ? 'The sale is busy — checking whether order ' + id + ' went through…' :
          'Queued — order ' + id + ' is being confirmed…', 'info');
        return waitForOutcome(id);
      });
    }).then(null, function () {
      setMessage(NETWORK, 'bad');
    }).finally(function () {
      state.busy = false;
      render();
    });
  }

  // refused turns an error answer into words and into what it implies for
  // the page, so the shopper is not invited to try what cannot work.
  function refused(r) {
    var p = state.product;
    switch (r.code) {
      case 'UNAUTHENTICATED':
        signOut(MESSAGES.UNAUTHENTICATED);
        el.userId.focus();
        return;
      case 'RATE_LIMITED':
        state.cooldownUntil = Date.now() + r.retryAfter * 1000;
        setMessage(messageFor(r), 'bad', 'rate');
        return;
      case 'SOLD_OUT':
        if (p) p.status = 'soldout';
        break;
      case 'ENDED':
        if (p) p.status = 'ended';
        break;
      case 'LIMIT_REACHED':
        state.limitReached = true;
        break;
      case 'NOT_STARTED':
        schedulePoll(0);  // our clock may be off; ask again now
        break;
      case 'UNKNOWN_PRODUCT':
        productUnknown();
        return;
      case 'RECOVERING':
        setMessage(messageFor(r), 'info');
        return;
    }
    setMessage(r.ok ? GENERIC : messageFor(r), 'bad');
  }

  function settle(id, d) {
    if (d.status === 'success') {
      setMessage('Success! Order ' + id + ' confirmed.', 'ok');
    } else if (d.status === 'failed') {
      var code = d.reason || (d.order && (d.order.code || d.order.reason));
      var why = code && MESSAGES[code] ? ' ' + MESSAGES[code] : '';
      setMessage('Sorry — order ' + id + ' could not be completed.' + why, 'bad');
    } else {
      setMessage('Order ' + id + ' is still being confirmed — please check back in a few minutes.', 'info');
    }
  }

  // waitForOutcome listens on the event stream when the server offers one and
  // polls the result otherwise; either way it resolves once, when the order
  // is settled (or we give up waiting).
  function waitForOutcome(id) {
    return new Promise(function (resolve) {
      var done = false, es = null, timer = 0, failures = 0;
      var deadline = Date.now() + RESULT_GIVE_UP_MS;
      // Orders live under their product, so the lookups name both.
      var q = encodeURIComponent(id) + '&productId=' + encodeURIComponent(state.productId);

      function finish(d) {
        if (done) return;
        done = true;
        if (es) es.close();
        clearTimeout(timer);
        settle(id, d);
        resolve();
      }
      function terminal(d) { return d && (d.status === 'success' || d.status === 'failed'); }

      function poll() {
        if (done) return;
        if (Date.now() > deadline) return finish({ status: 'pending' });
        request('GET', '/api/seckill/result?orderId=' + q, null, 5000).then(function (r) {
          if (r.ok && terminal(r.data)) return finish(r.data);
          if (r.status === 401) {
            done = true;
            signOut('Please sign in again to see how order ' + id + ' went.');
            return resolve();
          }
          failures = r.ok || r.status === 404 ? 0 : failures + 1;
          timer = setTimeout(poll, r.retryAfter ? r.retryAfter * 1000 : Math.min(POLL_MAX_BACKOFF_MS, POLL_MS * (failures + 1)));
        }, function () {
          failures++;
          timer = setTimeout(poll, Math.min(POLL_MAX_BACKOFF_MS, POLL_MS * (failures + 1)));
        });
      }

      function fallBack() {
        if (es) { es.close(); es = null; }
        clearTimeout(timer);
        poll();
      }

      if (typeof EventSource !== 'function') return poll();
      try {
        es = new EventSource('/api/seckill/events?orderId=' + q);
      } catch (e) {
        return poll();
      }
      es.onmessage = function (ev) {
        var d;
        try { d = JSON.parse(ev.data); } catch (e) { return; }
        if (terminal(d)) finish(d);
      };
      // EventSource would reconnect on its own, but an endpoint that is not
      // there (404) or a proxy that cuts streams should cost one request, not
      // a retry loop: polling always works.
      es.onerror = function () { if (!done) fallBack(); };
      timer = setTimeout(function () { if (!done) fallBack(); }, EVENTS_QUIET_MS);
    });
  }

  // ---- start ----

  renderUser();
  if (!state.productId) {
    productUnknown();
    render();
    return;
  }
  render();
  pollStatus();
  setInterval(render, 200);
})();
