// Package routeroom is the waiting room in front of any proxied route
// (upstreams.routes[].waiting_room): at most admit_per_minute new visitors
// a minute and/or max_active visitors at once reach the route's pool; the
// others wait on a page the edge serves (or a JSON answer for apps) and are
// let in by their place. Every edge agrees: the queue, the sessions and the
// operator's method are in Redis (orders/stock/routeroom.go, one script call
// per waiting visitor's request). An admitted visitor carries a signed pass
// (their id and when it must next be checked) that the edge verifies from
// memory; only a check — which renews the session, or finds the origin
// ended it — costs a script call.
//
// It reuses the sale room's pieces (package sale/room): the signed ticket
// for a waiting visitor, the line N(t) for the estimate, the lottery's HMAC
// score for the random method, and the derived secrets.
package routeroom
