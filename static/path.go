package static

// ValidProductID reports whether b is a product id: [A-Za-z0-9][A-Za-z0-9_-]{0,63}.
// The first character is never '_' or '-', which is what keeps "_static"
// (and any future "_name") out of the product id space.
func ValidProductID(b []byte) bool {
	if len(b) == 0 || len(b) > 64 || !isAlnum(b[0]) {
		return false
	}
	for _, c := range b[1:] {
		if !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
