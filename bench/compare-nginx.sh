#!/usr/bin/env bash
# compare-nginx.sh: flashgate against nginx on the same machine, same origin,
# same wrk command, alternating A B A B, for the sale page and a proxied path.
#
#   bash bench/compare-nginx.sh
#
# Knobs (environment):
#   DURATION=5s  WARMUP=2s  ROUNDS=3     wrk time per round, warm-up per side, rounds
#   CONNS=64     THREADS=1               wrk -c / -t
#   PIN=1        SERVER_CPU=1 LOAD_CPU=0 pin flashgate and nginx to SERVER_CPU, wrk and
#                                        the origin to LOAD_CPU (PIN=0: no pinning)
#   LIMITS=1                             ip_limit + conn_limit (scope all) on flashgate,
#                                        limit_req + limit_conn on nginx; 0: neither
#   TARGETS="page proxy"                 which targets to measure
#   PAGE_PATH=/seckill/p1 PROXY_PATH=/items/p1 BODY_SIZE=256 (origin body bytes)
#   QUIET_PCT=10 QUIET_WAIT=90           before each round wait (up to QUIET_WAIT s) until the
#                                        machine is at most QUIET_PCT% busy: other jobs on a
#                                        2-core box swamp the figures; "other%" shows what ran
#                                        beside each round anyway (% of one CPU)
#   DIRTY_PCT=20 REDO=2                  redo a round (A and B) up to REDO times when other%
#                                        exceeded DIRTY_PCT on either side; the table keeps all
#   NGINX_SENDFILE=off                   nginx sendfile + tcp_nopush; off is faster for the
#                                        2.8 kB page here (one writev instead of writev, sendfile
#                                        and two setsockopt calls), so the peer is at its best
#   KEEP=1                               keep the temp dir (configs, logs) after the run
#   PROXY_REV=HEAD                       build the proxy from this commit (git archive) instead
#                                        of the working tree, e.g. while others' edits are half-done
#   PROXY_BIN=path                       use this proxy binary instead of building one
# Exit status: 0 when the run completed (whether or not a target was met),
# 1 on a setup or verification failure.
set -euo pipefail

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
PIN=${PIN:-1}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
LIMITS=${LIMITS:-1}
TARGETS=${TARGETS:-page proxy}
PAGE_PATH=${PAGE_PATH:-/seckill/p1}
PROXY_PATH=${PROXY_PATH:-/items/p1}
BODY_SIZE=${BODY_SIZE:-256}
KEEP=${KEEP:-0}
QUIET_PCT=${QUIET_PCT:-10}
QUIET_WAIT=${QUIET_WAIT:-90}
DIRTY_PCT=${DIRTY_PCT:-20}
REDO=${REDO:-2}
NGINX_SENDFILE=${NGINX_SENDFILE:-off}

# Targets from the issue: flashgate/nginx median ratio at least this.
declare -A GOAL=([page]=1.0 [proxy]=0.9)

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

die() { echo "compare-nginx: $*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------
missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v bc >/dev/null 2>&1 || missing+=(bc)
command -v ps >/dev/null 2>&1 || missing+=(procps)
command -v go >/dev/null 2>&1 || die "go is not on PATH"
if [ "$PIN" = 1 ]; then command -v taskset >/dev/null 2>&1 || missing+=(util-linux); fi
if [ ${#missing[@]} -gt 0 ]; then
	die "missing tools; install the Debian packages with: apt-get install -y ${missing[*]}"
fi
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
if [ "$PIN" = 1 ] && [ "$(nproc)" -lt 2 ]; then
	echo "compare-nginx: only $(nproc) CPU: running unpinned" >&2
	PIN=0
fi
pin_server=() pin_load=()
if [ "$PIN" = 1 ]; then
	pin_server=(taskset -c "$SERVER_CPU")
	pin_load=(taskset -c "$LOAD_CPU")
fi

# --- temp dir and cleanup ------------------------------------------------------
tmp=$(mktemp -d /tmp/flashgate-vs-nginx.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	if [ "$KEEP" = 1 ]; then
		echo "kept: $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints a loopback port nothing listens on (and that no earlier
# call returned).
used_ports=" "
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 30000))
		case "$used_ports" in *" $p "*) continue ;; esac
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used_ports+="$p "
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# wait_http URL NAME PID: until URL answers (any status) or the process died.
wait_http() {
	for _ in $(seq 100); do
		if curl -s -o /dev/null --max-time 1 "$1"; then return 0; fi
		kill -0 "$3" 2>/dev/null || die "$2 exited; see its log in $tmp (KEEP=1 keeps it)"
		sleep 0.1
	done
	die "$2 did not answer $1 within 10 s"
}

# cpu_ticks PID...: user+system clock ticks used so far by these processes.
cpu_ticks() {
	local t=0 p f
	for p in "$@"; do
		# Fields after the command (which may hold spaces) start at state.
		f=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null) || continue
		set -- $f
		t=$((t + ${12} + ${13}))
	done
	echo "$t"
}
CLK_TCK=$(getconf CLK_TCK)

# --- build ---------------------------------------------------------------------
echo "== building (in $root)"
if [ -n "${PROXY_BIN:-}" ]; then
	cp "$PROXY_BIN" "$tmp/proxy"
elif [ -n "${PROXY_REV:-}" ]; then
	mkdir -p "$tmp/src"
	(cd "$root" && git archive "$PROXY_REV") | tar -x -C "$tmp/src"
	(cd "$tmp/src" && go build -o "$tmp/proxy" ./cmd/proxy)
	echo "   proxy built from $PROXY_REV ($(cd "$root" && git rev-parse --short "$PROXY_REV"))"
else
	(cd "$root" && go build -o "$tmp/proxy" ./cmd/proxy)
fi
(cd "$root" && go build -o "$tmp/origin" ./bench/origin)

origin_port=$(free_port)
fg_port=$(free_port)
admin_port=$(free_port)
nginx_port=$(free_port)
ORIGIN=127.0.0.1:$origin_port
FG=127.0.0.1:$fg_port
NG=127.0.0.1:$nginx_port

# --- flashgate config ------------------------------------------------------------
limits_yaml=""
if [ "$LIMITS" = 1 ]; then
	limits_yaml="
  - type: ip_limit
    scope: all
    rate: 1000000r/s
    burst: 1000000
    nodelay: true
  - type: conn_limit
    scope: all
    max: 65535"
fi
cat >"$tmp/edge.yaml" <<EOF
# written by bench/compare-nginx.sh
node_id: 1
listen:
  addr: "$FG"
admin:
  addr: "127.0.0.1:$admin_port"
log:
  level: warn
  access_sample: 0
filters:
  - type: access
    scope: all
    rules:
      - "allow all"$limits_yaml
upstreams:
  pools:
    - name: origin
      servers: ["$ORIGIN"]
  routes:
    - prefix: /
      pool: origin
reload:
  watch: false
EOF
"$tmp/proxy" -t -c "$tmp/edge.yaml" >"$tmp/proxy-t.log" 2>&1 ||
	{ cat "$tmp/proxy-t.log" >&2; die "flashgate rejected the generated config $tmp/edge.yaml"; }

# --- start origin and flashgate ------------------------------------------------------
GOMAXPROCS=1 "${pin_load[@]}" "$tmp/origin" -addr "$ORIGIN" -size "$BODY_SIZE" 2>"$tmp/origin.log" &
origin_pid=$!
pids+=("$origin_pid")
wait_http "http://$ORIGIN/" origin "$origin_pid"

GOMAXPROCS=1 "${pin_server[@]}" "$tmp/proxy" -c "$tmp/edge.yaml" 2>"$tmp/flashgate.log" &
fg_pid=$!
pids+=("$fg_pid")
wait_http "http://$FG$PAGE_PATH" flashgate "$fg_pid"

# --- nginx: the page as flashgate serves it, the same headers ---------------------------
# flashgate serves static/site/index.html with its asset links versioned
# (?v=hash); nginx gets those exact bytes so both send the same page.
mkdir -p "$tmp/www" "$tmp/tmp"
curl -sf -o "$tmp/www/index.html" "http://$FG$PAGE_PATH" || die "flashgate did not serve $PAGE_PATH"
cmp -s "$root/static/site/index.html" "$tmp/www/index.html" ||
	echo "   (page: static/site/index.html as flashgate serves it, asset links versioned)"
fg_headers=$(curl -s -D - -o /dev/null "http://$FG$PAGE_PATH" | tr -d '\r')
hdr() { printf '%s\n' "$fg_headers" | sed -n "s/^$1: //Ip" | head -1; }
csp=$(hdr Content-Security-Policy)
page_cc=$(hdr Cache-Control)
[ -n "$csp" ] && [ -n "$page_cc" ] || die "flashgate's page lacks Content-Security-Policy or Cache-Control"
esc() { printf '%s' "$1" | sed 's/[&|\\]/\\&/g'; }
limit_prefix="#"
[ "$LIMITS" = 1 ] && limit_prefix=""
sed -e "s|__DIR__|$tmp|g" -e "s|__ROOT__|$tmp/www|g" -e "s|__LISTEN__|$NG|g" \
	-e "s|__ORIGIN__|$ORIGIN|g" -e "s|__CSP__|$(esc "$csp")|g" \
	-e "s|__PAGE_CACHE_CONTROL__|$(esc "$page_cc")|g" -e "s|^__L__|$limit_prefix|" -e "s|__SENDFILE__|$NGINX_SENDFILE|g" \
	"$here/peers/nginx-edge.conf" >"$tmp/nginx.conf"
"$NGINX" -t -q -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>"$tmp/nginx-t.log" ||
	{ cat "$tmp/nginx-t.log" >&2; die "nginx rejected $tmp/nginx.conf"; }
"${pin_server[@]}" "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>>"$tmp/error.log" &
ng_pid=$!
pids+=("$ng_pid")
wait_http "http://$NG$PAGE_PATH" nginx "$ng_pid"
# master and worker(s): CPU time is counted over both.
ng_all=("$ng_pid" $(ps --ppid "$ng_pid" -o pid= || true))
[ ${#ng_all[@]} -eq 2 ] || die "expected one nginx worker, found $((${#ng_all[@]} - 1))"

# --- verify both sides answer alike ----------------------------------------------------
echo "== checking answers"
check_page() { # NAME ADDR
	local code
	code=$(curl -s -o "$tmp/page.$1" -w '%{http_code}' "http://$2$PAGE_PATH")
	[ "$code" = 200 ] || die "$1 answered $code for $PAGE_PATH"
	cmp -s "$tmp/page.$1" "$tmp/www/index.html" || die "$1 sent a different page body"
	printf '   %-9s %s -> 200, %s bytes\n' "$1" "$PAGE_PATH" "$(wc -c <"$tmp/page.$1")"
}
check_page flashgate "$FG"
check_page nginx "$NG"
curl -s -o "$tmp/origin.body" "http://$ORIGIN$PROXY_PATH"
check_proxy() { # NAME ADDR
	local h code
	h=$(curl -s -D - -o "$tmp/proxy.$1" -H 'X-Bench-Echo: 1' "http://$2$PROXY_PATH" | tr -d '\r')
	code=$(printf '%s\n' "$h" | sed -n '1s/^HTTP\/[0-9.]* \([0-9]*\).*/\1/p')
	[ "$code" = 200 ] || die "$1 answered $code for $PROXY_PATH"
	printf '%s\n' "$h" | grep -qi '^X-Origin: flashgate-bench' || die "$1: $PROXY_PATH did not come from the origin"
	cmp -s "$tmp/proxy.$1" "$tmp/origin.body" || die "$1: $PROXY_PATH body differs from the origin's"
	printf '   %-9s %s -> 200 from the origin, %s bytes; origin saw %s\n' "$1" "$PROXY_PATH" \
		"$(wc -c <"$tmp/proxy.$1")" \
		"$(printf '%s\n' "$h" | grep -i '^X-Echo-' | grep -vi 'connection: $' | sed 's/^X-Echo-//I' | paste -sd ';' | sed 's/;/; /g')"
}
check_proxy flashgate "$FG"
check_proxy nginx "$NG"

# --- measure -------------------------------------------------------------------------
secs() { # wrk duration -> seconds
	case "$1" in
	*ms) echo "scale=3; ${1%ms}/1000" | bc ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
echo
echo "== machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -sr)"
echo "== date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "== nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') (1 worker) vs flashgate (GOMAXPROCS=1), $(go version | awk '{print $3}')"
if [ "$PIN" = 1 ]; then
	echo "== pinned: servers on CPU $SERVER_CPU; wrk and origin on CPU $LOAD_CPU"
else
	echo "== not pinned"
fi
echo "== nginx sendfile $NGINX_SENDFILE; keepalive to the origin on both"
echo "== limits: $([ "$LIMITS" = 1 ] && echo 'ip_limit+conn_limit / limit_req+limit_conn (never rejecting)' || echo none); access log off on both"
echo "== wrk -t$THREADS -c$CONNS -d$DURATION --latency, $ROUNDS rounds, alternating A B (warm-up $WARMUP each)"
echo

# machine_ticks: busy and total clock ticks of all CPUs so far.
machine_ticks() { awk '/^cpu / {b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6}' /proc/stat; }

# wait_quiet: until the machine (our servers idle) is at most QUIET_PCT% busy
# over a second, or QUIET_WAIT seconds passed. Prints nothing when quiet at once.
wait_quiet() {
	local waited=0 b0 t0 b1 t1 pct
	while :; do
		read -r b0 t0 < <(machine_ticks)
		sleep 1
		read -r b1 t1 < <(machine_ticks)
		pct=$((100 * (b1 - b0) / (t1 - t0 > 0 ? t1 - t0 : 1)))
		[ "$pct" -le "$QUIET_PCT" ] && break
		waited=$((waited + 1))
		if [ "$waited" -ge "$QUIET_WAIT" ]; then
			echo "   (machine still ${pct}% busy after ${QUIET_WAIT}s; measuring anyway: see other%)" >&2
			break
		fi
	done
	[ "$waited" -gt 0 ] && [ "$waited" -lt "$QUIET_WAIT" ] && echo "   (waited ${waited}s for other jobs on the machine)" >&2
	return 0
}

# run_wrk NAME URL PID...: prints "rps p50 p99 cpu% cpu-us/req other% errors"
# where cpu% is the server's (PIDs) share of one CPU during the round and
# other% what processes other than the server, wrk and the origin used.
run_wrk() {
	local name=$1 url=$2
	shift 2
	local t0 t1 o0 o1 m0 m1 mt0 mt1 e0 e1 out rps reqs p50 p99 errs wrk_s el cpu us other
	read -r m0 mt0 < <(machine_ticks)
	t0=$(cpu_ticks "$@")
	o0=$(cpu_ticks "$origin_pid")
	e0=$EPOCHREALTIME
	# `times` in the substitution's shell: its second line is wrk's CPU time.
	out=$(
		"${pin_load[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$url" 2>&1
		times
	)
	e1=$EPOCHREALTIME
	t1=$(cpu_ticks "$@")
	o1=$(cpu_ticks "$origin_pid")
	read -r m1 mt1 < <(machine_ticks)
	printf '%s\n' "$out" >>"$tmp/wrk.log"
	rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ {print $2}')
	reqs=$(printf '%s\n' "$out" | awk '/requests in/ {print $1}')
	p50=$(printf '%s\n' "$out" | awk '$1 == "50%" {print $2}')
	p99=$(printf '%s\n' "$out" | awk '$1 == "99%" {print $2}')
	errs=$(printf '%s\n' "$out" | awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}')
	[ -n "$rps" ] || die "wrk failed against $name: $out"
	# "0m1.234s 0m0.567s" -> seconds
	wrk_s=$(printf '%s\n' "$out" | tail -1 | awk '{s = 0; for (i = 1; i <= 2; i++) {split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2]} print s}')
	el=$(echo "$e1 - $e0" | bc)
	cpu=$(echo "scale=1; 100 * ($t1 - $t0) / $CLK_TCK / $el" | bc)
	us=$(echo "scale=2; 1000000 * ($t1 - $t0) / $CLK_TCK / $reqs" | bc)
	other=$(echo "scale=1; x = 100 * (($m1 - $m0 - $t1 + $t0 - $o1 + $o0) / $CLK_TCK - $wrk_s) / $el; if (x < 0) x = 0; x" | bc)
	echo "$rps $p50 $p99 $cpu $us $other $errs"
}

median() { sort -g | awk '{a[NR] = $1} END {if (NR % 2) printf "%.3f\n", a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

summary=()
missed=0
row() { printf '%-6s %-10s %12s %9s %9s %7s %8s %7s %6s %s\n' "$@"; }
for target in $TARGETS; do
	case "$target" in
	page) path=$PAGE_PATH ;;
	proxy) path=$PROXY_PATH ;;
	*) die "unknown target $target (page, proxy)" ;;
	esac
	"${pin_load[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$WARMUP" "http://$FG$path" >/dev/null 2>&1
	"${pin_load[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$WARMUP" "http://$NG$path" >/dev/null 2>&1
	echo "-- $target: GET $path"
	row round server "requests/s" p50 p99 "cpu%" "cpu-us/r" "other%" errors
	ratios=() costs=()
	for r in $(seq "$ROUNDS"); do
		for attempt in $(seq 0 "$REDO"); do
			wait_quiet
			read -r a_rps a_p50 a_p99 a_cpu a_us a_oth a_err < <(run_wrk flashgate "http://$FG$path" "$fg_pid")
			wait_quiet
			read -r b_rps b_p50 b_p99 b_cpu b_us b_oth b_err < <(run_wrk nginx "http://$NG$path" "${ng_all[@]}")
			dirty=$(awk -v a="$a_oth" -v b="$b_oth" -v m="$DIRTY_PCT" 'BEGIN {print (a > m || b > m) ? 1 : 0}')
			note=""
			if [ "$dirty" = 1 ]; then
				note="(other load > ${DIRTY_PCT}%: round redone)"
				[ "$attempt" -eq "$REDO" ] && note="(other load > ${DIRTY_PCT}%: kept, no redo left)"
			fi
			row "$r" flashgate "$a_rps" "$a_p50" "$a_p99" "$a_cpu" "$a_us" "$a_oth" "$a_err"
			row "$r" nginx "$b_rps" "$b_p50" "$b_p99" "$b_cpu" "$b_us" "$b_oth" "$b_err" "$note"
			[ "$dirty" = 1 ] || break
		done
		if [ "$a_err" != 0 ] || [ "$b_err" != 0 ]; then
			echo "   warning: errors or non-2xx answers in round $r (see wrk output with KEEP=1)"
		fi
		ratios+=("$(awk -v a="$a_rps" -v b="$b_rps" 'BEGIN {printf "%.3f", a / b}')")
		costs+=("$(awk -v a="$a_us" -v b="$b_us" 'BEGIN {printf "%.3f", a / b}')")
	done
	med=$(printf '%s\n' "${ratios[@]}" | median)
	cmed=$(printf '%s\n' "${costs[@]}" | median)
	goal=${GOAL[$target]}
	verdict=met
	if [ "$(awk -v m="$med" -v g="$goal" 'BEGIN {print (m < g) ? 1 : 0}')" = 1 ]; then
		verdict=MISSED
		missed=1
	fi
	echo "   requests/s flashgate/nginx per round: ${ratios[*]}"
	echo "   CPU per request flashgate/nginx:      ${costs[*]}"
	summary+=("$(printf '%-6s %-13s requests/s flashgate/nginx %sx (target >= %sx: %s); CPU per request %sx' "$target" "$path" "$med" "$goal" "$verdict" "$cmed")")
	echo
done

echo "== summary (medians over $ROUNDS rounds)"
printf '%s\n' "${summary[@]}"
if [ "$missed" = 1 ]; then
	echo "(a missed target is a finding, not a failure of this script)"
fi
