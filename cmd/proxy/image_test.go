//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"flashgate/internal/await"
	"flashgate/internal/proctest"
	"flashgate/internal/syncbuf"
	"flashgate/internal/yamlmerge"
)

// The image's contract with whoever runs it (README's Docker section).
const (
	envAdminAddr  = "FLASHGATE_ADMIN_ADDR"
	envAdminToken = "FLASHGATE_ADMIN_TOKEN"
)

// TestImageStartsAsItsUser runs the image without a Docker engine: it lays
// out the final stage of the Dockerfile (its COPYs with their owners, its
// WORKDIR and VOLUME) in a root-owned directory with every root-owned entry
// made read-only, like `docker run --read-only` with the image's volume, and
// runs the ENTRYPOINT and CMD chrooted into it as the image's USER with its
// ENV and the admin variables an operator passes with -e. It then checks
// what an orchestrator needs: the edge starts, the admin listener answers
// off loopback (health open, metrics with the token), the HEALTHCHECK command
// tells a live edge from a dead one, a shopper buys and the order is stored
// under the volume; and without the token the edge refuses to start, saying
// why.
//
// One difference from a container: the container has its own network, the
// test shares the host's, so the shopper listener is moved to a free port in
// the copied config and the admin address (taken from the environment) is
// given one too.
func TestImageStartsAsItsUser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it gives the image's files their owners and runs the binary chrooted, as the image's user")
	}
	img := readDockerfile(t, filepath.Join("..", "..", "Dockerfile"))
	root := img.layout(t, filepath.Join("..", ".."))

	ports, err := proctest.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	shopper := "127.0.0.1:" + strconv.Itoa(ports[0])
	admin := "127.0.0.1:" + strconv.Itoa(ports[1])
	img.moveListener(t, root, ":"+strconv.Itoa(ports[0]))
	token := "image-test-token-0123456789"
	env := img.environ(envAdminAddr+"=0.0.0.0:"+strconv.Itoa(ports[1]), envAdminToken+"="+token)

	if len(img.health) == 0 {
		t.Error("the Dockerfile has no HEALTHCHECK: nothing tells the engine the edge is alive")
	} else if code, out := img.runOnce(t, root, img.health, env); code == 0 {
		t.Errorf("the HEALTHCHECK passes with no edge running: %s", out)
	}

	edge, logs := img.start(t, root, img.command(), env)
	exited := make(chan error, 1)
	go func() { exited <- edge.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			edge.Process.Kill()
			<-exited
		}
	})
	hc := &http.Client{Timeout: 5 * time.Second}
	await.NoError(t, 10*time.Second, "the edge's /healthz on its admin address", func() error {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the edge exited (%v) as the image's user in its read-only directory:\n%s", err, logs.String())
		default:
		}
		return expect(hc, "GET", "http://"+admin+"/healthz", "", 200, "ok")
	})

	// Off loopback: the admin listener binds every interface, so a probe
	// from outside the container reaches it.
	if ip := hostIP(); ip != "" {
		if err := expect(hc, "GET", "http://"+net.JoinHostPort(ip, strconv.Itoa(ports[1]))+"/healthz", "", 200, "ok"); err != nil {
			t.Errorf("the admin listener is not reachable off loopback: %v", err)
		}
	}
	if err := expect(hc, "GET", "http://"+admin+"/metrics", "", 401, ""); err != nil {
		t.Errorf("/metrics without the token: %v", err)
	}
	if err := expect(hc, "GET", "http://"+admin+"/metrics", token, 200, "flashgate_"); err != nil {
		t.Errorf("/metrics with the token: %v", err)
	}
	if len(img.health) > 0 {
		if code, out := img.runOnce(t, root, img.health, env); code != 0 {
			t.Errorf("the HEALTHCHECK fails against a live edge (exit %d): %s", code, out)
		}
	}

	// A shopper: the page, a sign-in, a token, a purchase, its stored result.
	if err := expect(hc, "GET", "http://"+shopper+"/seckill/p1", "", 200, "<html"); err != nil {
		t.Errorf("the sale page: %v", err)
	}
	orderID, signedIn := buy(t, "http://"+shopper, "p1")
	await.NoError(t, 10*time.Second, "the order stored", func() error {
		return expect(signedIn, "GET", "http://"+shopper+"/api/seckill/result?orderId="+url.QueryEscape(orderID)+"&productId=p1",
			"", 200, `"status":"success"`)
	})
	img.ownsVolumes(t, root)

	edge.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, logs.String())
	}
	stopped = true
	if len(img.health) > 0 {
		if code, out := img.runOnce(t, root, img.health, env); code == 0 {
			t.Errorf("the HEALTHCHECK passes after the edge stopped: %s", out)
		}
	}

	// Without the token the admin listener would be open to the world:
	// the edge must refuse to start and say which variable is missing.
	code, out := img.runOnce(t, root, img.command(), img.environ(envAdminAddr+"=0.0.0.0:"+strconv.Itoa(ports[1])))
	if code == 0 || !strings.Contains(out, "admin.token") || !strings.Contains(out, envAdminToken) || !strings.Contains(out, "loopback") {
		t.Errorf("without %s: exit %d, want a refusal naming admin.token, %s and the loopback rule:\n%s", envAdminToken, code, envAdminToken, out)
	} else {
		t.Logf("without %s: %s", envAdminToken, out)
	}
}

// image is the final stage of a Dockerfile, as far as running it needs.
type image struct {
	base       string
	workdir    string
	uid, gid   int
	env        []string
	volumes    []string
	entrypoint []string
	cmd        []string
	health     []string
	copies     []copyStep

	// What the build stages produce: the binary (`go build -o PATH`) and
	// directories (`mkdir -p PATH`), by their path in the stage.
	binaries map[string]string // output path -> package
	dirs     map[string]bool
}

type copyStep struct {
	from     string
	uid, gid int
	srcs     []string
	dst      string
}

// distrolessUsers are the users of gcr.io/distroless images (their
// /etc/passwd), for USER and --chown by name.
var distrolessUsers = map[string]int{"root": 0, "nonroot": 65532, "nobody": 65534}

var (
	goBuildOut = regexp.MustCompile(`go build .*-o\s+(\S+)\s+(\./\S+)`)
	mkdirP     = regexp.MustCompile(`mkdir -p((?:\s+[^\s&;|]+)+)`)
)

// readDockerfile parses the instructions the test knows; any other
// instruction in the final stage fails the test, so an image that grows
// one is not run half-understood.
func readDockerfile(t *testing.T, file string) *image {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	cont := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cont == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if l, ok := strings.CutSuffix(line, `\`); ok {
			cont += l + " "
			continue
		}
		lines = append(lines, cont+line)
		cont = ""
	}
	img := &image{binaries: map[string]string{}, dirs: map[string]bool{}}
	var stages [][]string
	for _, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			continue // ARG before FROM
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], l)
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	for _, st := range stages[:len(stages)-1] {
		for _, l := range st {
			if run, ok := strings.CutPrefix(l, "RUN "); ok {
				for _, m := range goBuildOut.FindAllStringSubmatch(run, -1) {
					img.binaries[m[1]] = m[2]
				}
				for _, m := range mkdirP.FindAllStringSubmatch(run, -1) {
					for _, d := range strings.Fields(m[1]) {
						img.dirs[path.Clean(d)] = true
					}
				}
			}
		}
	}
	img.workdir = "/"
	for _, l := range stages[len(stages)-1] {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			img.base = strings.Fields(rest)[0]
			if !strings.HasPrefix(img.base, "gcr.io/distroless/static") {
				t.Fatalf("Dockerfile: the final stage is FROM %s; the test lays out a distroless static base only", img.base)
			}
		case "WORKDIR":
			img.workdir = path.Join(img.workdir, rest)
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				if !strings.Contains(kv, "=") {
					t.Fatalf("Dockerfile: ENV %s: write ENV NAME=VALUE", rest)
				}
				img.env = append(img.env, strings.Trim(kv, `"`))
			}
		case "USER":
			img.uid, img.gid = userIDs(t, rest)
		case "VOLUME":
			img.volumes = append(img.volumes, words(t, rest)...)
		case "ENTRYPOINT":
			img.entrypoint = execForm(t, l, rest)
		case "CMD":
			img.cmd = execForm(t, l, rest)
		case "HEALTHCHECK":
			fields := strings.Fields(rest)
			for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
				fields = fields[1:]
			}
			if len(fields) == 0 || strings.ToUpper(fields[0]) != "CMD" {
				t.Fatalf("Dockerfile: %s: want HEALTHCHECK [options] CMD [...]", l)
			}
			_, cmd, _ := strings.Cut(rest, fields[0]+" ")
			img.health = execForm(t, l, strings.TrimSpace(cmd))
		case "COPY":
			img.copies = append(img.copies, parseCopy(t, rest))
		case "EXPOSE", "LABEL", "ARG", "STOPSIGNAL":
		default:
			t.Fatalf("Dockerfile: the test does not know how to run %q", l)
		}
	}
	if len(img.entrypoint) == 0 {
		t.Fatal("Dockerfile: no ENTRYPOINT")
	}
	return img
}

func parseCopy(t *testing.T, rest string) copyStep {
	c := copyStep{}
	fields := strings.Fields(rest)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(fields[0], "--"), "=")
		switch k {
		case "from":
			c.from = v
		case "chown":
			c.uid, c.gid = userIDs(t, v)
		case "chmod", "link":
			t.Fatalf("Dockerfile: COPY --%s: the test does not lay it out", k)
		}
		fields = fields[1:]
	}
	if len(fields) < 2 {
		t.Fatalf("Dockerfile: COPY %s: want sources and a destination", rest)
	}
	c.srcs, c.dst = fields[:len(fields)-1], fields[len(fields)-1]
	return c
}

func userIDs(t *testing.T, spec string) (int, int) {
	id := func(s string) int {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
		n, ok := distrolessUsers[s]
		if !ok {
			t.Fatalf("Dockerfile: user %q is not one of the base image's", s)
		}
		return n
	}
	u, g, ok := strings.Cut(spec, ":")
	if !ok {
		g = u
	}
	return id(u), id(g)
}

func execForm(t *testing.T, line, s string) []string {
	var args []string
	if err := json.Unmarshal([]byte(s), &args); err != nil {
		t.Fatalf("Dockerfile: %s: want the exec form [\"...\"] (a distroless base has no shell): %v", line, err)
	}
	return args
}

func words(t *testing.T, s string) []string {
	if strings.HasPrefix(s, "[") {
		return execForm(t, "VOLUME "+s, s)
	}
	return strings.Fields(s)
}

// layout builds the image's filesystem in a fresh directory and returns it.
// The binary is built as the Dockerfile builds it (static, CGO off).
func (img *image) layout(t *testing.T, repo string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mkdir := func(p string, uid, gid int) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(full, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(full, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	// The base: distroless has /tmp, but `docker run --read-only` makes it
	// read-only too, and the edge must not need it.
	mkdir("/tmp", 0, 0)
	mkdir(img.workdir, 0, 0)
	built := map[string]string{}
	for _, c := range img.copies {
		for _, src := range c.srcs {
			dst := c.dst
			if strings.HasSuffix(dst, "/") || len(c.srcs) > 1 {
				dst = path.Join(dst, path.Base(src))
			}
			if !path.IsAbs(dst) {
				dst = path.Join(img.workdir, dst)
			}
			switch {
			case c.from == "":
				copyFile(t, filepath.Join(repo, src), filepath.Join(root, dst), c.uid, c.gid)
			case img.binaries[src] != "":
				bin, ok := built[src]
				if !ok {
					bin = filepath.Join(t.TempDir(), "proxy")
					cmd := exec.Command("go", "build", "-trimpath", "-o", bin, filepath.Join(repo, img.binaries[src]))
					cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("build %s: %v\n%s", img.binaries[src], err, out)
					}
					built[src] = bin
				}
				copyFile(t, bin, filepath.Join(root, dst), c.uid, c.gid)
			case img.dirs[path.Clean(src)]:
				mkdir(path.Dir(dst), 0, 0)
				mkdir(dst, c.uid, c.gid) // COPY of a directory: its (empty) content, owned as --chown says
			default:
				t.Fatalf("Dockerfile: COPY --from=%s %s: the build stage neither builds it (go build -o) nor makes it (mkdir -p)", c.from, src)
			}
		}
	}
	// A VOLUME the image does not hold is created by the engine, owned by
	// root; one it holds is given the image's directory and owner.
	for _, v := range img.volumes {
		if _, err := os.Stat(filepath.Join(root, v)); err != nil {
			mkdir(v, 0, 0)
		}
	}
	// Read-only: whatever root owns, nobody writes (the volumes are the
	// image user's own).
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid == 0 {
			return os.Chmod(p, info.Mode().Perm()&^0o222)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// copyFile copies src to dst (its directories made, root-owned) with
// src's mode, owned by uid:gid.
func copyFile(t *testing.T, src, dst string, uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("COPY %s: %v", src, err)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// command is what `docker run IMAGE` runs.
func (img *image) command() []string {
	return append(append([]string(nil), img.entrypoint...), img.cmd...)
}

// configPath is the config file the image's command reads, inside root.
func (img *image) configPath() string {
	args := img.command()
	for i, a := range args {
		if a == "-c" && i+1 < len(args) {
			if path.IsAbs(args[i+1]) {
				return args[i+1]
			}
			return path.Join(img.workdir, args[i+1])
		}
	}
	return path.Join(img.workdir, "conf/edge.yaml")
}

// moveListener rewrites the shopper listener's address in the image's
// config (the one change the shared network needs).
func (img *image) moveListener(t *testing.T, root, addr string) {
	t.Helper()
	file := filepath.Join(root, img.configPath())
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the image's config: %v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	yamlmerge.Into(doc, map[string]any{"listen": map[string]any{"addr": addr}})
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(file)
	os.Chmod(file, 0o644)
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(file, st.Mode().Perm())
}

// environ is the image's ENV with the -e settings over it.
func (img *image) environ(overrides ...string) []string {
	env := append([]string(nil), img.env...)
	for _, o := range overrides {
		name, _, _ := strings.Cut(o, "=")
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
		env = append(env, o)
	}
	return env
}

// process is args run inside root as the image's user, from its WORKDIR.
func (img *image) process(root string, args, env []string) *exec.Cmd {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = img.workdir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: uint32(img.uid), Gid: uint32(img.gid), Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

func (img *image) start(t *testing.T, root string, args, env []string) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	cmd := img.process(root, args, env)
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v in the image: %v", args, err)
	}
	return cmd, logs
}

// runOnce runs a command that must end by itself within 10s and returns
// its exit code and output.
func (img *image) runOnce(t *testing.T, root string, args, env []string) (int, string) {
	t.Helper()
	cmd, out := img.start(t, root, args, env)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not end within 10s:\n%s", args, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// ownsVolumes checks that the edge's state went to a volume, written by the
// image's user.
func (img *image) ownsVolumes(t *testing.T, root string) {
	t.Helper()
	found := false
	for _, v := range img.volumes {
		filepath.WalkDir(filepath.Join(root, v), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			found = true
			if info, err := d.Info(); err == nil {
				if st := info.Sys().(*syscall.Stat_t); int(st.Uid) != img.uid {
					t.Errorf("%s is owned by uid %d, not the image's user %d", p, st.Uid, img.uid)
				}
			}
			return nil
		})
	}
	if !found {
		t.Errorf("no file under the image's volumes %v: the embedded stand-ins' state is not where an operator keeps it", img.volumes)
	}
}

// hostIP is an address of this machine that is not loopback ("" if none).
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// expect requests url (with a Bearer token when given) and wants status and
// a body containing want.
func expect(hc *http.Client, method, url, token string, status int, want string) error {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != status || !bytes.Contains(body, []byte(want)) {
		return fmt.Errorf("%s %s: %d %.200s; want %d with %q", method, url, resp.StatusCode, body, status, want)
	}
	return nil
}

// buy signs in (demo login), takes a purchase token and buys one unit of
// product; it returns the order id and the signed-in client. A sale still
// warming up answers 503: it tries again.
func buy(t *testing.T, base, product string) (string, *http.Client) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Timeout: 5 * time.Second, Jar: jar}
	post := func(p string, body any) (int, map[string]any, error) {
		b, _ := json.Marshal(body)
		resp, err := hc.Post(base+p, "application/json", bytes.NewReader(b))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(resp.Body)
		json.Unmarshal(raw, &out)
		if resp.StatusCode != 200 {
			return resp.StatusCode, out, fmt.Errorf("POST %s: %d %s", p, resp.StatusCode, raw)
		}
		return resp.StatusCode, out, nil
	}
	if _, _, err := post("/api/login", map[string]any{"userId": "image-shopper"}); err != nil {
		t.Fatalf("demo login: %v", err)
	}
	var orderID string
	await.NoError(t, 10*time.Second, "a purchase", func() error {
		_, tok, err := post("/api/seckill/token", map[string]any{"productId": product})
		if err != nil {
			return err
		}
		_, do, err := post("/api/seckill/do", map[string]any{"productId": product, "token": tok["token"], "quantity": 1})
		if err != nil {
			return err
		}
		if do["status"] != "pending" {
			return fmt.Errorf("do answered %v", do)
		}
		orderID, _ = do["orderId"].(string)
		return nil
	})
	return orderID, hc
}
