package filters

import (
	"net/netip"
)

// The parsers below read addresses straight from header bytes. netip.ParseAddr
// takes a string, and string(b) of a header value is an allocation per request
// (the result escapes through netip's error values), so the hot path uses this
// small parser instead. It accepts exactly what netip.ParseAddr accepts, minus
// IPv6 zones (a zone in a forwarded header is meaningless): FuzzParseIP checks
// that against netip.

// parseIP parses a dotted IPv4 or an IPv6 address (no zone).
func parseIP(b []byte) (netip.Addr, bool) {
	for _, c := range b {
		switch c {
		case '.':
			return parseIPv4(b)
		case ':':
			return parseIPv6(b)
		}
	}
	return netip.Addr{}, false
}

// parseIPv4 parses a.b.c.d in strict decimal: like netip, a leading zero is an
// error, because some stacks read "010" as octal and we must not disagree
// with the proxy in front of us about which client this is.
func parseIPv4(b []byte) (netip.Addr, bool) {
	var ip [4]byte
	field, val, digits := 0, 0, 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return netip.Addr{}, false
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return netip.Addr{}, false
			}
		case c == '.':
			if digits == 0 || field == 3 {
				return netip.Addr{}, false
			}
			ip[field] = byte(val)
			field++
			val, digits = 0, 0
		default:
			return netip.Addr{}, false
		}
	}
	if field != 3 || digits == 0 {
		return netip.Addr{}, false
	}
	ip[3] = byte(val)
	return netip.AddrFrom4(ip), true
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// parseIPv6 parses RFC 4291 text: up to eight groups of 1-4 hex digits, one
// "::" standing for at least one zero group, and an optional dotted IPv4
// tail in place of the last two groups.
func parseIPv6(b []byte) (netip.Addr, bool) {
	var ip [16]byte
	ellipsis := -1 // byte offset in ip where "::" stands
	if len(b) >= 2 && b[0] == ':' && b[1] == ':' {
		ellipsis = 0
		b = b[2:]
		if len(b) == 0 {
			return netip.IPv6Unspecified(), true
		}
	}
	i := 0
	for i < 16 {
		off, acc := 0, 0
		for ; off < len(b); off++ {
			v := hexVal(b[off])
			if v < 0 {
				break
			}
			if off > 3 {
				return netip.Addr{}, false
			}
			acc = acc<<4 | v
		}
		if off == 0 {
			return netip.Addr{}, false
		}
		if off < len(b) && b[off] == '.' {
			// The group just read is the start of an IPv4 tail.
			if ellipsis < 0 && i != 12 || i+4 > 16 {
				return netip.Addr{}, false
			}
			v4, ok := parseIPv4(b)
			if !ok {
				return netip.Addr{}, false
			}
			a4 := v4.As4()
			copy(ip[i:], a4[:])
			i += 4
			b = nil
			break
		}
		ip[i] = byte(acc >> 8)
		ip[i+1] = byte(acc)
		i += 2
		b = b[off:]
		if len(b) == 0 {
			break
		}
		if b[0] != ':' || len(b) == 1 {
			return netip.Addr{}, false
		}
		b = b[1:]
		if b[0] == ':' {
			if ellipsis >= 0 {
				return netip.Addr{}, false
			}
			ellipsis = i
			b = b[1:]
			if len(b) == 0 {
				break
			}
		}
	}
	if len(b) != 0 {
		return netip.Addr{}, false
	}
	if i < 16 {
		if ellipsis < 0 {
			return netip.Addr{}, false
		}
		n := 16 - i
		for j := i - 1; j >= ellipsis; j-- {
			ip[j+n] = ip[j]
		}
		for j := ellipsis; j < ellipsis+n; j++ {
			ip[j] = 0
		}
	} else if ellipsis >= 0 {
		// "::" must stand for at least one group.
		return netip.Addr{}, false
	}
	return netip.AddrFrom16(ip), true
}

// parseHostPort parses one entry of a forwarded header the way nginx's
// realip module does (ngx_parse_addr_port): "1.2.3.4", "1.2.3.4:80",
// "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:80". Some load balancers
// append the client's port; the port is validated and dropped.
func parseHostPort(b []byte) (netip.Addr, bool) {
	if len(b) == 0 {
		return netip.Addr{}, false
	}
	if b[0] == '[' {
		end := -1
		for i, c := range b {
			if c == ']' {
				end = i
				break
			}
		}
		if end < 0 {
			return netip.Addr{}, false
		}
		a, ok := parseIPv6(b[1:end])
		if !ok {
			return netip.Addr{}, false
		}
		rest := b[end+1:]
		if len(rest) == 0 {
			return a, true
		}
		if rest[0] != ':' || !validPort(rest[1:]) {
			return netip.Addr{}, false
		}
		return a, true
	}
	first, colons := -1, 0
	for i, c := range b {
		if c == ':' {
			if first < 0 {
				first = i
			}
			colons++
		}
	}
	if colons == 1 {
		// host:port, and a host without brackets can only be IPv4.
		if !validPort(b[first+1:]) {
			return netip.Addr{}, false
		}
		return parseIPv4(b[:first])
	}
	return parseIP(b)
}

// validPort accepts what netip.ParseAddrPort accepts: decimal 0-65535.
func validPort(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
		v = v*10 + int(c-'0')
		if v > 65535 {
			return false
		}
	}
	return true
}
