// Package api is the shopper API's contract, the part the edge (the filter
// chain, the proxy) and the sale behind it share: the per-request state they
// hand each other (Call, Endpoint), every error answer the edge gives (the
// catalogue, errors.go), each answer defined once and rendered once so that
// answering allocates nothing, and the purchase rules (rules.go), each
// written once for the filter that enforces it and the handler behind it.
//
// It depends on nothing of the edge: the sale wing imports the contract,
// never the filters that happen to run before it.
package api
