package session

// A hand-written reader for the two small JSON objects of a JWT. encoding/json
// allocates; this reads in place and validates exactly as much JSON grammar
// as it needs to be sure that whatever it accepts, encoding/json would read
// the same way (the fuzz test checks that).

// maxDepth bounds nesting inside ignored claims; recursion never goes deeper.
const maxDepth = 32

type claims struct {
	sub    []byte // aliases the decoded buffer
	exp    int64
	nbf    int64
	hasNbf bool
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips white space and then c, if c is next.
func (s *scanner) consume(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns its raw bytes between the quotes, undecoded.
// escaped tells the caller the raw bytes are not the value.
func (s *scanner) str() (raw []byte, escaped, ok bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], escaped, true
		case c == '\\':
			escaped = true
			j++
			if j >= len(s.b) {
				return nil, false, false
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(s.b) {
					return nil, false, false
				}
				for k := j + 1; k <= j+4; k++ {
					if !isHex(s.b[k]) {
						return nil, false, false
					}
				}
				j += 4
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		}
	}
	return nil, false, false
}

// number reads a number per the JSON grammar and returns its text.
func (s *scanner) number() ([]byte, bool) {
	s.ws()
	b, start := s.b, s.i
	i := start
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return b[start:i], true
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// skip reads and discards one value of any kind.
func (s *scanner) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, _, ok := s.str()
		return ok
	case '{':
		s.i++
		if s.consume('}') {
			return true
		}
		for {
			if _, _, ok := s.str(); !ok || !s.consume(':') || !s.skip(depth+1) {
				return false
			}
			if s.consume(',') {
				continue
			}
			return s.consume('}')
		}
	case '[':
		s.i++
		if s.consume(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			if s.consume(',') {
				continue
			}
			return s.consume(']')
		}
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		_, ok := s.number()
		return ok
	}
}

// object walks the members of a top-level object, calling member for each
// key (already past the colon); member must consume the value. Keys written
// with escapes are refused: "s\u0075b" would otherwise be a second "sub" that
// this reader and encoding/json see differently.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.consume('{') {
		return false
	}
	if !s.consume('}') {
		for {
			key, esc, ok := s.str()
			if !ok || esc || !s.consume(':') || !member(key) {
				return false
			}
			if s.consume(',') {
				continue
			}
			if !s.consume('}') {
				return false
			}
			break
		}
	}
	s.ws()
	return s.i == len(s.b)
}

// headerOK reports whether a decoded JOSE header selects HS256 and nothing
// this package does not understand.
func headerOK(b []byte) bool {
	s := scanner{b: b}
	sawAlg := false
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "alg":
			if sawAlg {
				return false
			}
			sawAlg = true
			v, esc, ok := s.str()
			return ok && !esc && string(v) == "HS256"
		case "crit":
			// RFC 7515 §4.1.11: extensions listed here must be understood;
			// none are.
			return false
		default:
			return s.skip(1)
		}
	})
	return ok && sawAlg
}

// parseClaims reads the claims this package acts on.
func parseClaims(b []byte) (claims, bool) {
	var c claims
	s := scanner{b: b}
	sawSub, sawExp := false, false
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "sub":
			if sawSub {
				return false
			}
			sawSub = true
			v, esc, ok := s.str()
			c.sub = v
			return ok && !esc
		case "exp":
			if sawExp {
				return false
			}
			sawExp = true
			var ok bool
			c.exp, ok = s.numericDate()
			return ok
		case "nbf":
			if c.hasNbf {
				return false
			}
			c.hasNbf = true
			var ok bool
			c.nbf, ok = s.numericDate()
			return ok
		default:
			return s.skip(1)
		}
	})
	return c, ok && sawSub && sawExp
}

// numericDate reads a NumericDate (RFC 7519 §2) as whole seconds, rounding a
// fraction up: with integer "now", now < exp and nbf <= now then hold for the
// rounded value exactly when they hold for the real one. Exponent notation
// and values beyond 18 digits are refused rather than approximated.
func (s *scanner) numericDate() (int64, bool) {
	t, ok := s.number()
	if !ok {
		return 0, false
	}
	neg := t[0] == '-'
	if neg {
		t = t[1:]
	}
	var v int64
	i := 0
	for ; i < len(t) && isDigit(t[i]); i++ {
		if i == 18 {
			return 0, false
		}
		v = v*10 + int64(t[i]-'0')
	}
	if i < len(t) {
		if t[i] != '.' {
			return 0, false // exponent
		}
		frac := false
		for i++; i < len(t); i++ {
			if !isDigit(t[i]) {
				return 0, false
			}
			if t[i] != '0' {
				frac = true
			}
		}
		if frac && !neg {
			v++
		}
	}
	if neg {
		v = -v
	}
	return v, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
