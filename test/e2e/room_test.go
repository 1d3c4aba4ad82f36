package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/redistest"
	"flashgate/sale/room"
)

// roomCall sends a shopper call with the queue ticket in X-Queue-Ticket
// (the non-browser form) and returns the answer and the ticket cookie set.
func (e *edge) roomCall(method, path, jwt, ticket string, body []byte) (resp, string) {
	e.t.Helper()
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://" + e.addr + path)
	req.Header.Set("Authorization", "Bearer "+jwt)
	if ticket != "" {
		req.Header.Set(room.Header, ticket)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	if err := e.api.Do(req, res); err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	var cookie string
	res.Header.VisitAllCookie(func(k, v []byte) {
		c := fasthttp.AcquireCookie()
		defer fasthttp.ReleaseCookie(c)
		if c.ParseBytes(v) == nil && strings.HasPrefix(string(c.Key()), room.CookiePref) {
			cookie = string(c.Value())
		}
	})
	return resp{status: res.StatusCode(), body: append([]byte(nil), res.Body()...)}, cookie
}

func adminGet(t *testing.T, admin, path string, v any) {
	t.Helper()
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || json.Unmarshal(b, v) != nil {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
	}
}

// TestWaitingRoomTwoEdges: two edges over one Redis (standalone and
// Cluster). Shoppers join the pre-queue on either edge; at the opening the
// lottery is drawn once, its key matches the commit published before, and
// the ranking both edges and the admin list give is the one the key
// reproduces; every shopper has the same place on both edges; with the
// line held still (paused) both edges admit exactly the same shoppers, and
// an admitted shopper buys with the token the admission came with.
func TestWaitingRoomTwoEdges(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			addr := ""
			if kind == "cluster" {
				addr = strings.Join(redistest.NewCluster(t).Addrs(), ",")
			} else {
				addr = redistest.Start(t)
			}
			start := time.Now().Add(5 * time.Second).Truncate(time.Second).Add(time.Second)
			item := fmt.Sprintf("  - {product_id: wr, name: room, price: \"9.90\", stock: 100, limit: 1, start: %q, end: %q,\n"+
				"     waiting_room: {enabled: true, prequeue_opens: 1m, admit_per_minute: 600, session: 1m}}\n",
				start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
			edges := []*edge{startEdge(t, addr, activities(item)), startEdge(t, addr, activities(item))}
			j := newJWTs(t, sessionSecret)

			lot := edges[1].must("GET", "/api/seckill/queue/lottery?productId=wr", "", nil)
			commit := jsonStr(lot.body, "commit")
			if lot.status != 200 || len(commit) != 64 || jsonStr(lot.body, "key") != "" {
				t.Fatalf("lottery before the opening: %v", lot)
			}
			const n = 30
			tickets := make([]string, n)
			for i := range tickets {
				u := "s" + strconv.Itoa(i)
				r, ck := edges[i%2].roomCall("POST", "/api/seckill/queue", j.get(u), "", []byte(`{"productId":"wr"}`))
				if r.status != 200 || jsonStr(r.body, "status") != "prequeue" || ck == "" || jsonStr(r.body, "ticket") != ck {
					t.Fatalf("join %s: %v", u, r)
				}
				tickets[i] = ck
			}
			// Before the opening nobody gets a purchase token (the sale has
			// not started either).
			if r, _ := edges[0].roomCall("POST", "/api/seckill/token", j.get("s0"), tickets[0], []byte(`{"productId":"wr"}`)); r.status != 403 {
				t.Fatalf("token before the opening: %v", r)
			}
			var key string
			if !waitFor(20*time.Second, func() bool {
				r := edges[0].must("GET", "/api/seckill/queue/lottery?productId=wr", "", nil)
				key = jsonStr(r.body, "key")
				return key != "" && strings.Contains(string(r.body), `"ranked":true`)
			}) {
				t.Fatal("the lottery was not drawn after the opening")
			}
			// Let the line pass a few places, then hold it still: both edges
			// must then decide alike.
			if !waitFor(10*time.Second, func() bool {
				var rows struct {
					Sales []struct {
						Frontier int64 `json:"frontier"`
					} `json:"sales"`
				}
				adminGet(t, edges[0].admin, "/admin/waitroom", &rows)
				return len(rows.Sales) == 1 && rows.Sales[0].Frontier >= 5
			}) {
				t.Fatal("the line does not move")
			}
			if code, body := adminPost(t, edges[0].admin, "/admin/waitroom", `{"productId":"wr","action":"pause"}`); code != 200 {
				t.Fatalf("pause: %d %s", code, body)
			}
			kb, _ := hex.DecodeString(key)
			if sum := sha256.Sum256(kb); hex.EncodeToString(sum[:]) != commit {
				t.Fatalf("key %s does not match the commit %s published before the opening", key, commit)
			}
			var audit struct {
				Ranking []string `json:"ranking"`
				Members int      `json:"members"`
			}
			adminGet(t, edges[1].admin, "/admin/waitroom/lottery?productId=wr", &audit)
			tk, _ := room.NewTickets(room.DeriveSecret([]byte(tokenSecret), "ticket"))
			ids := make([]string, n)
			for i, ticket := range tickets {
				id, _, err := tk.Check([]byte(ticket), []byte("s"+strconv.Itoa(i)), []byte("wr"), time.Now().UnixMilli())
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = string(id.AppendHex(nil))
			}
			want, _ := room.Rank(key, ids)
			if audit.Members != n || !slices.Equal(audit.Ranking, want) {
				t.Fatalf("the published key does not reproduce the ranking (%d members)", audit.Members)
			}
			var rooms [2]struct {
				Sales []struct {
					Frontier int64 `json:"frontier"`
					Paused   bool  `json:"paused"`
				} `json:"sales"`
			}
			adminGet(t, edges[0].admin, "/admin/waitroom", &rooms[0])
			adminGet(t, edges[1].admin, "/admin/waitroom", &rooms[1])
			if len(rooms[0].Sales) != 1 || rooms[0].Sales[0] != rooms[1].Sales[0] || !rooms[0].Sales[0].Paused {
				t.Fatalf("the edges see different lines: %+v %+v", rooms[0], rooms[1])
			}
			frontier := rooms[0].Sales[0].Frontier
			if !waitFor(5*time.Second, func() bool {
				return adminMetric(t, edges[1].admin, `flashgate_waitroom_admit_per_minute{product="wr"}`) == 0
			}) {
				t.Fatal("edge 1 does not see the pause")
			}
			admitted := 0
			for i, ticket := range tickets {
				u := "s" + strconv.Itoa(i)
				place := int64(slices.Index(want, ids[i]) + 1)
				var codes [2]int
				var token string
				for e := range edges {
					q, _ := edges[e].roomCall("GET", "/api/seckill/queue?productId=wr", j.get(u), ticket, nil)
					if jsonNum(q.body, "position") != strconv.FormatInt(place, 10) {
						t.Fatalf("edge %d: %s at place %d: %v", e, u, place, q)
					}
					r, _ := edges[e].roomCall("POST", "/api/seckill/token", j.get(u), ticket, []byte(`{"productId":"wr"}`))
					codes[e] = r.status
					if r.status == 200 {
						token = jsonStr(r.body, "token")
					} else if r.code() != "NOT_ADMITTED" || jsonNum(r.body, "position") != strconv.FormatInt(place, 10) {
						t.Fatalf("edge %d: %s refused: %v", e, u, r)
					}
				}
				if codes[0] != codes[1] || (codes[0] == 200) != (place <= frontier) {
					t.Fatalf("%s at place %d (line at %d): edges answered %v", u, place, frontier, codes)
				}
				if token != "" {
					admitted++
					if r, err := edges[i%2].buy(j.get(u), "wr", token, 1); err != nil || r.status != 200 {
						t.Fatalf("%s buys with the admission's token: %v %v", u, r, err)
					}
				}
			}
			if admitted != int(min(frontier, n)) || admitted == 0 {
				t.Fatalf("%d admitted, line at %d", admitted, frontier)
			}
		})
	}
}
