package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/kafkatest"
	"flashgate/internal/promtest"
	"flashgate/internal/tlstest"
)

// The Prometheus test runs what deploy/ ships against Debian's Prometheus
// scraping two edge processes of the real binary, with the admin token.

const (
	promToken = "e2e-prometheus-admin-token-0123456789"
	// promEvery is the test Prometheus's scrape and evaluation interval,
	// promFor every alert's `for:` in its copy of the shipped rules.
	promEvery = 500 * time.Millisecond
	promFor   = 2 * time.Second
)

// promShopper buys on one edge over its own client (HTTPS for the edge
// with listen.tls).
type promShopper struct {
	base string
	hc   *http.Client
}

func (s promShopper) post(path, jwt, body string) (int, string) {
	req, _ := http.NewRequest("POST", s.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+jwt)
	res, err := s.hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	return res.StatusCode, string(b)
}

// TestPrometheusAlerts: two edges (one with listen.tls, its certificate due
// in a day) on real Redis, Kafka (kfake) and ClickHouse, shoppers buying on
// both, and Debian's Prometheus scraping both admin listeners with the admin
// token and evaluating deploy/prometheus/flashgate.rules.yml (every `for:`
// shortened, nothing else changed). Every panel of deploy/grafana's
// dashboard and every recording rule returns series, and every flashgate
// series the rules and the dashboard name is scraped. On the healthy fleet only the certificate
// alert fires, for the TLS edge only. Redis stopped (SIGSTOP): the
// FlashgateRedisDown alert goes pending, then firing, for both edges; Redis
// resumed: it resolves. The Kafka broker's process killed (SIGKILL):
// FlashgateKafkaDown the same; the broker started again: it resolves.
func TestPrometheusAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ClickHouse, two edge processes and Prometheus")
	}
	if _, err := os.Stat(promtest.Binary); err != nil {
		t.Fatal(promtest.MissingHint)
	}
	bin := buildProxy(t)
	env := newOrdEnv(t)
	// The broker in a process of its own, to be killed.
	kafkaProc := kafkatest.StartProcess(t)
	env.brokers, env.kafka = []string{kafkaProc.Addr()}, nil
	ca := tlstest.NewCA(t)
	cert, key := ca.Issue(t, tlstest.Leaf{Name: "shop", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	sales := activities(
		"  - {product_id: pm, name: \"Metrics\", price: \"1.00\", stock: 1000000, limit: 1000, start: \"+0s\", end: \"+1h\", pay_timeout: 1h}\n",
		"  - {product_id: pr, name: \"Room\", price: \"1.00\", stock: 10, limit: 1, start: \"+30m\", end: \"+1h\",\n"+
			"     waiting_room: {enabled: true, prequeue_opens: 1h, admit_per_minute: 600, session: 1m}}\n")
	// The edges sample Redis every 2 s, one call after another: a short
	// timeout keeps a sample of a stopped Redis short.
	fast := "redis: {timeout: 500ms}\n"

	var admins []string
	var shoppers []promShopper
	for i := range 2 {
		addr, admin := ordFreePort(t), ordFreePort(t)
		listen := fmt.Sprintf("listen: {addr: %q}\n", addr)
		shop := promShopper{base: "http://" + addr, hc: &http.Client{Timeout: 5 * time.Second}}
		if i == 0 {
			listen = fmt.Sprintf("listen: {addr: %q, tls: {certificates: [{cert_file: %q, key_file: %q}]}}\n", addr, cert, key)
			shop = promShopper{base: "https://" + addr, hc: &http.Client{Timeout: 5 * time.Second,
				Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}}
		}
		first := fmt.Sprintf("node_id: %d\nredis: {addr: %q}\nadmin: {addr: %q, token: %q}\nlog: {level: info, format: json}\n",
			41+i, env.redis.Addr(), admin, promToken) + listen
		cfg := writeConfig(t, append([]string{first}, env.pipeline(true, sales, fast)...)...)
		startEdgeProc(t, bin, "-c", cfg)
		admins = append(admins, admin)
		shoppers = append(shoppers, shop)
	}

	// Shoppers on both edges, a few purchases a second each (paced, not
	// timed: nothing waits on them), until the test ends.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	for i, s := range shoppers {
		wg.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				jwt := env.j.get("pu" + strconv.Itoa(i) + "-" + strconv.Itoa(n%40))
				code, body := s.post("/api/seckill/token", jwt, `{"productId":"pm"}`)
				if code != 200 {
					continue
				}
				s.post("/api/seckill/do", jwt, `{"productId":"pm","token":"`+jsonStr([]byte(body), "token")+`","quantity":1}`)
			}
		})
	}

	src, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "flashgate.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := promtest.Rules(src, promFor)
	if err != nil {
		t.Fatal(err)
	}
	prom := promtest.Start(t, promtest.Config{Job: "flashgate", Targets: admins, Token: promToken, Rules: rules, Interval: promEvery})
	t0 := time.Now()
	since := func() string { return time.Since(t0).Truncate(100 * time.Millisecond).String() }

	// Both edges scraped: the token is accepted (a 401 is up 0).
	await.NoError(t, 30*time.Second, "both edges scraped", func() error {
		up, err := prom.Query(`up{job="flashgate"} == 1`)
		if err == nil && len(up) != 2 {
			err = fmt.Errorf("%d of 2 targets up; prometheus log: %s", len(up), prom.Log())
		}
		return err
	})

	// Every panel of the dashboard returns series.
	dash, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "flashgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	panels, err := promtest.DashboardQueries(dash)
	if err != nil {
		t.Fatal(err)
	}
	await.NoError(t, 60*time.Second, "every dashboard query returns series", func() error {
		var empty []string
		for _, p := range panels {
			res, err := prom.Query(p.Expr)
			if err != nil {
				return fmt.Errorf("%s %s: %w", p.Title, p.RefID, err)
			}
			if len(res) == 0 {
				empty = append(empty, p.Title+" "+p.RefID+": "+p.Expr)
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("no series:\n  %s", strings.Join(empty, "\n  "))
		}
		return nil
	})
	t.Logf("%s: all %d dashboard queries return series", since(), len(panels))

	// Every flashgate series the rules and the dashboard read is scraped
	// (those an alert reads with a healthy fleet included: they are
	// written before anything goes wrong).
	var named strings.Builder
	named.Write(src)
	for _, p := range panels {
		named.WriteString(p.Expr + "\n")
	}
	await.NoError(t, 30*time.Second, "every series named is scraped", func() error {
		have, err := prom.Names()
		if err != nil {
			return err
		}
		var missing []string
		for n := range promtest.SeriesNames(named.String()) {
			if !have[n] {
				missing = append(missing, n)
			}
		}
		slices.Sort(missing)
		if len(missing) > 0 {
			return fmt.Errorf("not scraped: %v", missing)
		}
		return nil
	})

	// Every recording rule gives series (a ratio 0 rather than nothing
	// while there is no 5xx).
	records, err := promtest.Records(src)
	if err != nil || len(records) == 0 {
		t.Fatalf("recording rules: %v %v", records, err)
	}
	await.NoError(t, 30*time.Second, "every recording rule gives series", func() error {
		for _, r := range records {
			res, err := prom.Query(r)
			if err != nil {
				return err
			}
			if len(res) == 0 {
				return fmt.Errorf("%s: no series", r)
			}
		}
		return nil
	})

	// The healthy fleet: the certificate alert fires for the TLS edge, its
	// certificate due in a day, and nothing else is active.
	certAlert := awaitAlert(t, prom, "FlashgateCertificateExpiring", []string{admins[0]}, since)
	if !strings.Contains(certAlert.Annotations["summary"], "expires in 23h") {
		t.Errorf("certificate alert: %q", certAlert.Annotations["summary"])
	}
	if others := activeExcept(t, prom, "FlashgateCertificateExpiring"); len(others) > 0 {
		t.Fatalf("alerts on a healthy fleet: %v", others)
	}

	// The fault: Redis stops answering.
	env.redis.Pause()
	paused := true
	defer func() {
		if paused {
			env.redis.Resume()
		}
	}()
	t.Logf("%s: redis stopped (SIGSTOP)", since())
	awaitAlert(t, prom, "FlashgateRedisDown", admins, since)
	t.Logf("%s: also active during the fault: %v", since(), activeExcept(t, prom, "FlashgateCertificateExpiring", "FlashgateRedisDown"))

	// The heal: it resolves.
	env.redis.Resume()
	paused = false
	t.Logf("%s: redis resumed (SIGCONT)", since())
	awaitResolved(t, prom, "FlashgateRedisDown", since)

	// The broker process killed: the consumers cannot read their lag.
	kafkaProc.Kill()
	t.Logf("%s: kafka broker killed (SIGKILL)", since())
	awaitAlert(t, prom, "FlashgateKafkaDown", admins, since)
	t.Logf("%s: also active during the fault: %v", since(), activeExcept(t, prom, "FlashgateCertificateExpiring", "FlashgateKafkaDown"))
	kafkaProc.Start(t)
	t.Logf("%s: kafka broker started again", since())
	awaitResolved(t, prom, "FlashgateKafkaDown", since)
}

// awaitResolved waits until alert name is neither pending nor firing (a
// resolved alert leaves /api/v1/alerts).
func awaitResolved(t *testing.T, prom *promtest.Server, name string, since func() string) {
	t.Helper()
	await.NoError(t, 30*time.Second, name+" resolved", func() error {
		alerts, err := prom.Alerts()
		if err != nil {
			return err
		}
		for _, a := range alerts {
			if a.Name() == name {
				return fmt.Errorf("still %s for %s", a.State, a.Labels["instance"])
			}
		}
		return nil
	})
	t.Logf("%s: %s resolved", since(), name)
}

// awaitAlert waits until alert name fires for every instance in instances,
// having been seen pending first (the `for:` holds it pending for
// promFor), and returns one of them.
func awaitAlert(t *testing.T, prom *promtest.Server, name string, instances []string, since func() string) promtest.Alert {
	t.Helper()
	pending, firing := map[string]bool{}, map[string]promtest.Alert{}
	await.NoError(t, 60*time.Second, name+" pending then firing", func() error {
		alerts, err := prom.Alerts()
		if err != nil {
			return err
		}
		for _, a := range alerts {
			inst := a.Labels["instance"]
			if a.Name() != name {
				continue
			}
			if !slices.Contains(instances, inst) {
				return fmt.Errorf("%s for %s, not one of %v: %v", name, inst, instances, a.Labels)
			}
			switch a.State {
			case "pending":
				if !pending[inst] {
					t.Logf("%s: %s pending for %s", since(), name, inst)
				}
				pending[inst] = true
			case "firing":
				if _, seen := firing[inst]; !seen {
					t.Logf("%s: %s firing for %s: %s", since(), name, inst, a.Annotations["summary"])
				}
				firing[inst] = a
			}
		}
		if len(firing) < len(instances) {
			return fmt.Errorf("firing for %d of %v", len(firing), instances)
		}
		return nil
	})
	for _, inst := range instances {
		if !pending[inst] {
			t.Errorf("%s for %s was never seen pending before firing", name, inst)
		}
	}
	return firing[instances[0]]
}

// activeExcept lists the active alerts other than names, as
// "name(state, instance/product)".
func activeExcept(t *testing.T, prom *promtest.Server, names ...string) []string {
	t.Helper()
	alerts, err := prom.Alerts()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range alerts {
		if !slices.Contains(names, a.Name()) {
			out = append(out, fmt.Sprintf("%s(%s, %s%s)", a.Name(), a.State, a.Labels["instance"], a.Labels["product"]))
		}
	}
	slices.Sort(out)
	return out
}
