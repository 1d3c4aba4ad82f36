package proctest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	if ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
		t.Fatalf("ports = %v, want distinct", ports)
	}
}

func shChild(t *testing.T, script string, ready func() error) *Child {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.log")
	c := NewChild(dir, false, Spec{
		Name:    func() string { return "sh" },
		Command: func() *exec.Cmd { return exec.Command("sh", "-c", script) },
		Output:  out,
		Log:     func() []byte { return Tail(out) },
		Ready:   ready,
		Probe:   "ready",
		Timeout: 300 * time.Millisecond,
		Backoff: time.Millisecond,
	})
	t.Cleanup(c.Close)
	return c
}

func TestLaunchPicksAgainOnBind(t *testing.T) {
	c := shChild(t, "echo 'Address already in use'; exit 1", func() error { return errors.New("no") })
	picks := 0
	err := c.Launch(func() error { picks++; return nil })
	if !errors.Is(err, ErrBind) || picks != 5 {
		t.Fatalf("err = %v after %d picks, want ErrBind after 5", err, picks)
	}
}

func TestExitAndTimeoutAreReported(t *testing.T) {
	c := shChild(t, "echo boom; exit 3", func() error { return errors.New("no") })
	if err := c.Launch(func() error { return nil }); err == nil || !strings.Contains(err.Error(), "sh exited: boom") {
		t.Fatalf("err = %v, want the exit with its log", err)
	}
	c = shChild(t, "exec sleep 60", func() error { return errors.New("no") })
	if err := c.Launch(func() error { return nil }); err == nil || !strings.Contains(err.Error(), "did not answer ready") {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

func TestLifecycle(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "up")
	c := shChild(t, "touch "+marker+"; exec sleep 60", func() error { _, err := os.Stat(marker); return err })
	if err := c.Launch(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	c.Pause()
	c.Resume()
	c.Stop()
	os.Remove(marker)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if err := c.Start(); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}
