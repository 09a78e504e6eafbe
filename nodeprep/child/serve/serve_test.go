package serve

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		argv []string
		want Args
		err  string // "" = no error; else in the usage error's message
	}{
		{"probe on the pipe", []string{"__probe", "--report-pipe", "{a}", "{b}"}, Args{Probe, true, []string{"{a}", "{b}"}}, ""},
		{"flag after a request", []string{"__probe", "{a}", "--report-pipe"}, Args{Probe, true, []string{"{a}"}}, ""},
		{"flag value false", []string{"__probe", "--report-pipe=false", "{a}"}, Args{Probe, false, []string{"{a}"}}, ""},
		{"flag value true", []string{"__inventory", "--report-pipe=true", "{}"}, Args{Inventory, true, []string{"{}"}}, ""},
		{"after --", []string{"__probe", "--", "--report-pipe"}, Args{Probe, false, []string{"--report-pipe"}}, ""},
		{"stdin dash is a request", []string{"__probe", "-"}, Args{Probe, false, []string{"-"}}, ""},
		{"no requests", []string{"__inventory"}, Args{Command: Inventory}, ""},
		{"nothing", nil, Args{}, "want a child command"},
		{"unknown command", []string{"selftest"}, Args{}, `unknown child command "selftest"`},
		{"unknown flag", []string{"__probe", "-v", "{a}"}, Args{}, "unknown flag: -v"},
		{"bad flag value", []string{"__probe", "--report-pipe=yes"}, Args{}, `invalid argument "yes"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.argv)
			if tc.err != "" {
				if !errors.Is(err, fault.ErrUsage) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse(%q) error %v, want a usage error with %q", tc.argv, err, tc.err)
				}
				return
			}
			if err != nil || got.Command != tc.want.Command || got.ReportPipe != tc.want.ReportPipe || !slices.Equal(got.Requests, tc.want.Requests) {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.argv, got, err, tc.want)
			}
		})
	}
}

// TestServeUsage: the command lines Serve refuses before it touches a
// driver or the report pipe, each a usage error.
func TestServeUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args Args
		err  string
	}{
		{"probe without request", Args{Command: Probe}, "at least 1 request"},
		{"two probes on stdout", Args{Command: Probe, Requests: []string{"{}", "{}"}}, "one request on stdout"},
		{"bad probe request", Args{Command: Probe, Requests: []string{`{"api":"metal"}`}}, "bad probe request"},
		{"inventory on stdout", Args{Command: Inventory, Requests: []string{"{}"}}, "only on the report pipe"},
		{"two inventories", Args{Command: Inventory, ReportPipe: true, Requests: []string{"{}", "{}"}}, "accepts 1 request, received 2"},
		{"unknown command", Args{Command: "__nope"}, "unknown child command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			err := Serve(tc.args, &out)
			if !errors.Is(err, fault.ErrUsage) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Serve(%+v) = %v, want a usage error with %q", tc.args, err, tc.err)
			}
			if out.Len() != 0 {
				t.Errorf("Serve printed %q on a usage error", out.String())
			}
		})
	}
}

// FuzzParse: Parse never panics; what it accepts names a child command,
// and its requests are the arguments that are not its flag, in order.
func FuzzParse(f *testing.F) {
	f.Add("__probe\x00--report-pipe\x00{}")
	f.Add("__inventory\x00--\x00--report-pipe=false")
	f.Add("__probe\x00--report-pipe=0\x00-\x00x")
	f.Fuzz(func(t *testing.T, joined string) {
		argv := strings.Split(joined, "\x00")
		a, err := Parse(argv)
		if err != nil {
			if !errors.Is(err, fault.ErrUsage) {
				t.Fatalf("Parse(%q): %v is not a usage error", argv, err)
			}
			return
		}
		if a.Command != Probe && a.Command != Inventory {
			t.Fatalf("Parse(%q) accepted command %q", argv, a.Command)
		}
		var want []string
		for i, arg := range argv[1:] {
			if arg == "--" {
				want = append(want, argv[i+2:]...)
				break
			}
			if !strings.HasPrefix(arg, "--"+ReportPipeFlag) {
				want = append(want, arg)
			}
		}
		if !slices.Equal(a.Requests, want) {
			t.Fatalf("Parse(%q) requests %q, want %q", argv, a.Requests, want)
		}
	})
}
