package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"flashgate/conf"
)

// health runs `proxy health`: it asks the edge's admin listener for
// /healthz and exits 0 only when it answers 200. It is the probe of the
// Docker image's HEALTHCHECK, whose base has no shell and no curl; it reads
// the address from the same config (and environment) as the edge.
func health(c *command, args []string, stdout, stderr io.Writer) int {
	fs := c.flags(stderr)
	cfgPath := fs.String("c", "conf/edge.yaml", "config file: the admin.addr to probe")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if !parseArgs(fs, args, stderr) {
		return 2
	}
	cfgSet := false
	fs.Visit(func(f *flag.Flag) { cfgSet = cfgSet || f.Name == "c" })
	doc, _, err := loadConfig(*cfgPath, cfgSet)
	if err != nil {
		fmt.Fprintf(stderr, "proxy health: configuration %s:\n%s", *cfgPath, indentErrors(err))
		return 1
	}
	addr := doc.Config.Admin.Addr
	if addr == "" {
		fmt.Fprintln(stderr, "proxy health: admin.addr is empty: the edge has no admin listener to probe")
		return 1
	}
	url := "http://" + loopbackAddr(addr) + "/healthz"
	// One probe, one connection: nothing pooled outlives it.
	hc := &http.Client{Timeout: *timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(url)
	if err != nil {
		fmt.Fprintf(stderr, "proxy health: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "proxy health: %s answered %d: %s\n", url, resp.StatusCode, body)
		return 1
	}
	fmt.Fprintf(stdout, "proxy health: %s: %s", url, body)
	return 0
}

// loopbackAddr is where this machine reaches a listener bound to addr:
// ":9901", "0.0.0.0:9901" and "[::]:9901" listen on every interface,
// loopback included.
func loopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// usesDataDir tells whether an embedded stand-in keeps its state under
// data_dir.
func usesDataDir(c *conf.Config) bool {
	return c.DataDir != "" &&
		(c.Redis.Embedded() || len(c.Kafka.Brokers) == 0 || (c.Orders.Consumer && c.ClickHouse.Addr == ""))
}

// checkDataDir makes sure the stand-ins can write data_dir before anything
// starts, so that an edge run as a user who may not write there (an image's
// non-root user in a root-owned directory) says which setting to change
// instead of failing deep inside one of them.
func checkDataDir(c *conf.Config) error {
	if !usesDataDir(c) {
		return nil
	}
	err := os.MkdirAll(c.DataDir, 0o755)
	if err == nil {
		var f *os.File
		if f, err = os.CreateTemp(c.DataDir, ".write-check-*"); err == nil {
			f.Close()
			err = os.Remove(f.Name())
		}
	}
	if err == nil {
		return nil
	}
	abs, aerr := filepath.Abs(c.DataDir)
	if aerr != nil {
		abs = c.DataDir
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("data_dir %q (%s) is not writable by uid %d: %v; the embedded stand-ins keep their state there: "+
		"point data_dir at a directory this user may write (the Docker image's volume /var/lib/flashgate), or set it to \"\" to keep the state in memory",
		c.DataDir, abs, os.Getuid(), err)
}
