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
    message: $('message'), orderLine: $('order-line'), orderId: $('order-id'),
    signinTitle: $('signin-title'), buyRow: $('buy-row'),
    room: $('room'), roomLine: $('room-line'), roomMeter: $('room-meter'), roomBar: $('room-bar'),
    join: $('join'), roomNote: $('room-note'), roomLive: $('room-live')
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
  // The waiting room's poll: 1-2 s while the place moves, jittered so that
  // ten thousand tabs opened at the same second do not ask at the same
  // millisecond; slower where nothing can change but a close.
  var QUEUE_POLL_MS = 1000, QUEUE_JITTER_MS = 1000;
  var QUEUE_SLOW_MS = 5000;       // in the pre-queue, and while it is the shopper's turn
  var QUEUE_MAX_BACKOFF_MS = 15000;
  var QUEUE_ANNOUNCE_MS = 30000;  // a screen reader hears the moving place at most this often
  var POW_GIVE_UP_MS = 120000;    // a browser check that takes longer has gone wrong
  // An order waiting to be paid: its result is asked every few seconds and
  // just after its deadline (the edges release it within a fraction of a
  // second of it). The last order per shopper and sale is remembered in
  // localStorage, so that a reload shows it again instead of Buy.
  var PAY_POLL_MS = 5000;
  var PAY_AFTER_DEADLINE_MS = 500;
  var ORDER_KEY = 'flashgate.order.';
  var ORDER_ID = /^[0-9]{1,20}$/;

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
    released: 'It was cancelled, and the item went back on sale.',
    NOT_ADMITTED: 'It\u2019s not your turn yet — the Buy button turns on when it is.',
    NOT_JOINED: 'Please join the queue first.',
    BAD_TICKET: 'Your place in the queue could not be confirmed on this device — please join again.',
    BAD_CHALLENGE: 'The browser check did not go through — please press Join again.'
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
    polling: false,
    pay: null,           // the order to pay {id, qty, payByMs}, while it is unpaid
    payTimer: 0,
    token: null,         // a purchase token the status answer carried {value, expiresMs}, unused
    openPolled: false,   // polled once the countdown reached the start
    room: newRoom()
  };

  // newRoom is what the page knows of this shopper's place in the sale's
  // waiting room. It is per signed-in user: the ticket is bound to one.
  function newRoom() {
    return {
      checked: false,  // asked the server whether this shopper already has a place
      q: null,         // last queue answer {status, position, etaMs, admittedUntilMs, soldOut, ...}
      token: null,     // the purchase token the last queue answer carried at the turn {value, expiresMs}, unused
      qAt: 0,          // browser ms when it arrived
      firstPosition: 0,
      step: '',        // '' | 'checking' (the browser check runs) | 'joining'
      timer: 0,
      failures: 0,
      polling: false,
      worker: null,
      live: '', liveAt: 0, liveKind: ''
    };
  }

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

  // The shopper's last order for this sale {id, qty}, per user and product.
  function orderKey() { return ORDER_KEY + state.user + '.' + state.productId; }
  function rememberOrder(id, qty) {
    try { localStorage.setItem(orderKey(), JSON.stringify({ id: id, qty: qty })); } catch (e) { /* private mode */ }
  }
  function forgetOrder() {
    try { localStorage.removeItem(orderKey()); } catch (e) { /* private mode */ }
  }
  function recalledOrder() {
    var o;
    try { o = JSON.parse(localStorage.getItem(orderKey()) || 'null'); } catch (e) { return null; }
    if (!o || typeof o.id !== 'string' || !ORDER_ID.test(o.id)) return null;
    return { id: o.id, qty: o.qty > 0 ? Math.floor(o.qty) : 1 };
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
    resetRoom();
    state.user = id;
    state.token = null;  // the previous shopper's, if any
    schedulePoll(0);     // this shopper's status, with her token once the sale is open
    state.limitReached = false;
    state.bought = 0;
    saveUser(id);
    setText(el.loginError, '');
    if (state.msgKey === 'auth') setMessage('');
    renderUser();
    render();
    if (roomOn()) checkQueue();
    restoreOrder();
    (!el.join.hidden && !el.join.disabled ? el.join : el.buy.disabled || el.buyRow.hidden ? el.name : el.buy).focus();
  }

  function signOut(reason) {
    resetRoom();
    stopPay();
    state.user = '';
    state.token = null;
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
    // A signed-in shopper's status carries a purchase token once the sale
    // is open: the Buy button then needs no token call of its own.
    state.token = typeof d.token === 'string' && typeof d.tokenExpiresMs === 'number' ?
      { value: d.token, expiresMs: d.tokenExpiresMs } : null;
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
    if (d.limit > 0 && state.bought >= d.limit) state.limitReached = true;
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
    var next = document.hidden || inLine() ? POLL_HIDDEN_MS : POLL_MS;
    request('GET', '/api/seckill/status?productId=' + encodeURIComponent(state.productId), null, 5000).then(function (r) {
      if (r.ok && r.data && typeof r.data.status === 'string') {
        if (typeof r.data.serverTimeMs === 'number') addClockSample(r.data.serverTimeMs, sentAt, r.at - t0);
        applyStatus(r.data);
        if (roomOn() && state.user && !state.room.checked) checkQueue();
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

    // The countdown reached the start: ask at once, so that the answer (and
    // the purchase token it carries) is there when Buy is pressed.
    if (st === 'active' && p && p.status === 'upcoming' && !state.openPolled) {
      state.openPolled = true;
      schedulePoll(0);
    }

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

    if (state.msgKey === 'pay' && state.pay) setText(el.message, payText(now));

    var room = renderRoom(st, now);

    var text, enabled = false;
    if (state.unknown) text = 'Unavailable';
    else if (!st) text = 'Loading…';
    else if (st === 'soldout') text = 'Sold out';
    else if (st === 'ended') text = 'Ended';
    else if (st === 'upcoming') text = p.startMs ? 'Starts in ' + formatDuration(p.startMs - now) : 'Not started';
    else if (st !== 'active') text = 'Unavailable';
    else if (!state.user) text = 'Sign in to buy';
    else if (room && !room.admitted) text = 'Wait for your turn';
    else if (state.busy) text = 'Processing…';
    else if (state.limitReached) text = 'Limit reached';
    else if (wait > 0) text = 'Try again in ' + wait + 's';
    else { text = 'Buy now'; enabled = true; }
    setText(el.buy, text);
    // Says whether Buy will use a token the status answer or the queue poll
    // carried (one request, do) or ask for one (two: token, do).
    el.buy.toggleAttribute('data-token', !!(state.token || state.room.token));
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
    stopPay();
    showOrder('');
    setMessage('Reserving your item…', 'info');
    render();
    // The token the status answer (a sale without a room) or the queue
    // poll (the shopper's turn) carried, while it has a few seconds left;
    // else one from the token call. Any of them is used once.
    var held = heldToken(state.token) || heldToken(state.room.token);
    state.token = null;
    state.room.token = null;
    var got = held ? Promise.resolve({ ok: true, data: { token: held } }) :
      request('POST', '/api/seckill/token', { productId: pid }, 8000);
    got.then(function (r) {
      if (r.data && typeof r.data.admittedUntilMs === 'number' && state.room.q) state.room.q.admittedUntilMs = r.data.admittedUntilMs;
      if (!r.ok || !r.data || typeof r.data.token !== 'string') return refused(r);
      return request('POST', '/api/seckill/do', { productId: pid, token: r.data.token, quantity: qty }, 10000).then(function (r) {
        if (!r.data || r.data.orderId == null) return refused(r);
        var id = String(r.data.orderId);
        showOrder(id);
        rememberOrder(id, qty);
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

  function heldToken(t) {
    return t && t.expiresMs - serverNow() > 3000 ? t.value : '';
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
      case 'NOT_ADMITTED':
        notAdmitted();
        // Without a place in the answer it is the turn that ended, not one
        // still to come.
        if (!r.data || typeof r.data.position !== 'number') {
          setMessage('Your time to buy has run out, so your turn is over.', 'bad');
          return;
        }
        break;
      case 'NOT_JOINED':
      case 'BAD_TICKET':
        lostPlace();
        break;
    }
    setMessage(r.ok ? GENERIC : messageFor(r), 'bad');
  }

  function settle(id, d) {
    var qty = d.order && d.order.quantity > 0 ? d.order.quantity : 1;
    if (d.status === 'success' && d.payByMs > 0) {
      state.pay = { id: id, qty: qty, payByMs: d.payByMs };
      setMessage(payText(serverNow()), 'info', 'pay');
      schedulePay();
    } else if (d.status === 'success') {
      setMessage('Success! Order ' + id + ' confirmed.', 'ok');
    } else if (d.status === 'paid') {
      stopPay();
      setMessage('Paid — thank you. Order ' + id + ' is yours.', 'ok');
    } else if (d.status === 'expired' || d.status === 'cancelled') {
      stopPay();
      forgetOrder();
      // The units went back on sale: the shopper may buy again while stock lasts.
      state.bought = Math.max(0, state.bought - qty);
      state.limitReached = false;
      setMessage(d.status === 'expired' ? 'Expired — the item went back on sale.' :
        'Sorry — order ' + id + ' was cancelled, and the item went back on sale.', 'bad');
      schedulePoll(0);
    } else if (d.status === 'failed') {
      forgetOrder();
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
      function terminal(d) { return d && typeof d.status === 'string' && d.status !== 'pending'; }

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

  // ---- paying ----

  // "Pay by 12:34 (14:59 left)": the deadline in the shopper's local time
  // (the server's deadline moved onto this device's clock) and the time
  // left on the server's clock.
  function payText(now) {
    var p = state.pay;
    var left = p.payByMs - now;
    if (left <= 0) return 'Order ' + p.id + ': the time to pay is over — checking…';
    var at = new Date(p.payByMs - state.offset);
    return 'Order ' + p.id + ' is reserved. Pay by ' + pad(at.getHours()) + ':' + pad(at.getMinutes()) +
      ' (' + formatClock(left) + ' left).';
  }

  function stopPay() {
    clearTimeout(state.payTimer);
    state.payTimer = 0;
    state.pay = null;
  }

  // schedulePay asks the order's result every few seconds and just after
  // its deadline, until it is paid or released.
  function schedulePay() {
    clearTimeout(state.payTimer);
    var p = state.pay;
    if (!p) return;
    var left = p.payByMs - serverNow();
    var wait = left > 0 ? Math.min(document.hidden ? PAY_POLL_MS * 3 : PAY_POLL_MS, left + PAY_AFTER_DEADLINE_MS) : 1000;
    state.payTimer = setTimeout(checkPay, wait);
  }

  function checkPay() {
    var p = state.pay;
    if (!p) return;
    var q = encodeURIComponent(p.id) + '&productId=' + encodeURIComponent(state.productId);
    request('GET', '/api/seckill/result?orderId=' + q, null, 5000).then(function (r) {
      if (state.pay !== p) return;
      if (r.ok && r.data && typeof r.data.status === 'string' && r.data.status !== 'success' && r.data.status !== 'pending') {
        settle(p.id, r.data);
        return;
      }
      if (r.status === 401) {
        signOut('Please sign in again to see how order ' + p.id + ' went.');
        return;
      }
      if (r.status === 404) {
        // Gone from the sale (long ago, or another shopper's device): forget it.
        stopPay();
        forgetOrder();
        return;
      }
      schedulePay();
    }, function () {
      if (state.pay === p) schedulePay();
    });
  }

  // restoreOrder shows the shopper's remembered order after a reload (or a
  // sign-in on this device): its state now, and follows it from there.
  function restoreOrder() {
    if (!state.user || !state.productId || state.busy) return;
    var o = recalledOrder();
    if (!o) return;
    var q = encodeURIComponent(o.id) + '&productId=' + encodeURIComponent(state.productId);
    request('GET', '/api/seckill/result?orderId=' + q, null, 5000).then(function (r) {
      if (r.status === 404) { forgetOrder(); return; }
      if (!r.ok || !r.data || typeof r.data.status !== 'string' || state.busy) return;
      showOrder(o.id);
      var d = r.data;
      if (d.status === 'pending' || d.status === 'success' || d.status === 'paid') {
        state.bought = Math.max(state.bought, o.qty);
        if (state.product && state.product.limit > 0 && state.bought >= state.product.limit) state.limitReached = true;
      }
      if (d.status === 'pending') {
        setMessage('Queued — order ' + o.id + ' is being confirmed…', 'info');
        state.busy = true;
        render();
        waitForOutcome(o.id).then(function () { state.busy = false; render(); });
        return;
      }
      if (d.status === 'expired' || d.status === 'cancelled') {
        // Already released before this visit: say so once, nothing to give back.
        state.bought = 0;
        forgetOrder();
        setMessage(d.status === 'expired' ? 'Expired — the item went back on sale.' :
          'Sorry — order ' + o.id + ' was cancelled, and the item went back on sale.', 'bad');
        render();
        return;
      }
      settle(o.id, d);
      render();
    }, function () { /* the page still works; the order shows on the next visit */ });
  }

  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && state.pay) schedulePay();
  });

  // ---- waiting room ----

  // When the sale has a waiting room (the status answer's waitingRoom), the
  // page is the room until it is the shopper's turn: Join (after a browser
  // check when the sale asks for one), the place in line as the queue poll
  // says, then a limited time to buy. The server decides everything; the
  // page only shows it and asks again.

  var numberFormat = typeof Intl === 'object' ? new Intl.NumberFormat(document.documentElement.lang || 'en') : null;
  function formatNumber(n) { return numberFormat ? numberFormat.format(n) : String(n); }

  // formatClock is a short countdown: "0:42", "5:00", "1:02:03".
  function formatClock(ms) {
    var total = Math.max(0, Math.ceil(ms / 1000));
    var h = Math.floor(total / 3600), m = Math.floor(total / 60) % 60, s = total % 60;
    return (h ? h + ':' + pad(m) : String(m)) + ':' + pad(s);
  }

  function formatWait(ms) {
    if (!(ms > 0)) return 'any moment now';
    if (ms < 60000) return 'less than a minute';
    var min = Math.round(ms / 60000);
    if (min < 90) return 'about ' + min + (min === 1 ? ' minute' : ' minutes');
    var h = Math.round(ms / 3600000);
    return 'about ' + h + (h === 1 ? ' hour' : ' hours');
  }

  // roomConfig is the status answer's waitingRoom {queueOpensMs, order,
  // difficulty, sessionMs}, with the sale's start (when the draw is and
  // admission begins) beside it as startMs, and the queue's opening as
  // opensMs; null for a sale without a room.
  function roomConfig() {
    var p = state.product, w = p && p.waitingRoom;
    if (!w || typeof w !== 'object' || w.enabled === false) return null;
    if (w.startMs == null) w.startMs = p.startMs;
    if (w.opensMs == null) w.opensMs = typeof w.queueOpensMs === 'number' ? w.queueOpensMs : 0;
    return w;
  }
  function roomOn() { return !!roomConfig() && !state.unknown; }

  // inLine: the shopper holds a place that is not (yet) a turn to buy.
  function inLine() {
    var q = state.room.q;
    return roomOn() && !!q && (q.status === 'prequeue' || q.status === 'waiting');
  }

  function resetRoom() {
    var rm = state.room;
    clearTimeout(rm.timer);
    if (rm.worker) rm.worker.terminate();
    state.room = newRoom();
  }

  function scheduleQueuePoll(ms) {
    clearTimeout(state.room.timer);
    state.room.timer = setTimeout(pollQueue, ms);
  }

  function jitter(ms) { return ms + Math.floor(Math.random() * QUEUE_JITTER_MS); }

  // nextQueuePoll says when to ask again after a good answer.
  function nextQueuePoll(q) {
    var w = roomConfig(), st = effectiveStatus();
    // Nothing more can happen to the place: no more asking.
    if (!q || q.status === 'closed' || q.status === 'expired' || st === 'soldout' || st === 'ended') return -1;
    if (q.status === 'prequeue') {
      // The draw is at the opening: ask right after it (spread over a
      // second), and now and then before, for a close.
      var toOpen = w && w.startMs ? w.startMs - serverNow() : 0;
      if (toOpen > 0 && toOpen < QUEUE_SLOW_MS) return toOpen + Math.floor(Math.random() * QUEUE_JITTER_MS);
      // Past the opening and the draw not in yet: it is a moment away.
      if (toOpen <= 0) return jitter(QUEUE_POLL_MS);
      return jitter(QUEUE_SLOW_MS);
    }
    if (document.hidden || q.status === 'admitted') return jitter(QUEUE_SLOW_MS);
    // Ask again when the line is due to reach the place, if that is
    // sooner: the turn is then seen when the estimate said, not up to a
    // poll later.
    if (q.etaMs > 0) return Math.min(jitter(QUEUE_POLL_MS), q.etaMs + 50);
    return jitter(QUEUE_POLL_MS);
  }

  // applyQueue takes a queue answer (join, poll, or a token refusal).
  function applyQueue(d) {
    var rm = state.room;
    var q = {
      status: typeof d.status === 'string' ? d.status : (d.admitted ? 'admitted' : 'waiting'),
      position: typeof d.position === 'number' ? d.position : 0,
      // position is the shopper's place for good; ahead moves as the line
      // lets people in, so the page counts "number ahead+1 in line".
      ahead: typeof d.ahead === 'number' ? d.ahead : -1,
      etaMs: typeof d.etaMs === 'number' ? d.etaMs : -1,
      admittedUntilMs: typeof d.admittedUntilMs === 'number' ? d.admittedUntilMs : (rm.q ? rm.q.admittedUntilMs : 0),
      soldOut: !!d.soldOut
    };
    if (d.admitted === true && q.status === 'waiting') q.status = 'admitted';
    // The answer that says it is the shopper's turn carries her purchase
    // token: Buy then needs no token call. Any other answer carries none.
    rm.token = q.status === 'admitted' && typeof d.token === 'string' && typeof d.expiresMs === 'number' ?
      { value: d.token, expiresMs: d.expiresMs } : null;
    q.number = q.position > 0 ? (q.ahead >= 0 ? q.ahead + 1 : q.position) : 0;
    if (q.status === 'waiting' && q.number > rm.firstPosition) rm.firstPosition = q.number;
    if (q.soldOut && state.product) state.product.status = 'soldout';
    rm.q = q;
    rm.qAt = Date.now();
    rm.checked = true;
  }

  // checkQueue asks once whether this shopper already has a place (a
  // reload, a second tab): the ticket cookie says so.
  function checkQueue() {
    var rm = state.room;
    if (rm.checked || rm.polling || !state.user) return;
    pollQueue();
  }

  function pollQueue() {
    var rm = state.room, st = effectiveStatus();
    // Sold out or over (the status poll may hear it first): nothing to ask.
    if (rm.polling || !state.user || !roomOn() || st === 'soldout' || st === 'ended') return;
    rm.polling = true;
    var next = -1;
    request('GET', '/api/seckill/queue?productId=' + encodeURIComponent(state.productId), null, 5000).then(function (r) {
      if (rm !== state.room) return;  // signed out meanwhile
      if (r.ok && r.data) {
        rm.failures = 0;
        applyQueue(r.data);
        next = nextQueuePoll(rm.q);
      } else if (r.code === 'NOT_JOINED' || r.code === 'BAD_TICKET' || (r.status === 404 && r.code !== 'UNKNOWN_PRODUCT')) {
        // No place (or a ticket of another user): the Join button shows.
        if (rm.q) {
          lostPlace();
          setMessage(MESSAGES.BAD_TICKET, 'bad');
        }
        rm.checked = true;
      } else if (r.status === 401) {
        signOut(MESSAGES.UNAUTHENTICATED);
      } else if (r.code === 'UNKNOWN_PRODUCT') {
        productUnknown();
      } else {
        next = r.retryAfter ? r.retryAfter * 1000 : queueFailed();
      }
    }, function () {
      if (rm === state.room) next = queueFailed();
    }).finally(function () {
      rm.polling = false;
      if (rm !== state.room) return;
      render();
      if (next >= 0) scheduleQueuePoll(next);
    });

    function queueFailed() {
      rm.failures++;
      show(el.conn, true);
      return jitter(Math.min(QUEUE_MAX_BACKOFF_MS, QUEUE_POLL_MS * Math.pow(2, rm.failures)));
    }
  }

  // lostPlace: the server no longer knows the shopper's place (its ticket
  // is gone or not for this user): back to Join.
  function lostPlace() {
    var rm = state.room;
    clearTimeout(rm.timer);
    rm.q = null;
    rm.checked = true;
    rm.firstPosition = 0;
  }

  // notAdmitted: the token call says it is not (or no longer) the
  // shopper's turn; the queue poll says where they stand.
  function notAdmitted() {
    var rm = state.room;
    if (rm.q && rm.q.status === 'admitted') rm.q.status = 'waiting';
    scheduleQueuePoll(0);
  }

  el.join.addEventListener('click', join);

  function join() {
    var w = roomConfig(), rm = state.room;
    if (el.join.disabled || !w || rm.step || !state.user) return;
    var pid = state.productId;
    setMessage('');
    if (w.difficulty > 0) {
      rm.step = 'checking';
      render();
      request('GET', '/api/seckill/challenge?productId=' + encodeURIComponent(pid), null, 8000).then(function (r) {
        if (rm !== state.room) return;
        if (!r.ok || !r.data || typeof r.data.challenge !== 'string') return joinRefused(r);
        return solve(r.data.challenge, r.data.difficulty || w.difficulty).then(function (nonce) {
          if (rm !== state.room) return;
          return post({ productId: pid, challenge: r.data.challenge, nonce: nonce });
        }, function () {
          setMessage('Your browser could not finish the check — please reload the page and press Join again.', 'bad');
        });
      }).then(null, function () {
        setMessage(NETWORK, 'bad');
      }).finally(done);
    } else {
      post({ productId: pid }).then(null, function () {
        setMessage(NETWORK, 'bad');
      }).finally(done);
    }

    function post(body) {
      rm.step = 'joining';
      render();
      return request('POST', '/api/seckill/queue', body, 8000).then(function (r) {
        if (rm !== state.room) return;
        if (!r.ok || !r.data) return joinRefused(r);
        applyQueue(r.data);
        var next = nextQueuePoll(rm.q);
        if (next >= 0) scheduleQueuePoll(next);
      });
    }
    function done() {
      if (rm !== state.room) return;
      rm.step = '';
      render();
    }
  }

  function joinRefused(r) {
    switch (r.code) {
      case 'UNAUTHENTICATED':
        signOut(MESSAGES.UNAUTHENTICATED);
        el.userId.focus();
        return;
      case 'RATE_LIMITED':
        state.cooldownUntil = Date.now() + r.retryAfter * 1000;
        setMessage(messageFor(r), 'bad', 'rate');
        return;
      case 'UNKNOWN_PRODUCT':
        productUnknown();
        return;
      case 'SOLD_OUT':
        if (state.product) state.product.status = 'soldout';
        break;
      case 'ENDED':
        if (state.product) state.product.status = 'ended';
        break;
    }
    setMessage(r.ok ? GENERIC : messageFor(r), 'bad');
  }

  // solve runs the sale's proof of work in a Web Worker, so the page stays
  // responsive while the browser hashes; it resolves with the nonce.
  function solve(challenge, difficulty) {
    var rm = state.room;
    return new Promise(function (resolve, reject) {
      var w, timer;
      try {
        w = new Worker(document.body.getAttribute('data-pow') || '/seckill/_static/pow.js');
      } catch (e) {
        return reject(e);
      }
      rm.worker = w;
      function end() { clearTimeout(timer); w.terminate(); if (rm.worker === w) rm.worker = null; }
      timer = setTimeout(function () { end(); reject(new Error('timeout')); }, POW_GIVE_UP_MS);
      w.onmessage = function (ev) {
        var d = ev.data || {};
        end();
        if (d.nonce == null) return reject(new Error('no nonce'));
        resolve(String(d.nonce));
      };
      w.onerror = function (ev) { if (ev && ev.preventDefault) ev.preventDefault(); end(); reject(new Error('worker')); };
      w.postMessage({ challenge: challenge, difficulty: difficulty });
    });
  }

  // announce puts a sentence in the screen readers' live region: a change
  // of state at once, the moving place at most every QUEUE_ANNOUNCE_MS.
  function announce(kind, text) {
    var rm = state.room, now = Date.now();
    if (text === rm.live) return;
    if (kind === rm.liveKind && kind === 'place' && now - rm.liveAt < QUEUE_ANNOUNCE_MS) return;
    rm.live = text;
    rm.liveAt = now;
    rm.liveKind = kind;
    setText(el.roomLive, text);
  }

  // renderRoom shows the room (or hides it for a sale without one) and
  // returns {admitted} for the Buy button, null when there is no room.
  function renderRoom(st, now) {
    var w = roomOn() ? roomConfig() : null;
    show(el.room, !!w);
    setText(el.signinTitle, w ? 'Sign in to join the queue' : 'Sign in to buy');
    if (!w) {
      show(el.buyRow, true);
      return null;
    }
    var rm = state.room, q = rm.q;
    var line = '', note = '', joinText = '', joinOn = false, live = '', kind = 'state', meter = -1;
    var admitted = false;
    var status = q ? q.status : '';
    if (status === 'admitted' && q.admittedUntilMs && now >= q.admittedUntilMs) status = 'expired';
    var over = st === 'soldout' || st === 'ended' || status === 'closed';

    if ((st === 'soldout' || (status === 'closed' && q.soldOut)) && state.bought > 0) {
      line = 'You got yours — the sale is now sold out. Thank you for waiting.';
    } else if (st === 'soldout' || (status === 'closed' && q.soldOut)) {
      line = 'Sold out — every item has been claimed, so the queue is closed.';
      note = 'Thank you for waiting.';
    } else if (st === 'ended') {
      line = 'The sale has ended, so the queue is closed.';
    } else if (status === 'closed') {
      line = 'The queue has been closed — nobody else is being let in.';
    } else if (!state.user) {
      line = now < w.opensMs ? 'The queue opens in ' + formatClock(w.opensMs - now) + '. Sign in to join it.' :
        'The queue is open. Sign in to join it.';
      live = now < w.opensMs ? 'The queue is not open yet. Sign in to join it.' : line;
      joinText = 'Sign in to join';
    } else if (rm.step === 'checking') {
      line = 'Checking your browser…';
      note = 'This takes a few seconds and happens only once.';
      joinText = 'Checking your browser…';
    } else if (rm.step === 'joining') {
      line = 'Joining the queue…';
      joinText = 'Joining…';
    } else if (!q) {
      if (!rm.checked) {
        line = 'Looking for your place…';
        joinText = 'Join the queue';
      } else if (now < w.opensMs) {
        line = 'The queue opens in ' + formatClock(w.opensMs - now) + '. Keep this page open — the Join button turns on by itself.';
        live = 'The queue is not open yet. The Join button turns on when it opens.';
        joinText = 'Queue opens in ' + formatClock(w.opensMs - now);
      } else {
        line = now >= w.startMs ? 'The sale is on. Join the queue to buy: places go in the order people join.' :
          w.order === 'fifo' ? 'The queue is open. The sale opens in ' + formatClock(w.startMs - now) +
            '; places go in the order people join.' :
          'The queue is open. Everyone who joins before the sale opens in ' + formatClock(w.startMs - now) +
            ' gets a place drawn at random, so there is no need to rush.';
        live = now >= w.startMs ? line : w.order === 'fifo' ? 'The queue is open. Places go in the order people join.' :
          'The queue is open. Everyone who joins before the sale opens gets a place drawn at random.';
        var wait = Math.ceil((state.cooldownUntil - Date.now()) / 1000);
        joinText = wait > 0 ? 'Try again in ' + wait + 's' : 'Join the queue';
        joinOn = wait <= 0;
      }
    } else if (status === 'prequeue') {
      var fifo = w.order === 'fifo';
      line = now >= w.startMs ? 'You\u2019re in the queue. ' + (fifo ? 'Your place is being worked out…' : 'Places are being drawn…') :
        fifo && q.number > 0 ? 'You are number ' + formatNumber(q.number) + ' in line, in the order people joined; the sale opens in ' + formatClock(w.startMs - now) + '.' :
        fifo ? 'You\u2019re in the queue. Your place is kept in the order you joined; the sale opens in ' + formatClock(w.startMs - now) + '.' :
        'You\u2019re in the queue. Places are drawn at random when the sale opens in ' + formatClock(w.startMs - now) + '.';
      note = 'Keep this page open. Your place is kept if you reload.';
      live = fifo ? 'You\u2019re in the queue. Your place is kept in the order you joined.' :
        'You\u2019re in the queue. Places are drawn at random when the sale opens.';
    } else if (status === 'waiting') {
      if (q.number > 0) {
        var eta = q.etaMs >= 0 ? q.etaMs - (Date.now() - rm.qAt) : -1;
        line = 'You are number ' + formatNumber(q.number) + ' in line' + (q.etaMs >= 0 ? ' — ' + formatWait(eta) : '') + '.';
        kind = 'place';
        if (rm.firstPosition > 1) meter = (rm.firstPosition - q.number) / rm.firstPosition;
      } else {
        line = 'You\u2019re in the queue. Your place is being worked out…';
      }
      note = 'Keep this page open. Your place is kept if you reload.';
    } else if (status === 'admitted' && state.limitReached) {
      line = 'You\u2019ve bought all this sale allows — thank you for waiting.';
      meter = 1;
    } else if (status === 'admitted') {
      admitted = true;
      var left = q.admittedUntilMs ? q.admittedUntilMs - now : 0;
      line = 'It\u2019s your turn — you have ' + (left > 0 ? formatClock(left) : 'a few minutes') + ' to buy.';
      live = 'It\u2019s your turn to buy.';
      meter = 1;
    } else if (status === 'expired') {
      line = state.bought > 0 ? 'Your turn is over. Thank you for shopping.' :
        'Your time to buy has run out, so your turn is over.';
    }
    announce(kind, live || line);

    setText(el.roomLine, line);
    el.room.setAttribute('data-state', over ? 'over' : status || (rm.step ? 'joining' : 'out'));
    setText(el.roomNote, note);
    show(el.roomNote, !!note);
    show(el.roomMeter, meter >= 0);
    if (meter >= 0) el.roomBar.style.width = Math.round(Math.max(0.02, Math.min(1, meter)) * 100) + '%';
    show(el.join, !!joinText && !over);
    setText(el.join, joinText);
    if (el.join.disabled === joinOn) el.join.disabled = !joinOn;
    // Buy shows once it can be used: during the shopper's turn.
    show(el.buyRow, (admitted || state.busy) && !over);
    return { admitted: admitted };
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
  restoreOrder();
  setInterval(render, 200);
})();
