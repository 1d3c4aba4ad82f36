// Package tlsterm terminates TLS on the shopper listener, for an edge with
// nothing in front of it.
//
// Load reads and checks the certificate files of `listen.tls` into an
// immutable set (Certs): each certificate with the names it is served for,
// the first the default for clients without SNI. A Terminator presents the
// set in force through tls.Config.GetCertificate, so swapping the set (a
// config reload, or a change of the files it watches) reaches the next
// handshake at once while established connections keep the certificate they
// shook hands with; a set that fails to load is reported field by field and
// never replaces the one in force.
//
// The rest is fixed policy: TLS 1.2 at least, ALPN http/1.1 only (the
// server is fasthttp, HTTP/1.1), and session resumption by tickets whose key
// rotates (ticket_rotation) while the previous keys still decrypt for
// ticket_lifetime, so that a resumed session costs no full handshake and a
// leaked key opens only a bounded window of sessions. Keys live in the
// process: resumption works against the edge that issued the ticket.
package tlsterm
