package redistest

import (
	"testing"

	"github.com/redis/rueidis"
)

// Client connects a client of the test's own to the Redis server at addr (a
// Server's Addr, or an embedded stock.Store's Addr), for tests that inspect
// or break what the code under test wrote, as an operator with redis-cli
// would. It is closed when the test ends.
func Client(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	// RESP2 and one connection: the embedded server (miniredis) is neither
	// a cluster nor safe with RESP3 push messages.
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
		AlwaysRESP2: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("redistest: client for %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}
