package proxy

import (
	"fmt"
	"strings"
	"testing"

	"flashgate/conf"
	"flashgate/internal/redistest"
)

// ip_limit with policy redis: the edges built by New hand their Redis store
// to the filters, so two edges on one Redis share one client's budget;
// `proxy -t` checks the same file without connecting.
func TestIPLimitPolicyRedisSharedByTwoEdges(t *testing.T) {
	srv := redistest.New(t)
	origin := startOrigin(t)
	body := strings.Replace(fmt.Sprintf(baseConfig, "1r/m", 3, origin), "    nodelay: true\n",
		"    nodelay: true\n    policy: redis\n    allowance: 0\n", 1) +
		"redis:\n  addr: \"" + srv.Addr() + "\"\nauth:\n  demo_login: false\n"
	doc, err := conf.Parse([]byte(body), "edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(doc); err != nil {
		t.Fatalf("proxy -t: %v", err)
	}
	edges := []*edge{startEdge(t, body), startEdge(t, body)}
	passed := 0
	for i := range 10 {
		code, _, _ := get(t, edges[i%2].base+"/api/seckill/status?productId=p1")
		if code != 429 {
			passed++
		}
	}
	if passed != 4 {
		t.Fatalf("two edges passed %d of 10 from one address, want 4 (burst 3, shared)", passed)
	}
	// Each edge asked Redis until it was refused, then answered itself.
	_, _, m := get(t, edges[0].adminBase+"/metrics")
	if !strings.Contains(m, `flashgate_limit_redis_calls_total{result="pass"} 2`) || !strings.Contains(m, `flashgate_limit_redis_calls_total{result="refuse"} 1`) {
		t.Fatalf("edge 0's metrics:\n%s", grepLines(m, "flashgate_limit_redis"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
