package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// guardConfig is the admin tests' edge: the embedded stand-ins, one live
// sale, and the admin listener as shipped (loopback, no token).
const guardConfig = `
listen: {addr: "127.0.0.1:0"}
admin: {addr: "127.0.0.1:0"}
log: {access_sample: 0}
reload: {watch: false}
data_dir: ""
activities:
  - {product_id: p1, name: "Guarded", price: "1.00", stock: 10, limit: 1, start: "+0s", end: "+1h"}
`

// adminCall is one HTTP request to a listener, headers as a browser or
// curl would set them ("" leaves one out; host "" is the address dialled).
type adminCall struct {
	method, path, host, contentType, origin, token, body string
}

func (c adminCall) do(t *testing.T, admin string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(c.method, "http://"+admin+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
