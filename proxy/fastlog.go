package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// fasthttpLogger is the Logger of the shopper and admin servers. Left
// unset, fasthttp prints a connection's read error to stderr as the error's
// text, and the text of a malformed request's error quotes the raw header
// block: session cookies and Authorization headers in the log. This one
// keeps fasthttp's own words (the format) and shows of each argument only
// what is not the client's: addresses, numbers, and an error's kind from a
// fixed list. Strings and bytes are dropped whatever they hold.
type fasthttpLogger struct {
	log    *slog.Logger
	server string // "shopper" or "admin"
}

func (l fasthttpLogger) Printf(format string, args ...any) {
	safe := make([]any, len(args))
	for i, a := range args {
		safe[i] = safeLogArg(a)
	}
	// A connection that sent garbage is the client's problem, answered
	// 400 already (handleReadError); accept failures and limits are ours.
	level := slog.LevelWarn
	if strings.HasPrefix(format, "error when serving connection") {
		level = slog.LevelDebug
	}
	l.log.Log(context.Background(), level, "fasthttp: "+fmt.Sprintf(format, safe...), "server", l.server)
}

// safeLogArg is what a log may show of one of fasthttp's arguments.
func safeLogArg(a any) any {
	switch v := a.(type) {
	case error:
		return readErrorKind(v)
	case net.Addr:
		return v.String()
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, bool, time.Duration:
		return v
	}
	return "[omitted]"
}

// readErrorKinds name the read errors by cause, never by content: the
// errors' own texts quote what the client sent.
var readErrorKinds = []struct {
	err  error
	kind string
}{
	{fasthttp.ErrBodyTooLarge, "body too large"},
	{fasthttp.ErrSmallReadBuffer, "headers too large"},
	{fasthttp.ErrNonNumericChars, "bad Content-Length"},
	{fasthttp.ErrDuplicateContentLength, "duplicate Content-Length"},
	{fasthttp.ErrMissingRequestMethod, "no request method"},
	{fasthttp.ErrUnsupportedRequestMethod, "unsupported method"},
	{fasthttp.ErrExtraWhitespaceInRequestLine, "bad request line"},
	{fasthttp.ErrEmptyRequestURI, "empty request URI"},
	{fasthttp.ErrUnsupportedTransferEncoding, "unsupported Transfer-Encoding"},
	{fasthttp.ErrBadTrailer, "bad trailer"},
	{fasthttp.ErrNeedMore, "incomplete header"},
	{io.ErrUnexpectedEOF, "connection closed mid-request"},
	{io.EOF, "connection closed"},
	{syscall.ECONNRESET, "connection reset"},
	{syscall.EPIPE, "broken pipe"},
}

// readErrorPhrases name the errors fasthttp builds without a sentinel, by
// a phrase of its own message. Only the kind is logged: a client that
// writes a phrase into its request changes at most which of these words
// the log shows.
var readErrorPhrases = []struct{ phrase, kind string }{
	{"missing colon", "header without a colon"},
	{"content-length", "bad Content-Length"},
	{"too many host headers", "duplicate Host"},
	{"invalid header value", "invalid header value"},
	{"invalid header key", "invalid header name"},
	{"transfer-encoding", "bad Transfer-Encoding"},
	{"request method", "bad request method"},
	{"request uri", "bad request URI"},
	{"http version", "bad HTTP version"},
	{"first line of request", "bad request line"},
}

// readErrorKind is a read error's cause in words of ours.
func readErrorKind(err error) string {
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		return "headers too large"
	}
	for _, k := range readErrorKinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout"
	}
	msg := strings.ToLower(err.Error())
	for _, p := range readErrorPhrases {
		if strings.Contains(msg, p.phrase) {
			return p.kind
		}
	}
	return "malformed request"
}

// requestLine is the method and path of a request fasthttp could not
// parse: it resets the request, so they are read back from the request's
// first line, which its error quotes (`contents: "GET /p?q HTTP/1.1\r\n...`).
// The query is dropped (it may carry a token); "-" when not found.
func requestLine(err error) (method, path string) {
	_, quoted, ok := strings.Cut(err.Error(), `contents: "`)
	if !ok {
		return "-", "-"
	}
	line, _, _ := strings.Cut(quoted, `\r\n`)
	parts := strings.SplitN(line, " ", 3)
	if len(parts) < 2 || !isMethodToken(parts[0]) || !strings.HasPrefix(parts[1], "/") {
		return "-", "-"
	}
	p, _, _ := strings.Cut(parts[1], "?")
	p, _, _ = strings.Cut(p, "#")
	return parts[0], sanitizeForLog([]byte(p), 256)
}

// isMethodToken: a method as the shopper API and the origins know them.
func isMethodToken(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 'A' || m[i] > 'Z' {
			return false
		}
	}
	return true
}

// logReadError is handleReadError's line: the method, the path
// (sanitised) and the error's kind, never the error's text.
func (s *Server) logReadError(ctx *fasthttp.RequestCtx, err error) {
	if !s.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	method, path := requestLine(err)
	s.log.Debug("bad request", "remote", ctx.RemoteAddr().String(), "method", method, "path", path, "err", readErrorKind(err))
}

// sanitizeForLog keeps printable ASCII but spaces, at most max bytes.
func sanitizeForLog(b []byte, max int) string {
	if len(b) > max {
		b = b[:max]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c <= ' ' || c >= 0x7f {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}
