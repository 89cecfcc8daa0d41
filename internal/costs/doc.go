// Package costs counts what one guarded run costs each store: the round trips between the client
// and the server (a counting loopback relay between them, protocol-blind), and on the embedded
// store the fsyncs of a whole once run (strace). Its tests hold each count to a budget, so that a
// change that adds a round trip or a durable write shows as a failure, not as a slower benchmark
// nobody reads (issue 16; the numbers are in docs/benchmarks.md).
package costs
