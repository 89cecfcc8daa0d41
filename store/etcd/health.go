package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/once-run/once/store"
)

var _ store.Inspector = (*Store)(nil)

type (
	statusResp struct {
		Version string
		Errors  []string
	}
	alarmMember struct {
		MemberID string // decimal
		Alarm    string // NONE, NOSPACE, CORRUPT
	}
	alarmReq struct {
		Action   string // GET, ACTIVATE, DEACTIVATE
		MemberID string // decimal
		Alarm    string // NOSPACE, CORRUPT
	}
	alarmResp struct {
		Alarms []alarmMember
	}
	member struct {
		ID        string // decimal
		Name      string
		IsLearner bool
	}
	memberListResp struct {
		Members []member
	}
)

// noFsyncSince is the first etcd minor version with --unsafe-no-fsync (3.5): from it on, whether a
// member fsyncs is a start flag that no API shows.
const noFsyncSince = 5

// fsyncFinding grades what the member's version says about fsync.
func fsyncFinding(where, version string) store.Finding {
	major, rest, _ := strings.Cut(version, ".")
	minor, _, _ := strings.Cut(rest, ".")
	mj, err1 := strconv.Atoi(major)
	mn, err2 := strconv.Atoi(minor)
	if err1 == nil && err2 == nil && mj == 3 && mn < noFsyncSince {
		return store.Finding{Check: "durability", Level: store.LevelOK, Message: fmt.Sprintf(
			"etcd %s: version %s has no --unsafe-no-fsync: every commit is fsynced to a quorum's write-ahead log before it returns", where, version)}
	}
	return store.Finding{Check: "durability", Level: store.LevelInfo, Message: fmt.Sprintf(
		"etcd %s: version %s fsyncs every commit to a quorum's write-ahead log unless a member runs with --unsafe-no-fsync, which etcd's API does not show: make sure no member's command line has it", where, version)}
}

// alarmFindings grades the cluster's alarms: NOSPACE refuses every write (nothing runs, 69) and
// CORRUPT means a member's data cannot be trusted.
func alarmFindings(where string, alarms []alarmMember) []store.Finding {
	var out []store.Finding
	for _, a := range alarms {
		fix := "see etcd's maintenance guide"
		switch a.Alarm {
		case "NONE", "":
			continue
		case "NOSPACE":
			fix = "the space quota is used up and writes are refused: compact and defragment, or raise --quota-backend-bytes, then etcdctl alarm disarm"
		case "CORRUPT":
			fix = "a member's data differs from the others': replace the member from a healthy one's snapshot"
		}
		out = append(out, store.Finding{Check: "alarm", Level: store.LevelFail,
			Message: fmt.Sprintf("etcd %s: alarm %s on member %s: %s", where, a.Alarm, a.MemberID, fix)})
	}
	if len(out) == 0 {
		out = append(out, store.Finding{Check: "alarm", Level: store.LevelOK, Message: "etcd " + where + ": no alarms"})
	}
	return out
}

// membersFinding notes a cluster of one voting member: its disk is the only copy of the ledger.
func membersFinding(where string, m memberListResp) store.Finding {
	voters := 0
	for _, x := range m.Members {
		if !x.IsLearner {
			voters++
		}
	}
	if voters == 1 {
		return store.Finding{Check: "members", Level: store.LevelInfo, Message: fmt.Sprintf(
			"etcd %s: one voting member: its disk is the only copy of the ledger and lease tokens; run three or five members to survive the loss of one", where)}
	}
	return store.Finding{Check: "members", Level: store.LevelOK, Message: fmt.Sprintf("etcd %s: %d voting members", where, voters)}
}

// Inspect reports what the cluster shows of its durability and health: the member's version (and
// so whether it can run without fsync), its errors, the cluster's alarms and its voting members.
// Whether a 3.5+ member runs with --unsafe-no-fsync cannot be seen through the API (docs/stores/etcd.md).
func (s *Store) Inspect(ctx context.Context) ([]store.Finding, error) {
	var st statusResp
	if err := s.c.call(ctx, mStatus, empty{}, &st, true); err != nil {
		return nil, s.mapErr(err)
	}
	out := []store.Finding{fsyncFinding(s.where, st.Version)}
	for _, e := range st.Errors {
		out = append(out, store.Finding{Check: "members", Level: store.LevelWarn, Message: fmt.Sprintf("etcd %s: the member reports: %s", s.where, e)})
	}
	var al alarmResp
	if err := s.c.call(ctx, mAlarm, alarmReq{Action: "GET"}, &al, true); err != nil {
		return nil, s.mapErr(err)
	}
	out = append(out, alarmFindings(s.where, al.Alarms)...)
	var ml memberListResp
	if err := s.c.call(ctx, mMembers, empty{}, &ml, true); err != nil {
		return nil, s.mapErr(err)
	}
	return append(append(out, membersFinding(s.where, ml)), s.CheckHistory(ctx)...), nil // the history index: kvstore
}
