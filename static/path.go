package static

import "bytes"

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

var (
	pagePrefix  = []byte("/seckill/")
	assetPrefix = []byte("/seckill/_static/")
)

// ParsePath splits a sale path for the router. "/seckill/{id}" gives the
// product id (valid per ValidProductID); "/seckill/_static/{name}" gives the
// asset name (not checked here: ServeAsset only knows the names it holds).
// Anything else is ok=false. The results alias path; nothing is allocated.
//
// path should be the decoded, normalized path (fasthttp's ctx.Path()); a raw
// one only means fewer matches, never a file outside the set.
func ParsePath(path []byte) (productID, asset []byte, ok bool) {
	if bytes.HasPrefix(path, assetPrefix) {
		if name := path[len(assetPrefix):]; len(name) > 0 {
			return nil, name, true
		}
		return nil, nil, false
	}
	if bytes.HasPrefix(path, pagePrefix) {
		id := path[len(pagePrefix):]
		if ValidProductID(id) {
			return id, nil, true
		}
	}
	return nil, nil, false
}
