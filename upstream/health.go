package upstream

import (
	"flashgate/conf"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// checker is the active health check of one server: a goroutine that GETs
// the health path every interval on its own connection, so a saturated
// request pool cannot make a healthy server look dead.
type checker struct {
	cfg     conf.HealthConfig
	connect time.Duration // the pool's connect timeout, also a check setting
	st      *serverState
	hc      *fasthttp.HostClient
	uri     string
	stop    chan struct{}
	once    sync.Once
}

// healthMaxBody bounds what a health endpoint may answer; anything larger
// fails the check rather than buffering it every interval.
const healthMaxBody = 1 << 20

func (m *Manager) startChecker(srv *server, cfg conf.HealthConfig, connect time.Duration) *checker {
	ck := &checker{
		cfg:     cfg,
		connect: connect,
		st:      srv.st,
		uri:     "http://" + srv.addr + cfg.Path,
		hc: &fasthttp.HostClient{
			Addr:                      srv.addr,
			Dial:                      dialFunc(min(connect, cfg.Timeout)),
			ReadTimeout:               cfg.Timeout,
			WriteTimeout:              cfg.Timeout,
			MaxConns:                  1,
			MaxIdemponentCallAttempts: 1,
			MaxResponseBodySize:       healthMaxBody,
			SecureErrorLogMessage:     true,
		},
		stop: make(chan struct{}),
	}
	m.wg.Add(1)
	go m.runChecker(ck)
	return ck
}

// halt asks the goroutine to stop; it does not wait (Close does).
func (ck *checker) halt() { ck.once.Do(func() { close(ck.stop) }) }

func (m *Manager) runChecker(ck *checker) {
	defer m.wg.Done()
	defer ck.hc.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(ck.uri)
	req.Header.SetUserAgent("flashgate-health-check")

	t := time.NewTicker(ck.cfg.Interval)
	defer t.Stop()
	var oks, fails int
	for {
		// The first probe runs at once so a dead server is found within
		// fall probes of a start or reload, not an interval later.
		err := ck.hc.DoTimeout(req, resp, ck.cfg.Timeout)
		select {
		case <-ck.stop:
			return // a replaced checker must not overwrite its successor's verdict
		default:
		}
		var reason string
		switch code := resp.StatusCode(); {
		case err != nil:
			reason = err.Error()
		case code < 200 || code >= 400:
			reason = fmt.Sprintf("status %d", code)
		}
		if reason == "" {
			oks, fails = oks+1, 0
			if oks >= ck.cfg.Rise && !ck.st.up.Load() {
				ck.st.up.Store(true)
				m.log.Info("upstream server up", "pool", ck.st.pool, "server", ck.st.addr, "successes", oks)
			}
		} else {
			oks, fails = 0, fails+1
			if fails >= ck.cfg.Fall && ck.st.up.Load() {
				ck.st.up.Store(false)
				m.log.Warn("upstream server down", "pool", ck.st.pool, "server", ck.st.addr,
					"failures", fails, "reason", reason)
			}
		}
		select {
		case <-ck.stop:
			return
		case <-t.C:
		}
	}
}
