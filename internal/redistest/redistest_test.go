package redistest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// do sends one command in RESP and returns the first reply line, enough to
// check the server without pulling a client library into this package.
func do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(line, "$") && line != "$-1\r\n" {
		line, err = r.ReadString('\n')
	}
	return strings.TrimSpace(line), err
}

func TestStartAnswersAndIsEmptyAfterRestart(t *testing.T) {
	s := New(t)
	if got, err := do(s.Addr(), "SET", "k", "v"); err != nil || got != "+OK" {
		t.Fatalf("SET: %q %v", got, err)
	}
	if got, _ := do(s.Addr(), "GET", "k"); got != "v" {
		t.Fatalf("GET before restart = %q, want v", got)
	}
	for _, q := range []struct{ key, want string }{
		{"save", ""},
		{"appendonly", "no"},
		{"bind", "127.0.0.1"},
	} {
		if got := configGet(t, s.Addr(), q.key); got != q.want {
			t.Errorf("CONFIG GET %s = %q, want %q", q.key, got, q.want)
		}
	}

	addr := s.Addr()
	s.Stop()
	if _, err := do(addr, "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Start()
	if s.Addr() != addr {
		t.Fatalf("address changed across restart: %s -> %s", addr, s.Addr())
	}
	if got, err := do(addr, "GET", "k"); err != nil || got != "$-1" {
		t.Fatalf("GET after restart = %q %v, want nil: memory must be lost", got, err)
	}
}

func configGet(t *testing.T, addr, key string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
	r := bufio.NewReader(c)
	// *2 / $len / key / $len / value
	var lines []string
	for range 5 {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	return lines[4]
}

func TestParallelServersGetTheirOwnPorts(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 3 {
		a := Start(t)
		if seen[a] {
			t.Fatalf("port reused while in use: %s", a)
		}
		seen[a] = true
	}
}

func TestLaunchAndClose(t *testing.T) {
	s, err := Launch("")
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if got, err := do(addr, "PING"); err != nil || got != "+PONG" {
		t.Fatalf("PING = %q %v", got, err)
	}
	s.Close()
	s.Close() // idempotent
	if _, err := do(addr, "PING"); err == nil {
		t.Fatal("server still answers after Close")
	}
}

func TestMissingBinary(t *testing.T) {
	old := Binary
	Binary = "redis-server-does-not-exist"
	defer func() { Binary = old }()
	_, err := Launch("")
	if err == nil || err.Error() != MissingHint {
		t.Fatalf("err = %v, want %q", err, MissingHint)
	}
}
