#!/usr/bin/env bash
# Lease latency of every networked store against the lock its users know, same servers, same run:
#   PostgreSQL: store vs pg_try_advisory_lock vs two durable single-row writes
#   MariaDB:    store vs GET_LOCK vs two durable single-row writes
#   Redis:      store vs bsm/redislock vs go-redsync (bench/peers; BenchmarkRedisInterleaved alternates store and redislock)
#   etcd:       store vs concurrency.Mutex with a reused session (bench/peers)
#   ZooKeeper:  store vs go-zookeeper's zk.NewLock  (BenchmarkLeaseInterleaved alternates the two)
# p50/p99 per acquire+release are reported as custom benchmark metrics; 1 and 16 contenders
# (the store's own: BenchmarkSuite/Contended, the suite's code; the peers': BenchmarkLease).
#
#   ./bench/stores.sh [ROUNDS]   (default 2000 rounds per benchmark)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2000}
# The Redis and etcd peers live in their own module (bench/peers), so that the library's go.mod does
# not list them.
exec ./scripts/with-servers sh -c "go test -run '^\$' -bench '^Benchmark(Lease|Suite/Contended)' -benchtime ${rounds}x -timeout 30m \
  ./store/postgres/ ./store/mysql/ ./store/redis/ ./store/etcd/ ./store/zk/ &&
  cd bench/peers && go test -run '^\$' -bench . -benchtime ${rounds}x -timeout 30m ."
