package sqlite

import "time"

// SkewWall makes s read the wall clock off by d, as a process on a host whose clock is wrong
// (or was just stepped) would.
func SkewWall(s *Store, d time.Duration) {
	s.clk.wall = func() time.Time { return time.Now().Add(d) }
}
