package conf

import (
	"net/url"
	"os"
	"strings"
	"time"

	"flashgate/conf/field"
)

// StaticConfig is the `static:` section: the sale page.
//
// Caching defaults, and why:
//   - the page (HTML) is sent with "no-cache": browsers and CDNs keep it but
//     revalidate every time, so a changed page is picked up at once and an
//     unchanged one costs a bodiless 304;
//   - assets (JS, CSS, icon) are sent with "public, max-age=300". The page
//     links them with "?v=<content hash>", so a new page fetches new assets
//     at once; the max-age only spares the edge a revalidation per asset per
//     page view during the sale's peak.
type StaticConfig struct {
	// Dir, when set, serves the page files from this directory instead of the
	// embedded copy (for designers iterating on the page). It must contain
	// index.html; it is read once, when the config is loaded or reloaded.
	Dir string `yaml:"dir"`
	// CacheControl is the Cache-Control of assets. Empty means
	// "public, max-age=<MaxAge in seconds>".
	CacheControl string `yaml:"cache_control"`
	// MaxAge is the assets' max-age when CacheControl is empty (default 5m).
	MaxAge time.Duration `yaml:"max_age"`
	// PageCacheControl is the Cache-Control of the HTML page (default
	// "no-cache").
	PageCacheControl string `yaml:"page_cache_control"`
	// ImageOrigins are extra origins (e.g. "https://img.example.com") the
	// page may load product images from; the Content-Security-Policy allows
	// only the edge itself otherwise.
	ImageOrigins []string `yaml:"image_origins"`
}

// fill gives the settings left out or written as zero their defaults.
func (c *StaticConfig) fill() {
	orDefault(&c.MaxAge, 5*time.Minute)
	orDefault(&c.PageCacheControl, "no-cache")
}

// Validate reports every invalid setting with a path relative to the
// section. It checks Dir on disk too, so `proxy -t` catches a typo in it.
func (c *StaticConfig) Validate() field.Errors {
	var errs field.Errors
	if c.Dir != "" {
		if fi, err := os.Stat(c.Dir); err != nil {
			errs.Add("dir", "cannot use %q: %v", c.Dir, unwrapPathError(err))
		} else if !fi.IsDir() {
			errs.Add("dir", "%q is not a directory", c.Dir)
		} else if _, err := os.Stat(c.Dir + "/index.html"); err != nil {
			errs.Add("dir", "%q has no index.html", c.Dir)
		}
	}
	if c.MaxAge < 0 {
		errs.Add("max_age", "must not be negative")
	} else if c.MaxAge%time.Second != 0 {
		errs.Add("max_age", "must be whole seconds (Cache-Control counts in seconds)")
	}
	if !validHeaderValue(c.CacheControl) {
		errs.Add("cache_control", "must be printable ASCII on one line")
	}
	if !validHeaderValue(c.PageCacheControl) {
		errs.Add("page_cache_control", "must be printable ASCII on one line")
	}
	for i, o := range c.ImageOrigins {
		if err := checkOrigin(o); err != "" {
			errs.Add(field.Index("image_origins", i), "%s", err)
		}
	}
	return errs
}

// validHeaderValue rejects what would break or split the header line.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkOrigin accepts only a bare https origin: anything else would either
// not be a valid CSP source or would widen the policy more than intended.
func checkOrigin(o string) string {
	u, err := url.Parse(o)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return "must be an origin such as https://img.example.com"
	case u.Scheme != "https":
		return "must use https (the page must not load anything in clear text)"
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.User != nil:
		return "must be an origin only, without path, query or user"
	case strings.ContainsAny(u.Host, " ;,'\""):
		return "must be an origin such as https://img.example.com"
	}
	return ""
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
