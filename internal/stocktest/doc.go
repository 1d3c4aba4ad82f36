// Package stocktest opens the stock store the way tests need it: Open
// connects a stock.Store to a test's Redis (a redistest server, a
// cluster's addresses, or "embedded") with call budgets a loaded machine
// keeps, and closes it when the test ends; Warm writes an open sale. Tests
// of package stock itself cannot import it (stocktest imports stock) and
// keep their own helpers in orders/stock/helpers_test.go.
package stocktest
