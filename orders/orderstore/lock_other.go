//go:build !unix

package orderstore

import "os"

// lockFile does not lock where flock is missing.
func lockFile(*os.File) error { return nil }
