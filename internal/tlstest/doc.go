// Package tlstest makes a throwaway certificate authority and certificates
// it signed, as PEM files in a test's temporary directory, for tests of TLS
// between the edge and a real server on loopback (redis-server --tls-port),
// and of the edge's own HTTPS listener: a CA issues certificates for any
// names and validity window (expired ones too), and MakeCA serves
// programs that are not tests (bench gives the edge and nginx the same
// certificate).
// Keys are ECDSA P-256: generated in microseconds, and every TLS library
// the servers link reads them.
package tlstest
