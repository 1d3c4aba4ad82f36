package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// respConn is a bare RESP2 connection: the cluster kit needs a handful of
// admin commands (CLUSTER INFO/SLOTS, INFO, WAIT, SAVE) against one node at
// a time, with a deadline each, and none of a cluster client's routing or
// retries, which would hide exactly what a test wants to see.
type respConn struct {
	c       net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration
}

// respError is an error reply ("-MOVED 3999 127.0.0.1:7001").
type respError string

func (e respError) Error() string { return string(e) }

func dialRESP(addr string, timeout time.Duration) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c), timeout: timeout}, nil
}

func (rc *respConn) Close() error { return rc.c.Close() }

// send writes one command without reading its reply (for pipelines).
func (rc *respConn) send(args ...string) error {
	_ = rc.c.SetDeadline(time.Now().Add(rc.timeout))
	fmt.Fprintf(rc.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(rc.w, "$%d\r\n", len(a))
		rc.w.WriteString(a)
		rc.w.WriteString("\r\n")
	}
	return rc.w.Flush()
}

// do sends one command and reads its reply: string (simple or bulk),
// int64, []any, nil, or a respError as the error.
func (rc *respConn) do(args ...string) (any, error) {
	if err := rc.send(args...); err != nil {
		return nil, err
	}
	return rc.read()
}

func (rc *respConn) read() (any, error) {
	_ = rc.c.SetDeadline(time.Now().Add(rc.timeout))
	v, err := rc.reply()
	if e, ok := v.(respError); ok && err == nil {
		return nil, e
	}
	return v, err
}

func (rc *respConn) reply() (any, error) {
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("bad RESP line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return respError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(rc.r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = rc.reply(); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("bad RESP line %q", line)
}

// call is one command on a fresh connection to addr.
func call(addr string, timeout time.Duration, args ...string) (any, error) {
	rc, err := dialRESP(addr, timeout)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return rc.do(args...)
}

// callString is call for a command whose reply is a string.
func callString(addr string, timeout time.Duration, args ...string) (string, error) {
	v, err := call(addr, timeout, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %T, want a string", args[0], v)
	}
	return s, nil
}
