// Package peers benchmarks the lock libraries once's stores are compared with, on the same test
// servers as the stores' own BenchmarkSuite/Contended (store/storetest): bsm/redislock and
// go-redsync on Redis, etcd's concurrency.Mutex over gRPC. It is a module of its own so that the
// library's go.mod lists only what the library uses. Run it with ../stores.sh.
package peers
