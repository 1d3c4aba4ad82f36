//go:build unix

package orderstore

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on the open log so that two stores (two
// processes, or one process opening it twice) never append to one file;
// the lock goes with Close or the process.
func lockFile(f *os.File) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%s is in use by another store", f.Name())
		}
		return err
	}
	return nil
}
