package routeroom

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"os"
	"strconv"
	"strings"
)

// PageData is what the queue page's template is executed with. An
// operator's template (waiting_room.page) may use every field:
//
//	{{.Room}}        the room's title
//	{{.Status}}      waiting, prequeue (an event not started), closed (method reject) or busy (Redis failed)
//	{{.Place}}       the visitor's place, 1 = next
//	{{.Ahead}}       visitors before them
//	{{.ETA}}         the estimated wait, in words of the page's language ("" unknown)
//	{{.ETASeconds}}  the same in seconds (-1 unknown)
//	{{.Progress}}    how far the visitor came since they joined, 0..100
//	{{.Lang}}        en or zh, from Accept-Language
//	{{.PollSeconds}} the poll interval in seconds (e.g. for a noscript refresh)
//	{{.Script}}      the poll script: include it, or the page never moves on
type PageData struct {
	Room       string
	Status     string
	Place      int64
	Ahead      int64
	ETA        string
	ETASeconds int64
	Progress   int64
	Lang       string
	PollMs     int64
	// Challenge and Difficulty: the proof of work the poll script solves
	// (in the sale page's worker, /seckill/_static/pow.js) before the
	// visitor gets a place ("" : none asked).
	Challenge  string
	Difficulty int
	// PollSeconds is PollMs in whole seconds (a page without JavaScript
	// refreshes itself at this pace).
	PollSeconds int64
	Script      template.HTML
	// T is the built-in page's text in Lang.
	T Text
}

// Text is the built-in page's words in one language.
type Text struct {
	Title, Waiting, Place, Ahead, Wait, Unknown, Closed, ClosedBody, Busy, Note string
	PreTitle, PreBody, Starts                                                   string
}

var texts = map[string]Text{
	"en": {Title: "You are in the queue", Waiting: "This site is busy. You will be let in automatically when it is your turn; keep this page open.",
		Place: "Your place", Ahead: "Ahead of you", Wait: "Estimated wait", Unknown: "being worked out",
		Closed: "Closed", ClosedBody: "This page is not open at the moment. Please come back later.",
		Busy: "The queue is busy; this page tries again by itself.", Note: "Leaving this page for more than a minute loses your place.",
		PreTitle: "Not started yet", PreBody: "Everyone who arrives before the start gets a place drawn at random at the start; you need not hurry. Keep this page open.",
		Starts: "Starts in"},
	"zh": {Title: "您正在排队", Waiting: "当前访问人数较多。轮到您时将自动进入，请保持此页面打开。",
		Place: "您的位置", Ahead: "前面还有", Wait: "预计等待", Unknown: "正在计算",
		Closed: "暂未开放", ClosedBody: "此页面暂时关闭，请稍后再来。",
		Busy: "排队服务繁忙，本页面会自动重试。", Note: "离开此页面超过一分钟将失去排队位置。",
		PreTitle: "活动尚未开始", PreBody: "开始前到达的访客将在开始时随机排序，无需抢先。请保持此页面打开。", Starts: "距离开始"},
}

//go:embed page.html
var builtinPage string

var builtin = template.Must(template.New("room").Parse(builtinPage))

// pollScript asks for the place every PollMs (three times as seldom in a
// hidden tab), or when the estimate says the turn comes if sooner, or when
// the edge's retryMs says if sooner (where the edge holds polls: before the
// turn, at once after a held poll ran out), with the poll header, on the same URL, and reloads the page once admitted: the
// reload is the visitor's request, now let through.
const pollScript = `<script>(function(){var P=%d,C=%s,D=%d,N="";
function w(c,d){C="";try{var k=new Worker("/seckill/_static/pow.js");k.onmessage=function(e){k.terminate();if(e.data&&e.data.nonce!==undefined){C=c;N=e.data.nonce;q()}else t()};k.postMessage({challenge:c,difficulty:d})}catch(x){t()}}
function q(){var h={"Flashgate-Room-Poll":"1","Accept":"application/json"};if(C){h["Flashgate-Room-Challenge"]=C;h["Flashgate-Room-Nonce"]=N;C=""}
fetch(location.href,{headers:h,credentials:"same-origin",cache:"no-store"}).then(function(r){return r.json()}).then(function(a){if(a.status==="admitted"){location.reload();return}
if(a.status==="challenge"){w(a.challenge,a.difficulty);return}
var s=function(id,v){var e=document.getElementById(id);if(e&&v!==undefined)e.textContent=v};s("fg-place",a.place);s("fg-ahead",a.ahead);if(a.eta!==undefined)s("fg-eta",a.eta);var b=document.getElementById("fg-bar");if(b)b.style.width=a.progress+"%%";t(a.etaMs,a.retryMs)}).catch(function(){t()})}
function t(e,r){var d=document.hidden?3*P:P;if(e>0&&!document.hidden)d=Math.min(d,e+50);if(r>=0&&!document.hidden)d=Math.min(d,r);if(r===0)d=0;setTimeout(q,d)}if(C)w(C,D);else t()})()</script>`

// Page renders the queue page: the operator's template, or the built-in one.
type Page struct {
	tmpl *template.Template
}

// LoadPage reads and checks an operator's template file ("" is the
// built-in page): it must parse and execute on sample data.
func LoadPage(path string) (*Page, error) {
	if path == "" {
		return &Page{tmpl: builtin}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := template.New(path).Parse(string(b))
	if err != nil {
		return nil, err
	}
	p := &Page{tmpl: t}
	var out bytes.Buffer
	if err := p.render(&out, PageData{Room: "room", Status: "waiting", Place: 3, Ahead: 2, ETA: "1 min", ETASeconds: 60, Progress: 10, Lang: "en", PollMs: 5000}); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Page) render(w *bytes.Buffer, d PageData) error {
	d.T = texts[d.Lang]
	d.PollSeconds = max((d.PollMs+999)/1000, 1)
	// The challenge is base64url (the edge's own): quoted, it is a safe
	// JavaScript string.
	d.Script = template.HTML(fmt.Sprintf(pollScript, d.PollMs, strconv.Quote(d.Challenge), d.Difficulty))
	return p.tmpl.Execute(w, d)
}

// Lang picks the page's language from Accept-Language: zh when a Chinese
// tag has the highest weight among the languages offered, else en.
func Lang(accept []byte) string {
	best, bestQ := "en", -1.0
	for _, part := range strings.Split(string(accept), ",") {
		tag, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		tag = strings.ToLower(tag)
		var l string
		switch {
		case tag == "zh" || strings.HasPrefix(tag, "zh-"):
			l = "zh"
		case tag == "en" || strings.HasPrefix(tag, "en-"):
			l = "en"
		default:
			continue
		}
		if q > bestQ {
			best, bestQ = l, q
		}
	}
	return best
}

// etaWords is a wait in the page's words.
func etaWords(lang string, ms int64) string {
	if ms < 0 {
		return texts[lang].Unknown
	}
	s := (ms + 999) / 1000
	if lang == "zh" {
		switch {
		case s < 60:
			return strconv.FormatInt(max(s, 1), 10) + " 秒"
		default:
			return strconv.FormatInt((s+59)/60, 10) + " 分钟"
		}
	}
	switch {
	case s < 60:
		return strconv.FormatInt(max(s, 1), 10) + " s"
	case s < 3600:
		return strconv.FormatInt((s+59)/60, 10) + " min"
	}
	return strconv.FormatInt(s/3600, 10) + " h " + strconv.FormatInt((s%3600+59)/60, 10) + " min"
}
