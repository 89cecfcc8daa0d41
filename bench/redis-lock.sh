#!/bin/sh
# The lock wrapper a Redis user writes with redis-cli, the peer of `once run --store redis://…` in
# bench/cli-peers.sh: SET NX PX with a random token, run the command, release with the Lua
# compare-and-delete. No renewal, no history, no fencing token: it is the floor, not a rival.
#
#   redis-lock.sh HOST PORT NAME TTL_MS COMMAND [ARG...]      exit 75 when the lock is held
h=$1 p=$2 name=$3 ttl=$4
shift 4
tok=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
[ "$(redis-cli -h "$h" -p "$p" SET "$name" "$tok" NX PX "$ttl")" = OK ] || exit 75
"$@"
rc=$?
redis-cli -h "$h" -p "$p" EVAL "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end" 1 "$name" "$tok" >/dev/null
exit $rc
