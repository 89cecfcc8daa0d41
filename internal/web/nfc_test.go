package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A slot value that is not in Unicode NFC ("café" as e + U+0301, as macOS writes it) is refused
// with 400 naming the NFC form to write, as --slot is: it looks like the NFC slot and is another.
// One an older once recorded that way waits for review: its slot page and resolve take it.
func TestSlotNotNFC(t *testing.T) {
	sd := newSeeded(t)
	sd.waiting("sync", "cafe\u0301")
	_, ts := sd.server(testToken)
	want := `--slot \"cafe\\u0301\" is not in Unicode NFC form: write it as \"café\"` // in JSON
	resp, err := http.Get(ts.URL + "/api/v1/slot?task=sync&slot=" + url.QueryEscape("bise\u0301"))
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Error string }
	err = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || err != nil || !strings.Contains(e.Error, `write it as "bisé"`) {
		t.Fatalf("slot page of an NFD slot never recorded: %d %q %v", resp.StatusCode, e.Error, err)
	}
	if resp, err = http.Get(ts.URL + "/api/v1/slot?task=sync&slot=" + url.QueryEscape("cafe\u0301")); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("slot page of a recorded NFD slot: %d", resp.StatusCode)
	}
	auth := []string{"Authorization", "Bearer " + testToken}
	never := `{"task":"other","slot":"cafe\u0301","as":"failed","note":"x","by":"alice"}`
	if resp, b := post(t, ts, "/api/v1/review/resolve", "application/json", never, auth...); resp.StatusCode != 400 || !strings.Contains(b, want) {
		t.Fatalf("resolve of an NFD slot never recorded: %d %s; want 400 saying %s", resp.StatusCode, b, want)
	}
	body := `{"task":"sync","slot":"cafe\u0301","as":"failed","note":"checked","by":"alice"}`
	if resp, b := post(t, ts, "/api/v1/review/resolve", "application/json", body, auth...); resp.StatusCode != 200 {
		t.Fatalf("resolve of the recorded NFD slot: %d %s", resp.StatusCode, b)
	}
}
