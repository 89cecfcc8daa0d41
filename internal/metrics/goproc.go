package metrics

import (
	"runtime"
	"runtime/debug"
	"time"
)

// The Go runtime's metrics, under the names the Prometheus client's Go collector gives them (a
// subset: the ones dashboards for Go services use).
var (
	descGoroutines   = gaugeDesc("go_goroutines", "Number of goroutines that currently exist.")
	descGoInfo       = gaugeDesc("go_info", "Information about the Go environment.", "version")
	descGoMaxProcs   = gaugeDesc("go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting.")
	descAlloc        = gaugeDesc("go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use.")
	descAllocTotal   = counterDesc("go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already.")
	descSys          = gaugeDesc("go_memstats_sys_bytes", "Number of bytes obtained from system.")
	descHeapInuse    = gaugeDesc("go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use.")
	descHeapObjects  = gaugeDesc("go_memstats_heap_objects", "Number of currently allocated objects.")
	descNextGC       = gaugeDesc("go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place.")
	descLastGC       = gaugeDesc("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.")
	descGCDuration   = newDesc("summary", "go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.")
	gcPauseQuantiles = []float64{0, 0.25, 0.5, 0.75, 1}
)

// collectGo adds the Go runtime's metrics.
func collectGo(w *sink) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w.gauge(descGoroutines, float64(runtime.NumGoroutine()))
	w.gauge(descGoInfo, 1, runtime.Version())
	w.gauge(descGoMaxProcs, float64(runtime.GOMAXPROCS(0)))
	w.gauge(descAlloc, float64(ms.Alloc))
	w.counter(descAllocTotal, float64(ms.TotalAlloc))
	w.gauge(descSys, float64(ms.Sys))
	w.gauge(descHeapInuse, float64(ms.HeapInuse))
	w.gauge(descHeapObjects, float64(ms.HeapObjects))
	w.gauge(descNextGC, float64(ms.NextGC))
	w.gauge(descLastGC, float64(ms.LastGC)/1e9)

	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, len(gcPauseQuantiles))}
	debug.ReadGCStats(&gc)
	qs := make([][2]float64, len(gcPauseQuantiles))
	for i, q := range gcPauseQuantiles {
		qs[i] = [2]float64{q, gc.PauseQuantiles[i].Seconds()}
	}
	w.summary(descGCDuration, uint64(gc.NumGC), gc.PauseTotal.Seconds(), qs)
}
