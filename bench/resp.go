package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// redisConn is a minimal RESP2 client for bench's few admin calls (INFO,
// SCRIPT LOAD, warming a peer's keys); the edge uses rueidis.
type redisConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRedis(addr string) (*redisConn, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	return &redisConn{c: c, r: bufio.NewReader(c)}, nil
}

func (rc *redisConn) Close() { rc.c.Close() }

// Do sends one command and returns its reply: string, int64, []any, nil,
// or an error for a Redis error reply.
func (rc *redisConn) Do(args ...string) (any, error) {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	rc.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return rc.read()
}

func (rc *redisConn) read() (any, error) {
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("redis: empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New("redis: " + line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(rc.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = rc.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// CmdStat is one command's line of INFO commandstats.
type CmdStat struct {
	Calls int64   `json:"calls"`
	Usec  int64   `json:"usec"`
	PerUs float64 `json:"usec_per_call"`
}

// commandStats reads INFO commandstats into command -> stats.
func commandStats(addr string) (map[string]CmdStat, error) {
	rc, err := dialRedis(addr)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	v, err := rc.Do("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	return parseCommandStats(fmt.Sprint(v)), nil
}

func parseCommandStats(s string) map[string]CmdStat {
	out := map[string]CmdStat{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st CmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// statsDelta is after - before, commands with no calls in between left out.
func statsDelta(before, after map[string]CmdStat) map[string]CmdStat {
	out := map[string]CmdStat{}
	for k, a := range after {
		b := before[k]
		d := CmdStat{Calls: a.Calls - b.Calls, Usec: a.Usec - b.Usec}
		if d.Calls <= 0 {
			continue
		}
		d.PerUs = float64(d.Usec) / float64(d.Calls)
		out[k] = d
	}
	return out
}
