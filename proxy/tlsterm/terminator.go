package tlsterm

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"flashgate/conf"
	"flashgate/conf/field"
	"flashgate/metrics"
)

// ExpiryWarning is how close to its expiry a certificate is logged (and
// reported by `proxy -t`) as due for renewal.
const ExpiryWarning = 14 * 24 * time.Hour

// Options configure a Terminator.
type Options struct {
	Log *slog.Logger
	// Now is the clock of ticket key rotation and certificate validity;
	// tests inject one.
	Now func() time.Time
}

// Terminator is the TLS side of the shopper listener: the certificate set
// in force, the session ticket keys, and the watch of the files.
type Terminator struct {
	log *slog.Logger
	now func() time.Time
	cfg *tls.Config

	certs atomic.Pointer[Certs]

	// mu serialises the loads and swaps of the set (the file watcher, a
	// config reload) and guards what they share.
	mu         sync.Mutex
	spec       conf.ListenTLSConfig // the section in force: what a file change reloads
	lastDigest [32]byte             // of the files last tried, good or bad: a repeated event is no news
	watcher    *fsnotify.Watcher
	watched    []string // directories
	kick       chan struct{}

	ticketMu sync.Mutex
	tickets  ticketKeys

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	handshakes, resumed, failed metrics.Counter
	reloadOK, reloadFailed      metrics.Counter
}

// New makes a Terminator presenting certs (loaded by Load from spec) and
// starts its ticket key rotation; Close stops it.
func New(spec conf.ListenTLSConfig, certs *Certs, opts Options) *Terminator {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := &Terminator{log: opts.Log, now: opts.Now, spec: spec, lastDigest: certs.digest,
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
		tickets: ticketKeys{rotation: spec.TicketRotation, lifetime: spec.TicketLifetime}}
	t.certs.Store(certs)
	t.cfg = &tls.Config{
		MinVersion: tls.VersionTLS12,
		// fasthttp speaks HTTP/1.1 only; a client that offers only h2 is
		// refused in the handshake rather than misunderstood after it.
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return t.certs.Load().certificate(hello), nil
		},
		SessionTicketsDisabled: !spec.SessionTickets,
	}
	if spec.SessionTickets {
		t.rotateTickets()
		t.wg.Add(1)
		go t.rotateLoop(spec.TicketRotation)
	}
	t.warnExpiring(certs)
	return t
}

// Close stops the rotation and the file watch. Connections are the
// server's to close.
func (t *Terminator) Close() {
	t.stopOnce.Do(func() { close(t.stop) })
	t.wg.Wait()
}

// Certs is the set in force.
func (t *Terminator) Certs() *Certs { return t.certs.Load() }

// Listener makes ln speak TLS. The handshake runs in the server's
// connection goroutine (fasthttp calls Handshake under its read and write
// timeouts), never in Accept.
func (t *Terminator) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, t: t} }

type listener struct {
	net.Listener
	t *Terminator
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: tls.Server(c, l.t.cfg), t: l.t}, nil
}

// errHandshake stands for every failed handshake towards the server: the
// TLS stack's own errors quote what the client sent (its protocols, its
// server name), and nothing a client sent reaches a log but the method,
// the path and the codes. The counter says how many.
var errHandshake = errors.New("tls handshake failed")

// conn counts its handshake and hides its error. It still is a TLS
// connection to fasthttp (Handshake, ConnectionState), so ctx.IsTLS holds.
type conn struct {
	*tls.Conn
	t          *Terminator
	shook, bad bool
}

func (c *conn) Handshake() error {
	err := c.Conn.Handshake()
	if !c.shook {
		c.shook = true
		switch {
		case err != nil:
			c.bad = true
			c.t.failed.Inc()
		case c.Conn.ConnectionState().DidResume:
			c.t.resumed.Inc()
			c.t.handshakes.Inc()
		default:
			c.t.handshakes.Inc()
		}
	}
	if err != nil {
		return errHandshake
	}
	return nil
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.bad {
		err = errHandshake
	}
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && c.bad {
		err = errHandshake
	}
	return n, err
}

func (t *Terminator) rotateLoop(every time.Duration) {
	defer t.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.rotateTickets()
		}
	}
}

func (t *Terminator) rotateTickets() {
	t.ticketMu.Lock()
	keys := t.tickets.rotate(t.now())
	t.ticketMu.Unlock()
	// Safe while handshakes run: the config guards its keys.
	t.cfg.SetSessionTicketKeys(keys)
}

// Apply puts a set loaded by a config reload in force, with the section it
// came from (the files a later change reloads). The file watch then looks
// once more, so a file that changed between the reload's load and now is
// not missed.
func (t *Terminator) Apply(spec conf.ListenTLSConfig, certs *Certs) {
	t.mu.Lock()
	t.spec = spec
	t.lastDigest = certs.digest
	t.certs.Store(certs)
	t.watchDirsLocked()
	t.mu.Unlock()
	t.warnExpiring(certs)
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// ReloadFiles re-reads the files of the section in force and puts them in
// force if they changed and load; otherwise the set in force stays. The
// error names the field (from `listen.tls`), the file and why.
func (t *Terminator) ReloadFiles(trigger string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	files, errs := readFiles(&t.spec)
	if len(errs) == 0 {
		if files.digest == t.lastDigest {
			return nil
		}
		t.lastDigest = files.digest
		var certs *Certs
		if certs, errs = parse(&t.spec, files, t.now()); len(errs) == 0 {
			t.certs.Store(certs)
			t.reloadOK.Inc()
			t.log.Info("tls certificates reloaded", "trigger", trigger, "certificates", certs.String())
			t.warnExpiring(certs)
			return nil
		}
	}
	var nested field.Errors
	nested.Nest("listen.tls", errs)
	t.reloadFailed.Inc()
	t.log.Error("tls certificate reload failed; keeping the certificates in force", "trigger", trigger, "err", nested.Error())
	return nested
}

func (t *Terminator) warnExpiring(certs *Certs) {
	for _, w := range certs.Expiring(t.now(), ExpiryWarning) {
		t.log.Warn(w)
	}
}

// Watch reloads the certificates when their files change, the way the
// config file is watched: the files' directories, not the files, because
// renewals (certbot, Kubernetes secrets) replace files by rename or by
// swapping a symlink, which a watch on the old inode never sees; events are
// debounced, and files whose bytes did not change are no reload.
func (t *Terminator) Watch(ctx context.Context, debounce time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.watcher = w
	t.watchDirsLocked()
	t.mu.Unlock()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		arm := func() {
			if timer == nil {
				timer = time.NewTimer(debounce)
			} else {
				timer.Reset(debounce)
			}
			fire = timer.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.stop:
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				t.log.Warn("tls certificate watch error", "err", err)
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				arm()
			case <-t.kick:
				arm()
			case <-fire:
				fire = nil
				t.ReloadFiles("file")
			}
		}
	}()
	return nil
}

// watchDirsLocked makes the watch cover the directories of the section's
// files, and only those.
func (t *Terminator) watchDirsLocked() {
	if t.watcher == nil {
		return
	}
	var want []string
	for _, c := range t.spec.Certificates {
		for _, f := range []string{c.CertFile, c.KeyFile} {
			d, err := filepath.Abs(filepath.Dir(f))
			if err == nil && !slices.Contains(want, d) {
				want = append(want, d)
			}
		}
	}
	for _, d := range t.watched {
		if !slices.Contains(want, d) {
			t.watcher.Remove(d)
		}
	}
	var now []string
	for _, d := range want {
		if slices.Contains(t.watched, d) {
			now = append(now, d)
			continue
		}
		if err := t.watcher.Add(d); err != nil {
			t.log.Warn("cannot watch a certificate directory; reload with SIGHUP or POST /admin/reload", "dir", d, "err", err)
			continue
		}
		now = append(now, d)
	}
	t.watched = now
}

// RegisterMetrics adds the handshake, reload and expiry series.
func (t *Terminator) RegisterMetrics(reg *metrics.Registry) {
	reg.Register("flashgate_tls_handshakes_total", "TLS handshakes on the shopper listener, by result (resumed: by a session ticket, no certificate sent).", "counter", func(w *metrics.Writer) {
		resumed := t.resumed.Value()
		w.Value(float64(t.handshakes.Value()-resumed), metrics.Label{Name: "result", Value: "full"})
		w.Value(float64(resumed), metrics.Label{Name: "result", Value: "resumed"})
		w.Value(float64(t.failed.Value()), metrics.Label{Name: "result", Value: "failed"})
	})
	reg.Register("flashgate_tls_certificate_reloads_total", "Reloads of the certificate files after they changed, by result (a failed one keeps the certificates in force).", "counter", func(w *metrics.Writer) {
		w.Value(float64(t.reloadOK.Value()), metrics.Label{Name: "result", Value: "ok"})
		w.Value(float64(t.reloadFailed.Value()), metrics.Label{Name: "result", Value: "failed"})
	})
	reg.Register("flashgate_tls_certificate_expiry_timestamp_seconds", "Unix time at which each certificate in force expires.", "gauge", func(w *metrics.Writer) {
		for _, c := range t.certs.Load().list {
			w.Value(float64(c.NotAfter.Unix()), metrics.Label{Name: "cert_file", Value: c.CertFile})
		}
	})
}
