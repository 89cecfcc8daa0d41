package etcd

import (
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// privateEtcd starts an etcd of this test's own (the shared one must not get an alarm: NOSPACE
// refuses every write) and returns its DSN once it answers.
func privateEtcd(t *testing.T) string {
	t.Helper()
	return "etcd://" + startEtcd(t)
}

func findings(t *testing.T, s *Store, check string) []store.Finding {
	t.Helper()
	fs, err := s.Inspect(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Finding
	for _, f := range fs {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// TestInspect: the shared server (3.4, one member, no alarm) is durable, alarm-free and noted as a
// single member. --unsafe-no-fsync cannot be turned on here: etcd 3.4 has no such flag, and 3.5's
// does not show through the API (TestFsyncFinding covers the grading).
func TestInspect(t *testing.T) {
	s, err := Open(ctxT(t, 10*time.Second), withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := findings(t, s, "durability")
	if len(d) != 1 || (d[0].Level != store.LevelOK && d[0].Level != store.LevelInfo) {
		t.Errorf("durability: %+v", d)
	}
	if a := findings(t, s, "alarm"); len(a) != 1 || a[0].Level != store.LevelOK {
		t.Errorf("alarm: %+v", a)
	}
	if m := findings(t, s, "members"); len(m) != 1 || m[0].Level == store.LevelWarn || m[0].Level == store.LevelFail {
		t.Errorf("members: %+v", m)
	}
}

// TestInspectAlarm: a NOSPACE alarm raised on a private server is a failing finding, and gone
// once disarmed.
func TestInspectAlarm(t *testing.T) {
	serverDSN(t)
	s, err := Open(ctxT(t, 10*time.Second), privateEtcd(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxT(t, 10*time.Second)
	var ml memberListResp
	if err := s.c.call(ctx, mMembers, empty{}, &ml, true); err != nil || len(ml.Members) != 1 {
		t.Fatalf("member list: %+v, %v", ml, err)
	}
	id := ml.Members[0].ID
	var ar alarmResp
	if err := s.c.call(ctx, mAlarm, alarmReq{Action: "ACTIVATE", MemberID: id, Alarm: "NOSPACE"}, &ar, false); err != nil {
		t.Fatal(err)
	}
	a := findings(t, s, "alarm")
	if len(a) != 1 || a[0].Level != store.LevelFail || !strings.Contains(a[0].Message, "NOSPACE") {
		t.Fatalf("with NOSPACE: %+v", a)
	}
	if err := s.c.call(ctx, mAlarm, alarmReq{Action: "DEACTIVATE", MemberID: id, Alarm: "NOSPACE"}, &ar, false); err != nil {
		t.Fatal(err)
	}
	if a := findings(t, s, "alarm"); len(a) != 1 || a[0].Level != store.LevelOK {
		t.Fatalf("disarmed: %+v", a)
	}
}

func TestFsyncFinding(t *testing.T) {
	for v, want := range map[string]store.Level{"3.4.23": store.LevelOK, "3.3.1": store.LevelOK, "3.5.0": store.LevelInfo, "3.6.1": store.LevelInfo, "": store.LevelInfo} {
		if f := fsyncFinding("e", v); f.Level != want {
			t.Errorf("%q: %+v, want %s", v, f, want)
		}
	}
}
