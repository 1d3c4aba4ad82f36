package field

import (
	"fmt"
	"os"
	"strings"
)

// ResolveEnv returns s, or the value of environment variable NAME when s is
// "env:NAME", so secrets can stay out of config files.
func ResolveEnv(s string) (string, error) {
	if name, ok := strings.CutPrefix(s, "env:"); ok {
		v, found := os.LookupEnv(name)
		if !found {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		return v, nil
	}
	return s, nil
}
