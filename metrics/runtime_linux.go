//go:build linux

package metrics

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// clockTicks is USER_HZ, the unit of /proc/self/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procSelf reads the process's figures from /proc without allocating.
type procSelf struct {
	mu   sync.Mutex
	stat *os.File // /proc/self/stat, read again from offset 0
	fdir int      // /proc/self/fd, rewound and listed again; -1 when not open
	buf  [1024]byte
	dent [8192]byte
}

func openProcSelf() *procSelf {
	p := &procSelf{fdir: -1}
	if f, err := os.Open("/proc/self/stat"); err == nil {
		p.stat = f
	}
	if fd, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err == nil {
		p.fdir = fd
	}
	return p
}

// statFields returns utime+stime (ticks), vsize (bytes), rss (pages) and
// starttime (ticks after boot) from /proc/self/stat.
func (p *procSelf) statFields() (cpu, vsize, rss, start int64, ok bool) {
	if p.stat == nil {
		return 0, 0, 0, 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n, err := p.stat.ReadAt(p.buf[:], 0)
	if n == 0 || (err != nil && n == len(p.buf)) {
		return 0, 0, 0, 0, false
	}
	b := p.buf[:n]
	// The command name (field 2) may hold spaces and ')': fields count
	// from the last ')'. After it, field 3 (state) is index 0.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, 0, false
	}
	var f [22]int64
	idx := -1
	for _, c := range b[i+1:] {
		if c == ' ' {
			idx++
			if idx >= len(f) {
				break
			}
			continue
		}
		if idx >= 0 && c >= '0' && c <= '9' {
			f[idx] = f[idx]*10 + int64(c-'0')
		}
	}
	if idx < 21 {
		return 0, 0, 0, 0, false
	}
	// utime 14, stime 15, starttime 22, vsize 23, rss 24 (1-based).
	return f[11] + f[12], f[20], f[21], f[19], true
}

// openFDs counts the entries of /proc/self/fd (the one this reading holds
// included: it is open).
func (p *procSelf) openFDs() (int64, bool) {
	if p.fdir < 0 {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := syscall.Seek(p.fdir, 0, 0); err != nil {
		return 0, false
	}
	var count int64
	for {
		n, err := syscall.ReadDirent(p.fdir, p.dent[:])
		if err != nil {
			return 0, false
		}
		if n <= 0 {
			return count, true
		}
		// linux_dirent64: ino u64, off u64, reclen u16, type u8, name.
		for off := 0; off+19 < n; {
			reclen := int(p.dent[off+16]) | int(p.dent[off+17])<<8
			if reclen == 0 {
				break
			}
			name := p.dent[off+19 : off+reclen]
			if !(name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) {
				count++
			}
			off += reclen
		}
	}
}

// bootTime is /proc/stat's btime, the Unix second the machine booted.
func bootTime() (int64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	_, rest, ok := bytes.Cut(b, []byte("\nbtime "))
	if !ok {
		return 0, false
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	v, err := strconv.ParseInt(string(line), 10, 64)
	return v, err == nil
}

// maxFDs is the soft RLIMIT_NOFILE.
func maxFDs() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return lim.Cur, true
}
