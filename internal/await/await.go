package await

import (
	"fmt"
	"testing"
	"time"
)

// maxPoll bounds the pause between two polls: short enough that a test
// goes on soon after the condition holds, long enough not to busy the
// machine while it does not.
const maxPoll = 50 * time.Millisecond

// Until polls cond until it holds, and fails the test when it still does not
// after within, naming what it waited for.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}); err != nil {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// NoError calls f until it returns nil, and fails the test with f's last
// error when it has not after within.
func NoError(t testing.TB, within time.Duration, what string, f func() error) {
	t.Helper()
	if err := poll(within, f); err != nil {
		t.Fatalf("%s: not done after %v: %v", what, within, err)
	}
}

var errNotYet = fmt.Errorf("not yet")

// poll calls f, pausing 1ms, 2ms, 4ms ... up to maxPoll between calls,
// until it returns nil or within has passed; it returns f's last error.
func poll(within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPoll)
	}
}
