package api

// The catalogue: every error answer of the edge, defined once. The body is
// {"code": ..., "message": ...}; the code is what clients act on, the
// message is for people. Where two places give the same answer they share
// the entry; two entries with one code are different answers (their
// messages say different things).

// Malformed requests: the listener's read errors, routing, and the sale
// API's parser.
var (
	BadRequest       = newRejection(400, "BAD_REQUEST", "malformed request")
	NotFound         = newRejection(404, "NOT_FOUND", "not found")
	MethodNotAllowed = newRejection(405, "BAD_REQUEST", "method not allowed")
	// Timeout: the client did not send its request in time; BAD_REQUEST
	// like any request the edge could not read (GATEWAY_TIMEOUT is the
	// origin's).
	Timeout         = newRejection(408, "BAD_REQUEST", "request not received in time")
	TooLarge        = newRejection(413, "TOO_LARGE", "request body too large")
	HeadersTooLarge = newRejection(431, "TOO_LARGE", "request headers too large")

	NoSuchCall   = newRejection(404, "NOT_FOUND", "no such API call")
	BadJSON      = newRejection(400, "BAD_REQUEST", "the body must be a JSON object")
	BadProductID = newRejection(400, "BAD_REQUEST", "productId is required: letters, digits, '_' or '-'")
	BadQuantity  = newRejection(400, "BAD_REQUEST", "quantity must be a whole number from 1 to 1000")
	NoToken      = newRejection(400, "BAD_REQUEST", "token is required")
	BadOrderRef  = newRejection(400, "BAD_REQUEST", "orderId and productId are required")
	BadUserID    = newRejection(400, "BAD_REQUEST", "userId must be 1-64 characters of letters, digits, '_', '.', '@' or '-'")
)

// Edge protection: the access list and the rate and connection limits.
// ip_limit and conn_limit let the config choose the status (WithStatus).
var (
	Forbidden   = newRejection(403, "FORBIDDEN", "access denied")
	RateLimited = newRejection(429, "RATE_LIMITED", "too many requests")
)

// The sale's answers. The sale filters give them from edge memory; the
// handlers give the same ones for an edge whose chain left a filter out,
// and the rest from Redis' verdict.
var (
	Unauthenticated = newRejection(401, "UNAUTHENTICATED", "please sign in")
	UnknownProduct  = newRejection(404, "UNKNOWN_PRODUCT", "no such product")
	NotStarted      = newRejection(403, "NOT_STARTED", "the sale has not started")
	Ended           = newRejection(403, "ENDED", "the sale has ended")
	SoldOut         = newRejection(410, "SOLD_OUT", "sold out")
	// NotEnoughStock: some stock is left, less than the quantity asked for.
	NotEnoughStock = newRejection(410, "SOLD_OUT", "not enough stock left for this quantity")
	LimitReached   = newRejection(409, "LIMIT_REACHED", "purchase limit reached")
	BadToken       = newRejection(403, "BAD_TOKEN", "invalid or expired purchase token")
	UnknownOrder   = newRejection(404, "NOT_FOUND", "no such order")
	// Busy: Redis failed or is slow, the breaker is open, or the degrade
	// switch is on.
	Busy    = newRejection(503, "DEGRADED", "the sale is busy, please try again")
	Warming = newRejection(503, "DEGRADED", "the sale is opening, please try again")
	// Recovering: Redis went back in time (restarted from an old snapshot,
	// a lagging replica promoted, or restarted empty) and the sale is closed
	// on every edge until it is rebuilt from the ledger; it reopens by itself.
	Recovering = newRejection(503, "RECOVERING", "the sale is catching up, hold on")
	// OrderUnconfirmed: the purchase went through but its event was not
	// acknowledged; the answer also names the order (AppendOpen) so the
	// page can follow it.
	OrderUnconfirmed = newRejection(503, "DEGRADED", "your order is being confirmed, check its result")
	DemoLoginOff     = newRejection(404, "NOT_FOUND", "demo sign-in is disabled")
	NoEvents         = newRejection(404, "NOT_FOUND", "event streams are not available; poll /api/seckill/result")

	// OutcomeUnknown: Redis got the purchase but did not answer, so it may
	// or may not have gone through; the answer names the order (AppendOpen)
	// and the edge settles it, so the page follows it by its result.
	OutcomeUnknown = newRejection(503, "DEGRADED", "the sale is busy; your purchase may have gone through, check its result")
)

// The waiting room (package sale/room). NotAdmitted's answer also
// carries the shopper's position and etaMs (AppendOpen).
var (
	NotAdmitted  = newRejection(403, "NOT_ADMITTED", "it is not your turn yet: join the queue and wait for your turn")
	BadTicket    = newRejection(403, "BAD_TICKET", "invalid or expired queue ticket")
	BadChallenge = newRejection(403, "BAD_CHALLENGE", "invalid, expired or used challenge")
	NotJoined    = newRejection(404, "NOT_JOINED", "you have not joined the queue for this sale")
	NoRoom       = newRejection(404, "NOT_FOUND", "this sale has no waiting room")
	NoChallenge  = newRejection(404, "NOT_FOUND", "this sale asks no challenge")
	QueueNotOpen = newRejection(403, "NOT_STARTED", "the queue for this sale has not opened yet")
	// TurnOver: the shopper's admitted session ended.
	TurnOver = newRejection(403, "NOT_ADMITTED", "your turn to buy has ended")
)

// Event streams (package push). 429 is the API's "slow down": the page
// then polls.
var (
	StreamsFull        = newRejection(429, "RATE_LIMITED", "too many open event streams; poll /api/seckill/result")
	ShopperStreamsFull = newRejection(429, "RATE_LIMITED", "too many open event streams for this shopper; poll /api/seckill/result")
	StreamsClosing     = newRejection(503, "DEGRADED", "event streams are shutting down; poll /api/seckill/result")
)

// The operator API (the admin listener). Besides these it answers
// NotFound and MethodNotAllowed; where the operator needs the cause, the
// answer is BadRequest, NotFound or AdminUnavailable WithMessage(cause).
var (
	AdminTokenRequired = newRejection(401, "UNAUTHENTICATED", "admin token required")
	// The admin listener refuses what a web page could send it: a Host
	// that is not its own (DNS rebinding), another site's Origin, and a
	// state-changing call that is not JSON (a cross-site form).
	AdminHostRefused   = newRejection(403, "FORBIDDEN", "Host is not this admin listener: use its IP address, localhost, or a name in admin.hosts")
	AdminOriginRefused = newRejection(403, "FORBIDDEN", "Origin is not this admin listener")
	AdminNeedsJSON     = newRejection(415, "BAD_REQUEST", "state-changing admin calls need Content-Type: application/json")
	AdminBodyTooLarge  = newRejection(413, "TOO_LARGE", "body too large")
	// AdminUnavailable: the store (Redis) failed the action.
	AdminUnavailable       = newRejection(503, "DEGRADED", "the store is unavailable")
	AdminRestockUsage      = newRejection(400, "BAD_REQUEST", "productId must be a valid id and add a whole number from 1 to 1000000000")
	AdminDegradeUsage      = newRejection(400, "BAD_REQUEST", `send {"productId": "p1" or "" for all, "on": true|false}`)
	AdminPurgeUsage        = newRejection(400, "BAD_REQUEST", `send {"route": "shop.example/products/" or "" for every cached route, "prefix": "GET|shop.example|/products/" or "" for every key}, not both empty`)
	AdminCancelUsage       = newRejection(400, "BAD_REQUEST", `send {"productId": "p1", "orderId": "<id>"}`) // cancel and paid
	AdminRouteRoomUsage    = newRejection(400, "BAD_REQUEST", `send {"room": "shop", "method": "fifo"|"random"|"passthrough"|"reject"|"queue_all"|"config", "admitPerMinute": -1..10000000, "maxActive": -1..100000000} (-1: the config's), or to /admin/rooms/bypass {"room": "shop", "ttl": "1h"} (1s..720h)`)
	AdminRoomUsage         = newRejection(400, "BAD_REQUEST", `send {"productId": "p3", "action": "pause"|"resume"|"close"|"open"|"rate", "admitPerMinute": 1..10000000 with rate}`)
	AdminNoReleasableOrder = newRejection(404, "NOT_FOUND", "no order with that id that can be released (unknown, expired, or failed)")
	// Internal: the edge failed to build an answer (the dashboard's
	// snapshot); sent WithMessage, carrying the cause, to the operator only.
	Internal = newRejection(500, "INTERNAL", "internal error")
)

// Payments: POST /admin/orders/paid and the signed webhook
// POST /api/payments/webhook. TooLate's answer also carries the order's
// state (AppendOpen): expired, cancelled or failed.
var (
	TooLate = newRejection(409, "TOO_LATE", "the order can no longer be paid")
	// OrderPaid: a cancel of a paid order; paid is final.
	OrderPaid          = newRejection(409, "ORDER_PAID", "the order is paid: paid is final, it cannot be cancelled")
	UnknownPayOrder    = newRejection(404, "NOT_FOUND", "no such order for this product")
	PaidUnconfirmed    = newRejection(503, "DEGRADED", "the payment is recorded but its event is not confirmed yet: retrying is safe")
	ReleaseUnpublished = newRejection(503, "DEGRADED", "the order is released but its event is not confirmed yet: retrying is safe")
	WebhookOff         = newRejection(404, "NOT_FOUND", "payment webhooks are off (payments.webhook_secret)")
	BadSignature       = newRejection(401, "BAD_SIGNATURE", "missing or invalid Flashgate-Signature")
	BadTimestamp       = newRejection(400, "BAD_TIMESTAMP", "Flashgate-Timestamp must be unix seconds")
	OldTimestamp       = newRejection(400, "BAD_TIMESTAMP", "Flashgate-Timestamp is too old (outside payments.webhook_tolerance)")
	FutureTimestamp    = newRejection(400, "BAD_TIMESTAMP", "Flashgate-Timestamp is in the future (outside payments.webhook_tolerance)")
	Replayed           = newRejection(409, "REPLAYED", "this webhook event id was already received")
	BadWebhookEvent    = newRejection(400, "BAD_REQUEST", `send {"id": "1-64 of A-Z a-z 0-9 _ -", "type": "payment.succeeded", "productId": "p1", "orderId": "<id>"}`)
)

// The origin pools (package upstream). Generic on purpose: the detail goes
// to the log, never to the shopper.
var (
	OriginUnavailable = newRejection(502, "BAD_GATEWAY", "origin unavailable")
	OriginTimeout     = newRejection(504, "GATEWAY_TIMEOUT", "origin timed out")
)
