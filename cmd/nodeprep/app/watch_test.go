package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestWatchDurations: cdi watch's durations out of their bounds are usage
// errors naming the flag and the range, before anything is watched; the
// config's wait out of its bounds is malformed input naming the key.
func TestWatchDurations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		config string
		code   int
		stderr string
	}{
		{[]string{"--settle", "-5s"}, "", ExitUsage, "--settle -5s: -5s is out of range: want 1ms to 10s"},
		{[]string{"--settle", "0s"}, "", ExitUsage, "--settle 0s"},
		{[]string{"--settle", "1000h"}, "", ExitUsage, "--settle 1000h0m0s: 1000h0m0s is out of range: want 1ms to 10s"},
		{[]string{"--wait", "-1s"}, "", ExitUsage, "--wait -1s: want a duration from 0 to 1h"},
		{[]string{"--wait", "1000h"}, "", ExitUsage, "--wait 1000h0m0s: want a duration from 0 to 1h"},
		{nil, "wait: 1000h\n", ExitMalformed, "wait is 1000h0m0s, want 0 to 1h"},
		{nil, "wait: -5s\n", ExitMalformed, "wait is -5s, want 0 to 1h"},
	} {
		t.Run(strings.Join(tc.args, " ")+tc.config, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			if tc.config != "" {
				p := filepath.Join(root, "etc/nodeprep/config.yaml")
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(tc.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, stderr, code := runCLI(t, append([]string{"--root", root, "cdi", "watch"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, want %d with %q; stderr:\n%s", code, tc.code, tc.stderr, stderr)
			}
		})
	}
}

// TestWatchWait: a pass's lock wait is --wait when given (0 included),
// else the config's wait when not 0, else 30 s: the config's zero, which
// the documented config file spells "wait: 0s", is "the default".
func TestWatchWait(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		config time.Duration
		want   time.Duration
	}{
		{nil, 0, 30 * time.Second},
		{nil, 5 * time.Second, 5 * time.Second},
		{[]string{"--wait", "0"}, 5 * time.Second, 0},
		{[]string{"--wait", "2s"}, 0, 2 * time.Second},
		{[]string{"--wait", "30s"}, time.Minute, 30 * time.Second},
	} {
		fs := pflag.NewFlagSet("watch", pflag.ContinueOnError)
		var wait time.Duration
		fs.DurationVar(&wait, "wait", defaultWatchWait, "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := watchWait(fs, wait, tc.config); got != tc.want {
			t.Errorf("%v with the config's wait %s: %s, want %s", tc.args, tc.config, got, tc.want)
		}
	}
}
