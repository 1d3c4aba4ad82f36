// Command barefasthttp is the ceiling of any fasthttp edge on this
// machine, for `bench compare`: a fasthttp server that answers every
// request with the edge's sold-out rejection — 410, the same JSON body and
// headers — and does nothing else (no routing, no filters, no session).
// flashgate's sold-out answer through its full chain (access, ip_limit,
// conn_limit, sale_window, sold_out: the session JWT comes after the
// flag) is compared with it.
//
//	GOMAXPROCS=1 go run ./bench/peers/barefasthttp -addr 127.0.0.1:9100
package main
