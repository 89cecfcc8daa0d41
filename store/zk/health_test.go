package zk

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// privateZK starts a standalone ZooKeeper of this test's own with the extra zoo.cfg lines (the
// shared server allows no mntr and must keep its forceSync) and returns its address; it is killed
// in t.Cleanup.
func privateZK(t *testing.T, cfg ...string) string {
	t.Helper()
	java, err := exec.LookPath("java")
	jar := "/usr/share/java/zookeeper.jar"
	if _, jerr := os.Stat(jar); err != nil || jerr != nil {
		t.Skip("no java or " + jar + " for a private ZooKeeper")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	dir := t.TempDir()
	conf := strings.Join(append([]string{"tickTime=2000", "dataDir=" + filepath.Join(dir, "data"), "clientPort=" + port,
		"clientPortAddress=127.0.0.1", "admin.enableServer=false"}, cfg...), "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := dir + ":" + jar
	if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
		cp += ":/usr/share/java/slf4j-simple.jar"
	}
	cmd := exec.Command(java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, "zoo.cfg"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + port
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := mntr(t.Context(), addr); err == nil || !isDialErr(err) {
			return addr
		}
	}
	t.Fatal("private ZooKeeper did not start")
	return ""
}

func isDialErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func inspect(t *testing.T, dsn string) []store.Finding {
	t.Helper()
	// Open writes the base nodes: the log is flushed. A server just started (privateZK) on a loaded
	// machine may not grant a session within Open's 2.5 s bound (a fresh-clone run): tried again
	// for up to 20 s, which is not what this test is about.
	var s *Store
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; {
		if s, err = Open(ctxT(t, 20*time.Second), dsn); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs, err := s.Inspect(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return durability(fs)
}

// durability keeps the findings of check "durability" (Inspect adds the history index's too).
func durability(fs []store.Finding) []store.Finding {
	var out []store.Finding
	for _, f := range fs {
		if f.Check == "durability" {
			out = append(out, f)
		}
	}
	return out
}

// TestInspectDurability: a server with forceSync=no is a failing finding, one with the default an
// ok one; the shared server, which allows no mntr, is an info finding saying forceSync cannot be seen.
func TestInspectDurability(t *testing.T) {
	shared := inspect(t, withPrefix(t))
	if len(shared) != 1 || shared[0].Check != "durability" || shared[0].Level == store.LevelWarn || shared[0].Level == store.LevelFail {
		t.Errorf("shared server: %+v", shared)
	}
	for _, c := range []struct {
		forceSync string
		level     store.Level
		says      string
	}{{"no", store.LevelFail, "forceSync=no"}, {"yes", store.LevelOK, "forceSync on"}} {
		t.Run("forceSync="+c.forceSync, func(t *testing.T) {
			addr := privateZK(t, "4lw.commands.whitelist=ruok,srvr,mntr", "forceSync="+c.forceSync)
			fs := inspect(t, "zk://"+addr+"?prefix=t")
			if len(fs) != 1 || fs[0].Level != c.level || !strings.Contains(fs[0].Message, c.says) {
				t.Fatalf("%+v, want one %s finding saying %q", fs, c.level, c.says)
			}
		})
	}
}

func TestForceSyncFinding(t *testing.T) {
	for _, c := range []struct {
		batches, fsyncs string
		want            store.Level
	}{{"0", "0", store.LevelInfo}, {"5", "0", store.LevelFail}, {"5", "5", store.LevelOK}, {"", "", store.LevelInfo}} {
		f := forceSyncFinding("a:1", map[string]string{"zk_cnt_sync_processor_batch_size": c.batches, "zk_cnt_fsynctime": c.fsyncs})
		if f.Level != c.want {
			t.Errorf("%+v: %+v", c, f)
		}
	}
}
