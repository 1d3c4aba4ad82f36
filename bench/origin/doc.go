// Command origin is the stand-in origin server of the peer comparisons in
// bench/ (see bench/compare-nginx.sh): every proxy under test forwards its
// non-sale paths to the same one, so differences in the figures are the
// proxies' own.
//
//	go run ./bench/origin -addr 127.0.0.1:9000
//
// It answers any method and path with 200, keep-alive, and the same small
// JSON body (256 bytes by default, -size), plus "X-Origin: flashgate-bench"
// so a script can tell an origin answer from the proxy's own. A request
// carrying "X-Bench-Echo: 1" also gets the forwarding headers it arrived
// with (X-Forwarded-For, X-Real-IP, X-Forwarded-Proto, Host) echoed back as
// X-Echo-* headers, to check what each proxy sends; ordinary requests skip
// that work. It is deliberately as cheap as a fasthttp server gets, so that
// on a shared 2-core machine it costs both proxies the same little.
package main
