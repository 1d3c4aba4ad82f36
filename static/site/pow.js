// The waiting room's proof of work, run as a Web Worker so the page stays
// responsive while it searches: new Worker('/seckill/_static/pow.js').
//
// In:  postMessage({challenge: '<from GET /api/seckill/challenge>', difficulty: N})
// Out: postMessage({nonce: '123', tries: 124, ms: 41.5}), or {error: '...'}.
//
// The answer is the first decimal nonce (0, 1, 2, ...) such that
// SHA-256(challenge + ':' + nonce) starts with at least N zero bits, which
// the edge checks with one hash (sale/waitroom). It takes 2^N tries on
// average. One worker answers any number of messages, one after the other.
//
// SHA-256 is written out here (FIPS 180-4) rather than taken from
// crypto.subtle.digest: the search is millions of tiny hashes, and the
// WebCrypto call is asynchronous, so its per-call overhead dominates. In
// headless Chromium on a 2-core server this code does 1.5-2 million hashes a
// second, WebCrypto 60-180 thousand even with 256 digests in flight
// (test/browser/pow_test.go measures both; pass engine: 'subtle' to try it).
// WebCrypto also exists only in secure contexts (https, localhost), and the
// sale page must work behind a plain http edge too. The challenge's blocks
// before the nonce are hashed once; each try hashes only the last one or two.
'use strict';

var K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
]);
var IV = new Int32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);

// The edge's limits (sale/waitroom): longer is not a challenge it issued.
var MAX_CHALLENGE = 224;
var MAX_DIFFICULTY = 32;

var schedule = new Int32Array(64);

// compress runs one 64-byte block (16 big-endian words of words from off)
// into the state h, in place.
function compress(h, words, off) {
  var w = schedule, i, x, y;
  for (i = 0; i < 16; i++) w[i] = words[off + i];
  for (i = 16; i < 64; i++) {
    x = w[i - 15];
    y = w[i - 2];
    w[i] = (((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)) +
      (((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10)) +
      w[i - 7] + w[i - 16] | 0;
  }
  var a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7], t1, t2;
  for (i = 0; i < 64; i++) {
    t1 = k + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
      (g ^ (e & (f ^ g))) + K[i] + w[i] | 0;
    t2 = (((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
      ((a & b) | (c & (a | b))) | 0;
    k = g; g = f; f = e; e = d + t1 | 0;
    d = c; c = b; b = a; a = t1 + t2 | 0;
  }
  h[0] = h[0] + a | 0; h[1] = h[1] + b | 0; h[2] = h[2] + c | 0; h[3] = h[3] + d | 0;
  h[4] = h[4] + e | 0; h[5] = h[5] + f | 0; h[6] = h[6] + g | 0; h[7] = h[7] + k | 0;
}

// asciiBytes is the challenge + ':' as bytes; the edge's challenges are
// base64url, so anything else is refused rather than UTF-8 encoded.
function asciiBytes(s) {
  var b = new Uint8Array(s.length + 1);
  for (var i = 0; i < s.length; i++) {
    var c = s.charCodeAt(i);
    if (c < 33 || c > 126) return null;
    b[i] = c;
  }
  b[s.length] = 58; // ':'
  return b;
}

// solveJS counts nonces up in decimal, in place in the last block(s): the
// tail is prefix rest | digits | 0x80 | zeros | bit length (64 bits).
function solveJS(prefix, difficulty) {
  var full = prefix.length >> 6;
  var mid = new Int32Array(IV);
  var words = new Int32Array(32);
  for (var blk = 0; blk < full; blk++) {
    for (var j = 0; j < 16; j++) {
      var p = (blk << 6) + (j << 2);
      words[j] = (prefix[p] << 24) | (prefix[p + 1] << 16) | (prefix[p + 2] << 8) | prefix[p + 3];
    }
    compress(mid, words, 0);
  }
  var rest = prefix.subarray(full << 6);
  var tail = new Uint8Array(128);
  var h = new Int32Array(8);
  var digits = 1, blocks = 0, tries = 0;
  var shift = 32 - difficulty;

  // layout writes the tail for a nonce of n digits, all '0' but the first
  // ('1', or '0' for the nonce 0).
  function layout(n) {
    digits = n;
    tail.fill(0);
    tail.set(rest);
    for (var i = 0; i < n; i++) tail[rest.length + i] = 48;
    if (n > 1) tail[rest.length] = 49;
    tail[rest.length + n] = 0x80;
    blocks = rest.length + n + 9 <= 64 ? 1 : 2;
    var bitLen = (prefix.length + n) * 8; // < 2^32: the message is a few hundred bytes
    var end = blocks << 6;
    tail[end - 4] = bitLen >>> 24; tail[end - 3] = bitLen >>> 16; tail[end - 2] = bitLen >>> 8; tail[end - 1] = bitLen;
  }
  layout(1);
  var first = rest.length; // index of the nonce's first digit in tail
  for (;;) {
    var nw = blocks << 4;
    for (var q = 0; q < nw; q++) {
      var o = q << 2;
      words[q] = (tail[o] << 24) | (tail[o + 1] << 16) | (tail[o + 2] << 8) | tail[o + 3];
    }
    h.set(mid);
    compress(h, words, 0);
    if (blocks === 2) compress(h, words, 16);
    tries++;
    if (difficulty === 0 || (h[0] >>> shift) === 0) {
      return { nonce: String.fromCharCode.apply(null, tail.subarray(first, first + digits)), tries: tries };
    }
    // The next nonce: carry from the last digit; all nines grow a digit.
    var i = first + digits - 1;
    while (i >= first && tail[i] === 57) tail[i--] = 48;
    if (i >= first) tail[i]++;
    else layout(digits + 1);
  }
}

// solveSubtle is the same search with crypto.subtle.digest, a batch of
// digests in flight at a time, for measurement.
function solveSubtle(prefix, difficulty) {
  var BATCH = 256;
  var next = 0, tries = 0, shift = 32 - difficulty;
  function round() {
    var jobs = [];
    for (var i = 0; i < BATCH; i++) {
      var n = String(next + i);
      var msg = new Uint8Array(prefix.length + n.length);
      msg.set(prefix);
      for (var j = 0; j < n.length; j++) msg[prefix.length + j] = n.charCodeAt(j);
      jobs.push(crypto.subtle.digest('SHA-256', msg));
    }
    return Promise.all(jobs).then(function (sums) {
      tries += BATCH;
      for (var i = 0; i < sums.length; i++) {
        var v = new DataView(sums[i]).getUint32(0);
        if (difficulty === 0 || (v >>> shift) === 0) return { nonce: String(next + i), tries: tries };
      }
      next += BATCH;
      return round();
    });
  }
  return round();
}

self.onmessage = function (ev) {
  var m = ev.data || {};
  var prefix = typeof m.challenge === 'string' && m.challenge.length > 0 && m.challenge.length <= MAX_CHALLENGE ?
    asciiBytes(m.challenge) : null;
  var d = m.difficulty;
  if (!prefix || typeof d !== 'number' || d !== Math.floor(d) || d < 0 || d > MAX_DIFFICULTY) {
    self.postMessage({ error: 'bad challenge or difficulty' });
    return;
  }
  var t0 = performance.now();
  function done(r) {
    self.postMessage({ nonce: r.nonce, tries: r.tries, ms: Math.round((performance.now() - t0) * 10) / 10 });
  }
  if (m.engine === 'subtle') {
    solveSubtle(prefix, d).then(done, function (e) { self.postMessage({ error: String(e) }); });
  } else {
    done(solveJS(prefix, d));
  }
};
