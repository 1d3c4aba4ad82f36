package static

import "time"

// Config is the `static:` section.
type Config struct {
	// Dir, when set, serves the page files from this directory instead of the
	// embedded copy (for designers iterating on the page).
	Dir          string        `yaml:"dir"`
	CacheControl string        `yaml:"cache_control"`
	MaxAge       time.Duration `yaml:"max_age"`
}
