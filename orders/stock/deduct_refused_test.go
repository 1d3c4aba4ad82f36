package stock

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"flashgate/internal/await"
)

// TestDeductRefusedDialIsNotSent: with Redis stopped the client's dial is
// refused; nothing was written, so the attempt did not happen (ErrNotSent,
// not ErrUnknown), and the failed call still counts for a breaker
// (ErrCallFailed).
func TestDeductRefusedDialIsNotSent(t *testing.T) {
	s, srv := openReal(t, Options{Timeout: 500 * time.Millisecond})
	warm(t, s, "nr", 10, 1)
	mustDeduct(t, s, attempt("nr", "before", 1, 1))
	srv.Stop()

	// The connection the stop broke may still take a write before the
	// client notices; from then on every call dials, and is refused.
	var err error
	await.Until(t, 10*time.Second, "a deduction refused at the dial", func() bool {
		_, err = s.Deduct(context.Background(), attempt("nr", "after", 1, 1))
		return err != nil && errors.Is(err, syscall.ECONNREFUSED)
	})
	if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrUnknown) {
		t.Fatalf("refused dial: %v; want ErrNotSent, not ErrUnknown", err)
	}
	if !errors.Is(err, ErrCallFailed) {
		t.Fatalf("refused dial: %v; want ErrCallFailed too (Redis did fail)", err)
	}
	if !strings.Contains(err.Error(), "not sent") {
		t.Errorf("message %q does not say it was not sent", err)
	}
}

// The classification itself, for the dial failures a loopback server cannot
// produce on demand (no route, a name that does not resolve): the errors
// are the net package's own types, as net.Dialer returns them.
func TestCallErrorClassifies(t *testing.T) {
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, tc := range []struct {
		name    string
		err     error
		notSent bool
	}{
		{"refused", dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		{"no route", dial(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), true},
		{"dns", dial(&net.DNSError{Err: "no such host", Name: "redis.invalid", IsNotFound: true}), true},
		{"dial timeout", dial(context.DeadlineExceeded), true},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
		{"reset after write", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"deadline", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := callError(tc.err)
			if errors.Is(err, ErrNotSent) != tc.notSent || errors.Is(err, ErrUnknown) == tc.notSent {
				t.Fatalf("callError(%v) = %v: not sent %v, unknown %v; want not sent %v",
					tc.err, err, errors.Is(err, ErrNotSent), errors.Is(err, ErrUnknown), tc.notSent)
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("callError(%v) = %v lost the cause", tc.err, err)
			}
		})
	}
}
