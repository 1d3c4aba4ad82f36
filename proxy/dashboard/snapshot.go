package dashboard

// Breaker states for Snapshot.Breaker and Product.Breaker.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// Unknown marks a count the edge cannot tell right now (Product.Stored,
// Pipeline.KafkaLag, Pipeline.Stored); the page shows it as "unknown".
const Unknown = -1

// Snapshot is what the page shows, filled by the edge on each request.
// Counters (Product.Attempts, Filter.*) are monotonic: the page derives
// per-second rates from the difference between successive snapshots, using
// ServerTimeMs as the clock, and treats a counter that goes down (a restart)
// as a new start.
type Snapshot struct {
	ServerTimeMs int64     `json:"serverTimeMs"`
	Node         string    `json:"node"`
	Version      string    `json:"version"`
	Reload       Reload    `json:"reload"`
	Breaker      string    `json:"breaker"` // every product's breaker summed up: BreakerOpen if any is open, else BreakerHalfOpen if any is, else BreakerClosed
	DegradedAll  bool      `json:"degradedAll"`
	Products     []Product `json:"products"`
	Filters      []Filter  `json:"filters"`
	Pipeline     Pipeline  `json:"pipeline"`
}

// Reload is the last reload attempt.
type Reload struct {
	At      string `json:"at"` // RFC 3339; "" before the first
	Trigger string `json:"trigger"`
	Version uint64 `json:"version"`
	Error   string `json:"error"` // "" when it succeeded
}

// Product is one sale.
type Product struct {
	ProductID     string `json:"productId"`
	Name          string `json:"name"`
	Status        string `json:"status"`        // upcoming, active, soldout, ended, recovering (fenced)
	Stock         int64  `json:"stock"`         // initial plus restocked
	Remaining     int64  `json:"remaining"`     // stock left
	Sold          int64  `json:"sold"`          // Stock - Remaining
	Attempts      uint64 `json:"attempts"`      // purchase attempts, monotonic
	SoldOut       bool   `json:"soldOut"`       // the local sold-out flag
	Hot           bool   `json:"hot"`           // hotspot
	Degraded      bool   `json:"degraded"`      // this product's degrade switch
	Breaker       string `json:"breaker"`       // this product's Redis circuit breaker (Breaker* states)
	Recovering    bool   `json:"recovering"`    // fenced: closed until rebuilt from the ledger (503 RECOVERING)
	Recoveries    int64  `json:"recoveries"`    // ledger rebuilds of it this edge ran
	OutboxPending int64  `json:"outboxPending"` // entries not yet acknowledged by Kafka
	Stored        int64  `json:"stored"`        // orders in the order store; Unknown if it cannot be asked
	// Units held by orders not paid yet, paid, and released by the pay
	// deadline (from the sale's figures in Redis, sampled); Unknown if
	// they cannot be read.
	Unpaid  int64 `json:"unpaid"`
	Paid    int64 `json:"paid"`
	Expired int64 `json:"expired"`
	// Deadlines are the earliest pay deadlines of unpaid orders, soonest
	// first; Due is how many orders wait for theirs (Unknown if it cannot
	// be read).
	Deadlines []Deadline `json:"deadlines"`
	Due       int64      `json:"due"`
}

// Deadline is one unpaid order's pay deadline.
type Deadline struct {
	OrderID string `json:"orderId"`
	PayByMs int64  `json:"payByMs"`
}

// Filter is one filter of the chain, in chain order.
type Filter struct {
	Name           string `json:"name"`
	Type           string `json:"type"`
	Passed         uint64 `json:"passed"`
	Rejected       uint64 `json:"rejected"`
	DryRunRejected uint64 `json:"dryRunRejected"` // would have rejected; let through in dry-run mode
}

// Pipeline is the order path after the edge answered.
type Pipeline struct {
	OutboxPending   int64 `json:"outboxPending"`
	KafkaLag        int64 `json:"kafkaLag"` // Unknown if it cannot be asked
	Stored          int64 `json:"stored"`
	DeadLettered    int64 `json:"deadLettered"`
	ConsumerRunning bool  `json:"consumerRunning"`
}
