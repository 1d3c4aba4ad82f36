package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"
)

// nginxCachePeerConf is the nginx peer of the cache target.
var nginxCachePeerConf = filepath.Join("bench", "peers", "nginx-cache.conf")

// The cache target's settings, the same on both servers.
const (
	cacheTTL      = time.Second
	cacheStale    = time.Minute // stale_while_revalidate and stale_if_error; nginx's inactive
	cacheMaxBytes = 64 << 20
	cacheBurst    = 10_000 // clients of the one-key burst, each on its own connection
	cacheBodySize = 1024   // the origin's answer
	cacheDownFor  = 3 * time.Second
)

// cacheOrigin is the cache target's origin, in bench's own process (pinned
// with the load generators): both servers ask it, and it counts what
// reaches it, per path, which is the figure the target is about.
type cacheOrigin struct {
	srv  *fasthttp.Server
	ln   net.Listener
	addr string
	body []byte
	mu   sync.Mutex
	hits map[string]int
	all  atomic.Int64
	done chan struct{}
}

func startCacheOrigin() (*cacheOrigin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &cacheOrigin{ln: ln, addr: ln.Addr().String(), hits: map[string]int{}, done: make(chan struct{})}
	o.body = []byte(`{"product":"p1","pad":"` + strings.Repeat("x", cacheBodySize-len(`{"product":"p1","pad":""}`)) + `"}`)
	contentJSON := []byte("application/json")
	o.srv = &fasthttp.Server{Name: "bench-cache-origin", Concurrency: 1 << 18, Handler: func(ctx *fasthttp.RequestCtx) {
		o.all.Add(1)
		o.mu.Lock()
		o.hits[string(ctx.Path())]++
		o.mu.Unlock()
		ctx.Response.Header.SetContentTypeBytes(contentJSON)
		ctx.Response.SetBodyRaw(o.body)
	}}
	go func() {
		defer close(o.done)
		_ = o.srv.Serve(ln)
	}()
	return o, nil
}

func (o *cacheOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[path]
}

// stop takes the origin down: connections are refused from now on.
func (o *cacheOrigin) stop() {
	_ = o.srv.Shutdown()
	<-o.done
}

// cache compares a route microcache: flashgate's cache: on a route against
// nginx proxy_cache + proxy_cache_lock + proxy_cache_use_stale updating
// error timeout, the same ttl, stale windows, size and key, on the same
// origin. Three parts:
//  1. a burst of 10,000 clients, each on its own connection already open,
//     on one key nobody asked for before: how many requests reach the origin
//     (goal: one per TTL the burst spans);
//  2. the cached path's requests/s, wrk rounds as for the other targets
//     (goal: >= 1.0x nginx);
//  3. the origin down for a few TTLs: every answer must still be 200
//     (stale), no 5xx within stale_if_error.
func (c *comparer) cache(ctx context.Context, root string, cmp *Comparison) error {
	origin, err := startCacheOrigin()
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			origin.stop()
		}
	}()
	edge, edgeAddr, err := c.startCacheEdge(ctx, origin.addr)
	if err != nil {
		return err
	}
	defer edge.Stop(5 * time.Second)
	ng, ngAddr, err := c.startCacheNginx(ctx, root, origin.addr)
	if err != nil {
		return err
	}
	defer ng.Stop(5 * time.Second)
	edgePids := func() []int { return []int{edge.Pid()} }
	ngPids := func() []int { return procTree(ng) }
	servers := []struct {
		name, addr string
	}{{"flashgate", edgeAddr}, {"nginx", ngAddr}}

	// Both answer the cached path with the origin's bytes, the second time
	// from their cache.
	for _, s := range servers {
		for i, want := range []string{"MISS", "HIT"} {
			code, body, xc, err := getOnce(s.addr, "/cached/check-"+s.name)
			if err != nil {
				return fmt.Errorf("%s: %v", s.name, err)
			}
			if code != 200 || body != string(origin.body) || xc != want {
				return fmt.Errorf("%s: request %d of /cached/check-%s answered %d, X-Cache %q, a body of %d bytes; want 200 %s with the origin's %d", s.name, i+1, s.name, code, xc, len(body), want, len(origin.body))
			}
		}
		if n := origin.count("/cached/check-" + s.name); n != 1 {
			return fmt.Errorf("%s: the origin saw %d requests for two on one key, want 1", s.name, n)
		}
	}

	// 1. The burst, on a key of its own per server.
	var burstLines []string
	for _, s := range servers {
		path := "/cached/burst-" + s.name
		codes, d, err := burst(ctx, s.addr, path, cacheBurst)
		if err != nil {
			return fmt.Errorf("%s burst: %v", s.name, err)
		}
		n := origin.count(path)
		ttls := max(1, int(math.Ceil(d.Seconds()/cacheTTL.Seconds())))
		verdict := "met"
		if n > ttls || codes[200] != cacheBurst {
			verdict = "NOT met"
		}
		line := fmt.Sprintf("cache burst: %s, %d clients on one new key in %v (%d TTL of %v): %d origin requests (goal <= 1 per TTL: %s); answers %s",
			s.name, cacheBurst, d.Round(time.Millisecond), ttls, cacheTTL, n, verdict, statusString(codes))
		c.logf("   (%s)", line)
		burstLines = append(burstLines, line)
	}

	// 2. Requests/s on the cached path.
	before := origin.all.Load()
	err = c.wrkPairURLs(cmp, "http://"+edgeAddr+"/cached/page", "http://"+ngAddr+"/cached/page", "", 200, edgePids, ngPids, false)
	if err != nil {
		return err
	}
	c.logf("   (cache: the origin saw %d requests during the rounds)", origin.all.Load()-before)

	// 3. The origin down: longer than the TTL, well within stale_if_error.
	origin.stop()
	stopped = true
	var downLines []string
	for _, s := range servers {
		codes, err := hammer(ctx, s.addr, "/cached/page", 32, cacheDownFor)
		if err != nil {
			return fmt.Errorf("%s with the origin down: %v", s.name, err)
		}
		var total, bad int
		for code, n := range codes {
			total += n
			if code >= 500 || code == 0 {
				bad += n
			}
		}
		verdict := "met"
		if bad > 0 || total == 0 {
			verdict = "NOT met"
		}
		line := fmt.Sprintf("cache origin down: %s, %v (%.0f TTLs) of 32 clients on the cached path: %d answers, %d 5xx or failed (goal 0: %s); %s",
			s.name, cacheDownFor, cacheDownFor.Seconds()/cacheTTL.Seconds(), total, bad, verdict, statusString(codes))
		c.logf("   (%s)", line)
		downLines = append(downLines, line)
	}
	c.setup = append(c.setup, fmt.Sprintf("cache: flashgate (a second cmd/proxy, GOMAXPROCS=1, the main edge's config plus a route /cached/ with cache: {ttl: %v, stale_while_revalidate: %v, stale_if_error: %v, max_bytes: %d, key: default}) and nginx (bench/peers/nginx-cache.conf, 1 worker, proxy_cache_valid %v, proxy_cache_lock, proxy_cache_use_stale updating error timeout http_5xx, proxy_cache_background_update, inactive %v, max_size %d) on one origin in bench's process (%d-byte JSON)",
		cacheTTL, cacheStale, cacheStale, cacheMaxBytes, cacheTTL, cacheStale, cacheMaxBytes, cacheBodySize))
	c.setup = append(c.setup, burstLines...)
	c.setup = append(c.setup, downLines...)
	return nil
}

// startCacheEdge runs a second edge: the main edge's config with another
// node id, its own listeners and data, no consumer, and the cached route.
func (c *comparer) startCacheEdge(ctx context.Context, originAddr string) (*Proc, string, error) {
	env := c.env
	b, err := os.ReadFile(env.EdgeConfig)
	if err != nil {
		return nil, "", err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	doc["node_id"] = 4
	doc["listen"].(map[string]any)["addr"] = addr
	doc["admin"].(map[string]any)["addr"] = admin
	doc["orders"] = map[string]any{"consumer": false}
	doc["data_dir"] = filepath.Join(c.dir, "data-edge-cache")
	ups := doc["upstreams"].(map[string]any)
	ups["pools"] = append(ups["pools"].([]any), map[string]any{
		"name": "cached", "servers": []any{originAddr}, "connect_timeout": "1s", "read_timeout": "1s",
		"write_timeout": "1s", "max_conns": 1024, "max_retries": 1,
	})
	ups["routes"] = append(ups["routes"].([]any), map[string]any{
		"prefix": "/cached/", "pool": "cached", "cache": map[string]any{
			"ttl": cacheTTL.String(), "stale_while_revalidate": cacheStale.String(), "stale_if_error": cacheStale.String(),
			"max_bytes": cacheMaxBytes,
		},
	})
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(c.dir, "edge-cache.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return nil, "", err
	}
	var penv []string
	if env.opt.GoMaxProcs > 0 {
		penv = append(penv, "GOMAXPROCS="+strconv.Itoa(env.opt.GoMaxProcs))
	}
	p, err := env.procs.Start("edge-cache", env.cpu(env.opt.ServerCPU), penv, env.bins["proxy"], "-c", path)
	if err != nil {
		return nil, "", err
	}
	if err := env.waitEdge(ctx, p, admin, "", ""); err != nil {
		return nil, "", err
	}
	return p, addr, nil
}

func (c *comparer) startCacheNginx(ctx context.Context, root, originAddr string) (*Proc, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	for _, d := range []string{"tmp-cache", "nginx-cache"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return nil, "", err
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(root, nginxCachePeerConf))
	if err != nil {
		return nil, "", err
	}
	conf := strings.NewReplacer("__DIR__", c.dir, "__LISTEN__", addr, "__ORIGIN__", originAddr,
		"__TTL__", nginxDuration(cacheTTL), "__STALE__", nginxDuration(cacheStale),
		"__MAX_BYTES__", strconv.Itoa(cacheMaxBytes>>20)+"m").Replace(string(tmpl))
	path := filepath.Join(c.dir, "nginx-cache.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	ng := toolPath(toolNginx)
	errLog := filepath.Join(c.dir, "nginx-cache-error.log")
	if out, err := exec.Command(ng, "-t", "-q", "-p", c.dir, "-c", path, "-e", errLog).CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("nginx rejected %s: %s", path, out)
	}
	p, err := c.env.procs.Start("nginx-cache", c.env.cpu(1), nil, ng, "-p", c.dir, "-c", path, "-e", errLog)
	if err != nil {
		return nil, "", err
	}
	if err := waitFor(ctx, p, "nginx-cache", 10*time.Second, tcpReady(addr)); err != nil {
		return nil, "", err
	}
	// One worker, plus the cache manager and (for its first minute) the
	// cache loader, which a proxy_cache_path brings: their CPU counts as
	// nginx's.
	if n := len(childPids(p.Pid())); n < 1 || n > 3 {
		return nil, "", fmt.Errorf("nginx-cache: expected one worker and the cache processes, found %d children", n)
	}
	return p, addr, nil
}

// nginxDuration writes d in nginx's units (whole seconds here).
func nginxDuration(d time.Duration) string {
	return strconv.Itoa(int(d/time.Second)) + "s"
}

// getOnce is one GET on a new connection: status, body and X-Cache.
func getOnce(addr, path string) (int, string, string, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + path)
	if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil {
		return 0, "", "", err
	}
	return resp.StatusCode(), string(resp.Body()), string(resp.Header.Peek("X-Cache")), nil
}

// burst opens n connections to addr, then sends GET path on all of them at
// once and reads the answers; it returns the statuses (0: no answer) and
// the time from the first request written to the last answer read.
func burst(ctx context.Context, addr, path string, n int) (map[int]int, time.Duration, error) {
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	d := net.Dialer{Timeout: 5 * time.Second}
	for len(conns) < n {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, 0, fmt.Errorf("connection %d of %d: %v", len(conns)+1, n, err)
		}
		conns = append(conns, c)
	}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: flashgate-bench\r\n\r\n")
	status := make([]int, n)
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	for i, c := range conns {
		wg.Go(func() {
			br := bufio.NewReaderSize(c, 4096)
			var resp fasthttp.Response
			ready.Done()
			<-start
			c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write(req); err != nil {
				return
			}
			if err := resp.Read(br); err != nil {
				return
			}
			status[i] = resp.StatusCode()
		})
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	codes := map[int]int{}
	for _, s := range status {
		codes[s]++
	}
	return codes, elapsed, nil
}

// hammer runs clients closed-loop GETs of path for d and counts the
// statuses (0: the request failed).
func hammer(ctx context.Context, addr, path string, clients int, d time.Duration) (map[int]int, error) {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: clients, MaxIdemponentCallAttempts: 1, ReadTimeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	codes := map[int]int{}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(path)
			req.Header.SetHost(addr)
			local := map[int]int{}
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := hc.Do(req, resp); err != nil {
					local[0]++
					continue
				}
				local[resp.StatusCode()]++
			}
			mu.Lock()
			for k, v := range local {
				codes[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(codes) == 0 {
		return nil, errors.New("no request was made")
	}
	return codes, nil
}

func statusString(codes map[int]int) string {
	var parts []string
	for _, code := range []int{200, 0} {
		if n := codes[code]; n > 0 {
			name := strconv.Itoa(code)
			if code == 0 {
				name = "failed"
			}
			parts = append(parts, fmt.Sprintf("%s: %d", name, n))
		}
	}
	for code, n := range codes {
		if code != 200 && code != 0 {
			parts = append(parts, fmt.Sprintf("%d: %d", code, n))
		}
	}
	return strings.Join(parts, ", ")
}
