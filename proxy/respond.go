package proxy

import "flashgate/filters"

// Precompiled error bodies: answering an error allocates nothing.
var (
	errNotFound        = filters.NewRejection(404, "NOT_FOUND", "not found")
	errTooLarge        = filters.NewRejection(413, "TOO_LARGE", "request body too large")
	errHeadersTooLarge = filters.NewRejection(431, "BAD_REQUEST", "request headers too large")
	errBadRequest      = filters.NewRejection(400, "BAD_REQUEST", "malformed request")
	errTimeout         = filters.NewRejection(408, "BAD_REQUEST", "request not received in time")
	errUnauthorized    = filters.NewRejection(401, "UNAUTHENTICATED", "admin token required")
	errMethod          = filters.NewRejection(405, "BAD_REQUEST", "method not allowed")
)
