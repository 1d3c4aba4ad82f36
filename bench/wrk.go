package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Sample is one server's figures for one round of a comparison.
type Sample struct {
	Server        string             `json:"server"`
	Tool          string             `json:"tool"`
	Requests      int64              `json:"requests"`
	RPS           float64            `json:"rps"`
	P50           float64            `json:"p50_ms"`
	P99           float64            `json:"p99_ms"`
	CPUPct        float64            `json:"cpu_pct"`              // the server's CPU, % of one CPU
	CPUPerReq     float64            `json:"cpu_us_per_req"`       // µs of server CPU per request
	SysPerReq     float64            `json:"system_us_per_req"`    // µs of CPU per request of every process bench started but the generator (server, Redis, Kafka, consumer, origin)
	OtherPct      float64            `json:"other_pct"`            // CPU of processes not in the measurement, % of one CPU
	GenPerReq     float64            `json:"generator_us_per_req"` // µs of CPU per request of the load generator (wrk, redis-benchmark, bench's own closed loop)
	MachinePct    float64            `json:"machine_busy_pct"`     // how busy all CPUs were during the load, % of all of them
	Errors        int64              `json:"errors"`               // transport errors (and, where an answer is not expected, wrong answers)
	Codes         map[string]int64   `json:"codes,omitempty"`
	PerProc       map[string]float64 `json:"cpu_us_per_req_by_process,omitempty"` // every process bench started, µs of CPU per request (with the order pipeline's catch-up after the load)
	RedisPerReq   map[string]float64 `json:"redis_calls_per_req,omitempty"`       // Redis commands per request (INFO commandstats delta)
	RedisUsPerReq float64            `json:"redis_us_per_req,omitempty"`          // Redis command time per request, µs
	Note          string             `json:"note,omitempty"`
}

var (
	wrkRPS    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkReqs   = regexp.MustCompile(`(\d+) requests in`)
	wrkPct    = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkSock   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	rbRPS     = regexp.MustCompile(`([0-9.]+) requests per second(?:, p50=([0-9.]+) msec)?`)
)

func toMs(v float64, unit string) float64 {
	switch unit {
	case "us":
		return v / 1000
	case "s":
		return v * 1000
	}
	return v
}

// parseWrk reads wrk --latency output. non2xx are answers outside 2xx/3xx
// (for the sold-out target they are the expected 410s).
func parseWrk(out string) (s Sample, non2xx int64, err error) {
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return s, 0, fmt.Errorf("no Requests/sec in wrk output: %s", strings.TrimSpace(out))
	}
	s.RPS, _ = strconv.ParseFloat(m[1], 64)
	if m := wrkReqs.FindStringSubmatch(out); m != nil {
		s.Requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	for _, m := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		if m[1] == "50" {
			s.P50 = toMs(v, m[3])
		} else {
			s.P99 = toMs(v, m[3])
		}
	}
	if m := wrkSock.FindStringSubmatch(out); m != nil {
		for _, x := range m[1:] {
			n, _ := strconv.ParseInt(x, 10, 64)
			s.Errors += n
		}
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return s, non2xx, nil
}

// runWrk runs wrk pinned to cpu (-1: not pinned) and returns its output
// and its own CPU seconds.
func runWrk(cpu, threads, conns int, d time.Duration, script, url string) (string, float64, error) {
	args := []string{fmt.Sprintf("-t%d", threads), fmt.Sprintf("-c%d", conns), "-d" + wrkDuration(d), "--latency"}
	if script != "" {
		args = append(args, "-s", script)
	}
	args = append(args, url)
	bin := toolPath(toolWrk)
	if cpu >= 0 {
		args = append([]string{"-c", strconv.Itoa(cpu), bin}, args...)
		bin = "taskset"
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	var cpuSec float64
	if cmd.ProcessState != nil {
		cpuSec = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return string(out), cpuSec, fmt.Errorf("wrk %s: %v: %s", url, err, strings.TrimSpace(string(out)))
	}
	return string(out), cpuSec, nil
}

func wrkDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int(d/time.Second))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// parseRedisBenchmark reads `redis-benchmark -q` output.
func parseRedisBenchmark(out string) (rps, p50 float64, err error) {
	out = strings.ReplaceAll(out, "\r", "\n")
	ms := rbRPS.FindAllStringSubmatch(out, -1)
	if ms == nil {
		return 0, 0, fmt.Errorf("no requests per second in redis-benchmark output: %s", strings.TrimSpace(out))
	}
	m := ms[len(ms)-1]
	rps, _ = strconv.ParseFloat(m[1], 64)
	if m[2] != "" {
		p50, _ = strconv.ParseFloat(m[2], 64)
	}
	return rps, p50, nil
}
