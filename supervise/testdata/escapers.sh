# Sourced by tests ("escapers_file=FILE; . escapers.sh"): leaves three processes deaf to SIGTERM, each appending its pid
# to FILE — a double-forked setsid daemon (its own session and group), a double-forked child that stays
# in the group (re-parented to the nearest subreaper), and a plain background child — and returns when
# all three run. Used by supervise's and cmd/once's tests of the stop paths.
( setsid sh -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 3603' "$escapers_file" & )
( sh -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 3604' "$escapers_file" & )
sh -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 3605' "$escapers_file" &
while [ "$(cat "$escapers_file" 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.02; done
