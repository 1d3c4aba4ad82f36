// Package tlstest makes a throwaway certificate authority and certificates
// it signed, as PEM files in a test's temporary directory, for tests of TLS
// between the edge and a real server on loopback (redis-server --tls-port).
// Keys are ECDSA P-256: generated in microseconds, and every TLS library
// the servers link reads them.
package tlstest
