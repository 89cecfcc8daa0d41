// Command now prints the wall clock as Unix seconds and how long a 200 ms sleep took by the
// monotonic clock (TestBuildSkewed builds it with BuildSkewed).
package main

import (
	"fmt"
	"time"
)

func main() {
	t := time.Now()
	time.Sleep(200 * time.Millisecond)
	fmt.Println(t.Unix(), time.Since(t).Milliseconds())
}
