package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestUnknownCommandRefused runs the built binary with command lines an
// operator gets wrong. Each must print the usage and exit 2 before anything
// starts, as nginx, caddy and git do. `proxy reconcle -c FILE` used to end
// flag parsing at the typo'd word and start an edge on the built-in config
// (the test would then time out waiting for an exit).
func TestUnknownCommandRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// A valid config on free ports: were a command line wrongly taken for
	// "run the edge", it would start and serve instead of failing.
	bin, cfg := buildWithConfig(t)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"reconcle", "-c", cfg}, `unknown command "reconcle"`},
		{[]string{"serve"}, `unknown command "serve"`},
		{[]string{"Orders", "-c", cfg}, `unknown command "Orders"`},
		{[]string{"-c", cfg, "reconcile"}, `unexpected argument "reconcile"`},
		{[]string{"-t", "-c", cfg, "extra"}, `unexpected argument "extra"`},
		{[]string{"reconcile", "-c", cfg, "p1"}, `unexpected argument "p1"`},
		{[]string{"orders", cfg}, `unexpected argument "` + cfg + `"`},
		{[]string{"health", "-c", cfg, "now"}, `unexpected argument "now"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2\nstderr: %s", err, stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, tc.says) || !strings.Contains(msg, "usage: proxy") {
				t.Fatalf("stderr does not say %q and show the usage:\n%s", tc.says, msg)
			}
			if stdout.Len() > 0 || strings.Contains(msg, "edge started") {
				t.Fatalf("something ran: stdout %q\nstderr %s", stdout.String(), msg)
			}
		})
	}
	// Every command of the table is in the usage, and a known one still
	// runs: health on a config with no edge behind it fails with 1, not 2.
	var u bytes.Buffer
	usage(&u)
	for _, c := range commands {
		if !strings.Contains(u.String(), "proxy "+c.name+" ") {
			t.Fatalf("usage does not list %s:\n%s", c.name, u.String())
		}
	}
	out, err := exec.Command(bin, "health", "-c", cfg, "-timeout", "2s").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("proxy health with nothing listening: %v, want exit 1\n%s", err, out)
	}
}
