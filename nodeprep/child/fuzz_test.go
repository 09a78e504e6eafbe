package child

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// FuzzReadReports feeds arbitrary bytes through the report pipe's reader:
// every "report <data>" line comes out as data, in order, every
// "crash <signal> <library>" line as a Crash, nothing else does, and no
// line is kept beyond MaxReport.
func FuzzReadReports(f *testing.F) {
	f.Add([]byte("report vulkan {}\nreport egl {}\n"))
	f.Add([]byte("noise\ncrash SIGSEGV /lib/x.so\nreport a"))
	f.Add([]byte("report "))
	f.Add([]byte("crash\n\nreport  \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Skip(err)
		}
		go func() { _, _ = w.Write(data); w.Close() }()
		events := make(chan reportLine, 16)
		go readReports(r, events)
		var reports [][]byte
		crashes := 0
		for ev := range events {
			if ev.crash != nil {
				crashes++
				continue
			}
			if len(ev.report) > MaxReport {
				t.Fatalf("a report of %d bytes: over the %d-byte bound", len(ev.report), MaxReport)
			}
			reports = append(reports, ev.report)
		}
		r.Close()
		// The same lines, split by hand (the inputs are far below
		// MaxReport).
		var want [][]byte
		wantCrashes := 0
		lines := strings.Split(string(data), "\n")
		for i, l := range lines {
			last := i == len(lines)-1
			kind, rest, ok := strings.Cut(l, " ")
			if !ok || (last && rest == "") {
				continue
			}
			switch kind {
			case "report":
				want = append(want, []byte(strings.TrimSpace(rest)))
			case "crash":
				wantCrashes++
			}
		}
		if len(reports) != len(want) || crashes != wantCrashes {
			t.Fatalf("%d reports and %d crashes, want %d and %d, from %q", len(reports), crashes, len(want), wantCrashes, data)
		}
		for i := range want {
			if !bytes.Equal(reports[i], want[i]) {
				t.Fatalf("report %d = %q, want %q", i, reports[i], want[i])
			}
		}
	})
}
