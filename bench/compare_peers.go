package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/orders/stock"
)

// The peers bench compare measures flashgate against: nginx serving the
// same page, the OpenResty seckill pattern and redis-benchmark calling the
// same deduction script on the same Redis.

func nginxVersion() string {
	out, err := exec.Command(toolPath(toolNginx), "-v").CombinedOutput()
	if err != nil {
		return "nginx ?"
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: "))
}

// The files of the repository compare reads, relative to its root
// (TestRepoFilesExist keeps them true when the tree moves).
var (
	nginxPeerConf     = filepath.Join("bench", "peers", "nginx-edge.conf")
	openrestyPeerConf = filepath.Join("bench", "peers", "openresty-seckill.conf")
	// deductScript is the edge's own deduction script, which the OpenResty
	// peer runs too: the same work per attempt.
	deductScript = filepath.Join("orders", "stock", "lua", "deduct.lua")
)

// startNginx runs bench/peers/nginx-edge.conf the way compare-nginx.sh
// does: the page as flashgate serves it (same bytes and headers), the
// proxied paths to the same origin, limit_req + limit_conn never rejecting.
func (c *comparer) startNginx(ctx context.Context, root string) error {
	env := c.env
	www := filepath.Join(c.dir, "www")
	os.MkdirAll(www, 0o755)
	os.MkdirAll(filepath.Join(c.dir, "tmp"), 0o755)
	resp, err := http.Get("http://" + env.EdgeAddr + "/seckill/p1")
	if err != nil {
		return err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("flashgate answered %d for /seckill/p1", resp.StatusCode)
	}
	if err := os.WriteFile(filepath.Join(www, "index.html"), page, 0o644); err != nil {
		return err
	}
	csp, cc := resp.Header.Get("Content-Security-Policy"), resp.Header.Get("Cache-Control")
	if csp == "" || cc == "" {
		return errors.New("flashgate's page lacks Content-Security-Policy or Cache-Control")
	}
	c.page, c.pageCSP, c.pageCC = page, csp, cc
	if c.ngAddr, err = freeAddr(); err != nil {
		return err
	}
	tmpl, err := os.ReadFile(filepath.Join(root, nginxPeerConf))
	if err != nil {
		return err
	}
	conf := strings.NewReplacer("__DIR__", c.dir, "__ROOT__", www, "__LISTEN__", c.ngAddr, "__ORIGIN__", env.OriginAddr,
		"__CSP__", csp, "__PAGE_CACHE_CONTROL__", cc, "__SENDFILE__", "off").Replace(string(tmpl))
	conf = strings.ReplaceAll(conf, "\n__L__", "\n") // LIMITS=1: limit_req and limit_conn on
	path := filepath.Join(c.dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	if c.nginx, err = c.startNginxConf(ctx, "nginx", path, c.ngAddr); err != nil {
		return err
	}
	// Same answers before measuring.
	for _, chk := range []struct{ name, addr string }{{"flashgate", env.EdgeAddr}, {"nginx", c.ngAddr}} {
		r, err := http.Get("http://" + chk.addr + "/seckill/p1")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || string(b) != string(page) {
			return fmt.Errorf("%s: /seckill/p1 answered %d with a different body", chk.name, r.StatusCode)
		}
		r, err = http.Get("http://" + chk.addr + "/items/p1")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || r.Header.Get("X-Origin") != "flashgate-bench" {
			return fmt.Errorf("%s: /items/p1 did not come from the origin (%d)", chk.name, r.StatusCode)
		}
	}
	c.setup = append(c.setup, "nginx: bench/peers/nginx-edge.conf, 1 worker, the page as flashgate serves it (same bytes and headers, open_file_cache, sendfile off), proxy_pass with upstream keepalive, limit_req + limit_conn never rejecting, no access log")
	return nil
}

func (c *comparer) startNginxConf(ctx context.Context, name, path, addr string) (*Proc, error) {
	ng := toolPath(toolNginx)
	errLog := filepath.Join(c.dir, name+"-error.log")
	if out, err := exec.Command(ng, "-t", "-q", "-p", c.dir, "-c", path, "-e", errLog).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx rejected %s: %s", path, out)
	}
	p, err := c.env.procs.Start(name, c.env.cpu(1), nil, ng, "-p", c.dir, "-c", path, "-e", errLog)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, p, name, 10*time.Second, tcpReady(addr)); err != nil {
		return nil, err
	}
	if n := len(childPids(p.Pid())); n != 1 {
		return nil, fmt.Errorf("%s: expected one worker, found %d", name, n)
	}
	return p, nil
}

// startOpenResty runs bench/peers/openresty-seckill.conf against the run's
// Redis with the deduction script loaded and its own products warmed: "or"
// (stock to spare, for attempts) and "so" (the edge's sold-out product: the
// first call sets the peer's sold-out flag, and the script writes nothing).
func (c *comparer) startOpenResty(ctx context.Context, root string) error {
	env := c.env
	if err := c.loadDeductPeers(root); err != nil {
		return err
	}
	var err error
	if c.orAddr, err = freeAddr(); err != nil {
		return err
	}
	host, port, _ := strings.Cut(env.RedisAddr, ":")
	tmpl, err := os.ReadFile(filepath.Join(root, openrestyPeerConf))
	if err != nil {
		return err
	}
	conf := strings.NewReplacer("__DIR__", c.dir, "__LISTEN__", c.orAddr, "__REDIS_HOST__", host, "__REDIS_PORT__", port,
		"__SHA__", c.sha, "__GRACE_MS__", "604800000", "__ORDER_TTL_MS__", "604800000", "__LIMIT__", "1",
		"__PRICE__", "9900", "__TOKEN_TTL_MS__", "600000", "__NODE__", "99",
		"__DEDUCT_CALL__", openrestyDeductCall()).Replace(string(tmpl))
	path := filepath.Join(c.dir, "openresty.conf")
	os.MkdirAll(filepath.Join(c.dir, "tmp"), 0o755) // its temp paths, shared with the nginx peer's
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	if c.or, err = c.startNginxConf(ctx, "openresty", path, c.orAddr); err != nil {
		return err
	}
	// Check its answers: a purchase, then the sold-out flag for "so".
	cl := &fasthttp.Client{}
	try := func(product string) (int, string) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		i := int(c.next.Add(1))
		req.SetRequestURI("http://" + c.orAddr + "/api/seckill/do")
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer "+c.users.SignFresh(i))
		req.SetBodyString(`{"productId":"` + product + `","token":"` + string(c.users.Token(nil, c.users.ID(i), product, time.Hour)) + `","quantity":1}`)
		if err := cl.DoTimeout(req, resp, 5*time.Second); err != nil {
			return 0, err.Error()
		}
		return resp.StatusCode(), string(resp.Body())
	}
	if st, body := try("or"); st != 200 {
		return fmt.Errorf("openresty peer: a purchase answered %d %s (log %s)", st, body, filepath.Join(c.dir, "openresty-error.log"))
	}
	for range 2 {
		if st, body := try("so"); st != 410 {
			return fmt.Errorf("openresty peer: sold-out product answered %d %s", st, body)
		}
	}
	c.setup = append(c.setup, "openresty: bench/peers/openresty-seckill.conf (Debian nginx + libnginx-mod-http-lua + lua-nginx-redis), 1 worker, lua_shared_dict sold-out flag, EVALSHA of orders/stock/lua/deduct.lua on the same Redis, cosocket keepalive")
	return nil
}

func (c *comparer) ngPids() []int   { return procTree(c.nginx) }
func (c *comparer) orPids() []int   { return procTree(c.or) }
func (c *comparer) edgePids() []int { return []int{c.env.Edge.Pid()} }
func (c *comparer) barePids() []int { return []int{c.bare.Pid()} }

func procTree(p *Proc) []int {
	if p == nil {
		return nil
	}
	return append([]int{p.Pid()}, childPids(p.Pid())...)
}

// trimPeerKeys drops the outbox streams the peers filled (nobody relays
// them), so every round starts alike.
func (c *comparer) trimPeerKeys() {
	rc, err := dialRedis(c.env.RedisAddr)
	if err != nil {
		return
	}
	defer rc.Close()
	rc.Do("DEL", stock.OutboxKey("or"), stock.OutboxKey(rbProduct))
}

// redisBenchmark is orders/stock/testdata/redis-benchmark.sh's call, on the run's
// Redis: EVALSHA deduct.lua with one attempt of a random shopper, order
// and token per call, stock to spare.
func (c *comparer) redisBenchmark() (Sample, float64, error) {
	host, port, _ := strings.Cut(c.env.RedisAddr, ":")
	// Size -n for about the measurement time at the rate seen last.
	n := int(c.rbRate * c.f.duration.Seconds())
	if n <= 0 {
		n = 200000
	}
	keys, argv := redisBenchmarkCall()
	args := []string{"-h", host, "-p", port, "-n", strconv.Itoa(n), "-c", strconv.Itoa(c.f.rbClients), "-r", "100000000", "-q",
		"EVALSHA", c.sha, strconv.Itoa(len(keys))}
	args = append(append(args, keys...), argv...)
	bin := toolPath(toolRedisBench)
	if cpu := c.env.cpu(0); cpu >= 0 {
		args = append([]string{"-c", strconv.Itoa(cpu), bin}, args...)
		bin = "taskset"
	}
	if c.f.pin {
		// Redis's ceiling: a CPU of its own (the servers' CPU, idle now),
		// redis-benchmark on the other one. It floats again afterwards.
		setAffinity(c.env.Redis.Pid(), 1)
		defer setAffinity(c.env.Redis.Pid(), -1)
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	var toolCPU float64
	if cmd.ProcessState != nil {
		toolCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return Sample{}, toolCPU, fmt.Errorf("redis-benchmark: %v: %s", err, out)
	}
	rps, p50, err := parseRedisBenchmark(string(out))
	if err != nil {
		return Sample{}, toolCPU, err
	}
	c.rbRate = rps
	return Sample{Tool: fmt.Sprintf("redis-benchmark -c %d -n %d EVALSHA", c.f.rbClients, n), Requests: int64(n), RPS: rps, P50: p50}, toolCPU, nil
}

// rbProduct is the product redis-benchmark's calls buy (stock to spare).
const rbProduct = "b"

// redisBenchmarkCall is deduct.lua's call for redis-benchmark, from
// stock.DeductCall: one attempt of a random shopper, order and token per
// call (redis-benchmark replaces each __rand_int__ with a random number).
func redisBenchmarkCall() (keys, args []string) {
	return stock.DeductCall(rbProduct, "604800000", "604800000", "1", stock.ScriptAttempt{
		User: "user__rand_int__", Qty: "1", Limit: "1000000", OrderID: "__rand_int__", PriceCents: "1999",
		NowMs: "1700000000000", TokenTTLMs: "600000", Node: "1", PayByMs: "0", TokenNonce: "__rand_int__"})
}

// openrestyDeductCall is the OpenResty peer's deduct.lua call after the
// SHA: numkeys, KEYS and ARGV as Lua expressions over the handler's locals
// and cfg, from stock.DeductCall with @lua@ placeholders.
func openrestyDeductCall() string {
	keys, args := stock.DeductCall("@product@", "@cfg.grace_ms@", "@cfg.order_ttl_ms@", "1", stock.ScriptAttempt{
		User: "@user@", Qty: "@qty@", Limit: "@cfg.limit@", OrderID: "@oid@", PriceCents: "@cfg.price@",
		NowMs: "@now_ms@", TokenTTLMs: "@cfg.token_ttl_ms@", Node: "@cfg.node@", PayByMs: "0", TokenNonce: "@token@"})
	parts := []string{strconv.Itoa(len(keys))}
	for _, v := range append(keys, args...) {
		parts = append(parts, luaExpr(v))
	}
	return strings.Join(parts, ", ")
}

// luaExpr writes s as a Lua expression: its text quoted, each @name@ in it
// the Lua expression name, joined with "..".
func luaExpr(s string) string {
	var out []string
	for i, piece := range strings.Split(s, "@") {
		switch {
		case i%2 == 1:
			out = append(out, piece)
		case piece != "":
			out = append(out, strconv.Quote(piece))
		}
	}
	return strings.Join(out, " .. ")
}

// loadDeductPeers loads deduct.lua on the run's Redis and warms the peers'
// own products, once: both the OpenResty peer and redis-benchmark call the
// script by its SHA, and either may run without the other.
func (c *comparer) loadDeductPeers(root string) error {
	if c.sha != "" {
		return nil
	}
	lua, err := os.ReadFile(filepath.Join(root, deductScript))
	if err != nil {
		return err
	}
	rc, err := dialRedis(c.env.RedisAddr)
	if err != nil {
		return err
	}
	defer rc.Close()
	v, err := rc.Do("SCRIPT", "LOAD", string(lua))
	if err != nil {
		return err
	}
	c.sha = fmt.Sprint(v)
	// The script checks the server's run id against the meta's (the
	// fence, see orders/stock/fence.go), as the edge's sales have it: the
	// peers do the same work, on a sale verified on this server.
	info, err := rc.Do("INFO", "server")
	if err != nil {
		return err
	}
	_, rest, _ := strings.Cut(fmt.Sprint(info), "run_id:")
	runID, _, _ := strings.Cut(rest, "\r")
	for _, cmd := range [][]string{
		{"SET", stock.StockKey("or"), "1000000000"},
		{"HSET", stock.MetaKey("or"), "initial", "1000000000", "limit", "1", "end", "0", "runid", runID},
		{"SET", stock.StockKey(rbProduct), "1000000000000000"},
		{"HSET", stock.MetaKey(rbProduct), "end", "0", "runid", runID},
	} {
		if _, err := rc.Do(cmd...); err != nil {
			return err
		}
	}
	return nil
}
