package sqlite

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// marker is the content of a ledger's marker file (see files.go): one line of fixed length,
//
//	once-ledger <id: 32 lowercase hex digits> <seq: 20 decimal digits>\n
//
// so that an update overwrites it in place with one write.
type marker struct {
	id  string
	seq int64
}

const (
	markerTag = "once-ledger "
	markerLen = len(markerTag) + 32 + 1 + 20 + 1
)

func (m marker) String() string { return fmt.Sprintf("%s%s %020d\n", markerTag, m.id, m.seq) }

// parseMarker reads a marker file's content. Anything but exactly one well-formed line is an
// error.
func parseMarker(b []byte) (marker, error) {
	s := string(b)
	if len(s) != markerLen || !strings.HasPrefix(s, markerTag) || s[markerLen-1] != '\n' {
		return marker{}, errBadMarker
	}
	id, num, ok := strings.Cut(s[len(markerTag):markerLen-1], " ")
	if !ok || !validID(id) || len(num) != 20 {
		return marker{}, errBadMarker
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return marker{}, errBadMarker
		}
	}
	seq, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return marker{}, fmt.Errorf("%w: write count out of range", errBadMarker)
	}
	return marker{id: id, seq: seq}, nil
}

// validID: 32 lowercase hex digits.
func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func newLedgerID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// readMarker reads the marker at path: nil when there is none. A read can overlap another
// process's in-place update and see a mix of both; a malformed marker is read again before it
// is reported.
func readMarker(path string) (m *marker, err error) {
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(time.Millisecond)
		}
		if m, err = readMarkerOnce(path); err == nil || !errors.Is(err, errBadMarker) {
			return m, err
		}
	}
	return nil, err
}

var errBadMarker = errors.New("not a once ledger marker")

func readMarkerOnce(path string) (*marker, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(markerLen)+1))
	if err != nil {
		return nil, err
	}
	m, err := parseMarker(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}

// createMarker creates the marker at path with content m, complete or not at all: written and
// synced under a temporary name, then linked into place (link fails when another process made
// it first; then that one is read and returned).
func createMarker(path string, m marker, mode uint32) (*marker, error) {
	var sfx [6]byte
	if _, err := rand.Read(sfx[:]); err != nil {
		return nil, err
	}
	tmp := path + ".tmp-" + hex.EncodeToString(sfx[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, os.FileMode(mode))
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	err = f.Chmod(os.FileMode(mode)) // whatever the umask
	if err == nil {
		_, err = f.WriteString(m.String())
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			other, rerr := readMarker(path)
			if rerr == nil && other == nil {
				rerr = errors.New("marker vanished while it was created")
			}
			return other, rerr
		}
		return nil, err
	}
	return &m, nil
}
