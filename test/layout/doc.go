// Package layout checks the shape of the code base that
// docs/architecture.md describes: imports run one way, from the binary
// through the edge and the sale down to the orders wing and the leaves;
// conf depends on nothing above it; bench uses the edge only as a client;
// every Redis key name is built in orders/stock/keys.go.
// It has no production code: a rule that only lives in a document drifts.
package layout
