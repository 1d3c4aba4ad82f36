package upstream

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
)

const (
	validTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	validParent = "00f067aa0ba902b7"
)

func TestValidTraceparent(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"00-" + validTrace + "-" + validParent + "-01", true},
		{"00-" + validTrace + "-" + validParent + "-00", true},
		{"cc-" + validTrace + "-" + validParent + "-01", true},           // a later version: its first fields
		{"cc-" + validTrace + "-" + validParent + "-01-what-ever", true}, // and what follows them ignored
		{"cc-" + validTrace + "-" + validParent + "-01what", false},
		{"00-" + validTrace + "-" + validParent + "-01-", false}, // version 00 is exactly 55 bytes
		{"ff-" + validTrace + "-" + validParent + "-01", false},
		{"00-" + strings.ToUpper(validTrace) + "-" + validParent + "-01", false},
		{"00-" + strings.Repeat("0", 32) + "-" + validParent + "-01", false},
		{"00-" + validTrace + "-" + strings.Repeat("0", 16) + "-01", false},
		{"00-" + validTrace + "-" + validParent + "-0g", false},
		{"00-" + validTrace[1:] + "-" + validParent + "-01", false},
		{"00_" + validTrace + "-" + validParent + "-01", false},
		{"", false},
		{"00", false},
	} {
		if got := validTraceparent([]byte(tc.v)); got != tc.ok {
			t.Errorf("%q: valid %v, want %v", tc.v, got, tc.ok)
		}
	}
}

// TestPrepareTraceparent: what traceparent and tracestate the origin gets
// for what the client sent.
func TestPrepareTraceparent(t *testing.T) {
	for _, tc := range []struct {
		name, headers string
		keep          bool   // the client's trace id goes on
		flags         string // the flags the origin gets
		state         bool   // tracestate passes
	}{
		{"none", "", false, "00", false},
		{"valid, sampled", "Traceparent: 00-" + validTrace + "-" + validParent + "-01\r\nTracestate: a=1\r\n", true, "01", true},
		{"valid, other flags", "traceparent: 00-" + validTrace + "-" + validParent + "-fe\r\n", true, "00", false},
		{"later version", "Traceparent: 01-" + validTrace + "-" + validParent + "-03-x\r\n", true, "01", false},
		{"malformed", "Traceparent: 00-" + strings.ToUpper(validTrace) + "-" + validParent + "-01\r\nTracestate: a=1\r\n", false, "00", false},
		{"sent twice", "Traceparent: 00-" + validTrace + "-" + validParent + "-01\r\nTraceparent: 00-" + validTrace + "-" + validParent + "-01\r\nTracestate: a=1\r\n", false, "00", false},
		{"named in Connection", "Connection: Traceparent, Tracestate\r\nTraceparent: 00-" + validTrace + "-" + validParent + "-01\r\nTracestate: a=1\r\n", true, "01", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := prepareCtx(t, "GET /a HTTP/1.1\r\nHost: h\r\n"+tc.headers+"\r\n")
			var out fasthttp.Request
			buf, ok := prepare(&out, ctx, hop{clientIP: testClientIP}, nil)
			if !ok {
				t.Fatal("refused")
			}
			all := out.Header.PeekAll("Traceparent")
			if len(all) != 1 || !validTraceparent(all[0]) || !strings.HasPrefix(string(all[0]), "00-") {
				t.Fatalf("the origin got traceparent %q", all)
			}
			tp := string(all[0])
			if string(buf) != tp {
				t.Errorf("prepare's scratch %q, the traceparent %q", buf, tp)
			}
			if got := tp[3:35] == validTrace; got != tc.keep {
				t.Errorf("traceparent %q: the client's trace id kept %v, want %v", tp, got, tc.keep)
			}
			if tp[36:52] == validParent {
				t.Errorf("traceparent %q: the client's parent id, want the edge's", tp)
			}
			if tp[53:] != tc.flags {
				t.Errorf("traceparent %q: flags %s, want %s", tp, tp[53:], tc.flags)
			}
			if got := len(out.Header.Peek("Tracestate")) > 0; got != tc.state {
				t.Errorf("tracestate passed %v, want %v", got, tc.state)
			}
		})
	}
}

// TestTraceIDOfTheProxiedRequest: after Serve, the client's request names
// the trace its origin got.
func TestTraceIDOfTheProxiedRequest(t *testing.T) {
	seen := make(chan string, 1)
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) { seen <- string(ctx.Request.Header.Peek("Traceparent")) })
	m, _ := newTestManager(t)
	p := mustBuild(t, m, onePool("p", origin)).Pool("p")
	for _, headers := range []string{"", "Traceparent: 00-" + validTrace + "-" + validParent + "-01\r\n", "Traceparent: junk\r\n"} {
		ctx := serveCtxWith("/a", headers)
		p.Serve(ctx, testClientIP, nil)
		got := <-seen
		if id := TraceID(&ctx.Request.Header); len(got) != 55 || string(id) != got[3:35] {
			t.Errorf("%q: TraceID %q, the origin got %q", headers, id, got)
		}
	}
}

// TestServeTraceAllocs: forwarding a client's trace, or starting one, costs
// no allocation.
func TestServeTraceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	p := benchPool(t, conf.RoundRobin)
	for _, headers := range []string{"Traceparent: 00-" + validTrace + "-" + validParent + "-01\r\nTracestate: a=1\r\n", "Traceparent: bad\r\nTracestate: a=1\r\n"} {
		ctx := serveCtxWith("/api/items?id=1", headers)
		serve := func() {
			p.Serve(ctx, testClientIP, nil)
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("status %d", ctx.Response.StatusCode())
			}
		}
		for range 10 {
			serve()
		}
		if n := testing.AllocsPerRun(200, serve); n != 0 {
			t.Fatalf("%q: Serve allocates %v times per request", headers, n)
		}
	}
}
