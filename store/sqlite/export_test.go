package sqlite

import "time"

// SkewWall makes s read the wall clock off by d, as a process on a host whose clock is wrong
// (or was just stepped) would.
func SkewWall(s *Store, d time.Duration) {
	s.clk.wall = func() time.Time { return time.Now().Add(d) }
}

// ParseMarker and FormatMarker expose the marker format to the fuzz test.
func ParseMarker(b []byte) (id string, seq int64, err error) {
	m, err := parseMarker(b)
	return m.id, m.seq, err
}

func FormatMarker(id string, seq int64) string { return marker{id: id, seq: seq}.String() }
