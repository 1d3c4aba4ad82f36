package static

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
)

//go:embed site
var siteFS embed.FS

const (
	pageName = "index.html"
	// maxTotalSize bounds what a Dir may hold: every byte is kept in memory
	// twice (plain and gzip) on every edge.
	maxTotalSize = 16 << 20
	// AssetPath is where the page's files are served; product ids start with
	// an alphanumeric character, so "_static" is never one.
	AssetPath = "/seckill/_static/"
)

// Handler serves the sale page and its assets from memory. It is immutable
// after New and safe for concurrent use; a config reload builds a new one.
type Handler struct {
	page   *file
	assets map[string]*file
}

// file is one response, prepared in full at build time so that serving it is
// a handful of header copies and a pointer to the body.
type file struct {
	name         string
	body         []byte
	gz           []byte // nil when gzip does not pay off
	contentType  []byte
	etag         []byte // `"<hash>"`
	etagGz       []byte // `"<hash>-gz"`: a strong ETag names one byte sequence
	cacheControl []byte
	csp          []byte // HTML only

	// ok and okGz are the 200 answer's header (identity, gzip), built once:
	// serving copies the template's fields, where setting each header
	// would copy and scrub its value and look for an existing one of the
	// same name first, for every request. They are never modified.
	ok, okGz *fasthttp.ResponseHeader
}

// New loads the page files (the embedded copy, or c.Dir when set) and
// prepares every response. c is taken as given: conf has filled its
// defaults.
func New(c conf.StaticConfig) (*Handler, error) {
	// Validate again: a caller that skipped it must not get a header value
	// with a line break into every response.
	if errs := c.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("static: %w", errs)
	}
	var fsys fs.FS
	if c.Dir != "" {
		fsys = os.DirFS(c.Dir)
	} else {
		sub, err := fs.Sub(siteFS, "site")
		if err != nil {
			return nil, err
		}
		fsys = sub
	}
	files, err := readAll(fsys)
	if err != nil {
		return nil, fmt.Errorf("static: %w", err)
	}
	html, ok := files[pageName]
	if !ok {
		return nil, fmt.Errorf("static: %s is missing", pageName)
	}
	delete(files, pageName)

	assetCC := c.CacheControl
	if assetCC == "" {
		assetCC = "public, max-age=" + strconv.FormatInt(int64(c.MaxAge.Seconds()), 10)
	}
	h := &Handler{assets: make(map[string]*file, len(files))}
	for name, body := range files {
		h.assets[name] = prepare(name, body, assetCC, "")
	}
	h.page = prepare(pageName, versionLinks(html, h.assets), c.PageCacheControl, contentSecurityPolicy(c.ImageOrigins))
	return h, nil
}

// readAll reads every regular file under fsys, skipping dot files (editor
// and VCS leftovers in a designer's Dir must not become public).
func readAll(fsys fs.FS) (map[string][]byte, error) {
	files := map[string][]byte{}
	total := 0
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if total += len(b); total > maxTotalSize {
			return fmt.Errorf("page files exceed %d MiB", maxTotalSize>>20)
		}
		files[p] = b
		return nil
	})
	return files, err
}

func prepare(name string, body []byte, cacheControl, csp string) *file {
	sum := sha256.Sum256(body)
	tag := hex.EncodeToString(sum[:12])
	f := &file{
		name:         name,
		body:         body,
		contentType:  []byte(contentType(name)),
		etag:         []byte(`"` + tag + `"`),
		etagGz:       []byte(`"` + tag + `-gz"`),
		cacheControl: []byte(cacheControl),
	}
	if csp != "" {
		f.csp = []byte(csp)
	}
	if gz := gzipBest(body); len(gz)+len(gz)/20 < len(body) {
		f.gz = gz
	}
	f.ok = f.template(false)
	if f.gz != nil {
		f.okGz = f.template(true)
	}
	return f
}

// template is the header serve writes for a 200 answer with f's body (gz:
// its gzip body). The flags it carries (Date, a default Content-Type) are
// fasthttp's defaults, which the shopper server keeps.
func (f *file) template(gz bool) *fasthttp.ResponseHeader {
	h := &fasthttp.ResponseHeader{}
	h.SetStatusCode(fasthttp.StatusOK)
	etag := f.etag
	if gz {
		etag = f.etagGz
	}
	setCommon(h, f, etag)
	h.SetContentTypeBytes(f.contentType)
	if gz {
		h.SetContentEncodingBytes(valGzip)
	}
	return h
}

func gzipBest(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // the level is valid
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// contentTypes pins the types that matter instead of trusting the host's
// mime tables, which differ between machines.
var contentTypes = map[string]string{
	".html":        "text/html; charset=utf-8",
	".js":          "text/javascript; charset=utf-8",
	".mjs":         "text/javascript; charset=utf-8",
	".css":         "text/css; charset=utf-8",
	".svg":         "image/svg+xml",
	".png":         "image/png",
	".jpg":         "image/jpeg",
	".jpeg":        "image/jpeg",
	".webp":        "image/webp",
	".avif":        "image/avif",
	".gif":         "image/gif",
	".ico":         "image/x-icon",
	".json":        "application/json",
	".webmanifest": "application/manifest+json",
	".woff2":       "font/woff2",
	".txt":         "text/plain; charset=utf-8",
}

func contentType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := contentTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

// versionLinks appends "?v=<hash>" to every link of the page to one of its
// assets, so a changed asset is fetched by the next page view instead of
// after its max-age.
func versionLinks(html []byte, assets map[string]*file) []byte {
	for name, f := range assets {
		old := []byte(`"` + AssetPath + name + `"`)
		v := []byte(`"` + AssetPath + name + "?v=" + string(f.etag[1:11]) + `"`)
		html = bytes.ReplaceAll(html, old, v)
	}
	return html
}

// contentSecurityPolicy allows the edge itself and nothing else: the page
// needs no inline script or style, so an injected one cannot run.
func contentSecurityPolicy(imageOrigins []string) string {
	img := "'self' data:"
	for _, o := range imageOrigins {
		img += " " + strings.TrimSuffix(o, "/")
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src " + img +
		"; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
}

// Names lists the assets (not the page) by name, sorted, for logs.
func (h *Handler) Names() []string {
	names := make([]string, 0, len(h.assets))
	for n := range h.assets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
