#!/bin/sh
# The server's ceiling for lua/deduct.lua with ONE attempt per call, to set
# beside BenchmarkDeductDirect/Coalesced (which include the client):
#
#   sh orders/stock/testdata/redis-benchmark.sh            # 200000 calls, 50 clients
#   N=500000 C=64 BATCH=32 sh orders/stock/testdata/redis-benchmark.sh
#
# BATCH > 1 sends that many attempts per call (all to random users), i.e.
# the group commit's shape. Prints redis-benchmark's summary and the server's
# own usec_per_call for the script.
set -eu
N=${N:-200000}
C=${C:-50}
BATCH=${BATCH:-1}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
	--pidfile "$dir/pid" --dir "$dir" --logfile "$dir/log"
trap 'kill "$(cat "$dir/pid")" 2>/dev/null; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
cli() { redis-cli -p "$port" "$@"; }
sha=$(cli SCRIPT LOAD "$(cat "$here/../lua/deduct.lua")")
cli SET 'sk:{b}:stock' 1000000000000000 >/dev/null
# The run id the script checks the meta against (the fence), as a warmed sale has it.
runid=$(cli INFO server | tr -d '\r' | sed -n 's/^run_id://p')
cli HSET 'sk:{b}:meta' end 0 runid "$runid" >/dev/null

keys="sk:{b}:stock sk:{b}:outbox sk:{b}:meta"
args="b 604800000 604800000 1"
i=0
while [ "$i" -lt "$BATCH" ]; do
	# redis-benchmark replaces each __rand_int__ with a random 12-digit
	# number (-r must fit an int): fresh buyer, order and token keys per attempt.
	keys="$keys sk:{b}:u:__rand_int__ sk:{b}:o:__rand_int__ sk:{b}:t:__rand_int__"
	args="$args user__rand_int__ 1 1000000 __rand_int__ 1999 1700000000000 60000 1 0"
	i=$((i + 1))
done
nkeys=$((3 + 3 * BATCH))
# shellcheck disable=SC2086 # word splitting of keys/args is intended
redis-benchmark -p "$port" -n "$N" -c "$C" -r 100000000 -q EVALSHA "$sha" "$nkeys" $keys $args 2>&1 |
	tr "\r" "\n" | grep "requests per second" | sed "s/^.*: /EVALSHA deduct.lua x$BATCH: /"
cli INFO commandstats | grep -i evalsha
echo "stock left: $(cli GET 'sk:{b}:stock'), outbox: $(cli XLEN 'sk:{b}:outbox')"
