package k3s

import (
	"maps"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

func TestLocate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		want Location
	}{
		{"default", Options{}, Location{DefaultConfigPath, SourceDefault}},
		{"default-set", Options{ConfigPath: DefaultConfigPath}, Location{DefaultConfigPath, SourceDefault}},
		{"option", Options{ConfigPath: "/etc/k3s.yaml"}, Location{"/etc/k3s.yaml", SourceOption}},
		{"arg-eq", Options{ConfigPath: "/etc/k3s.yaml", K3sArgs: []string{"--config=/srv/k3s.yaml"}}, Location{"/srv/k3s.yaml", SourceArgs}},
		{"arg-space", Options{K3sArgs: []string{"--node-name x --config /srv/a.yaml"}}, Location{"/srv/a.yaml", SourceArgs}},
		{"arg-short", Options{K3sArgs: []string{"-c", "/srv/b.yaml"}}, Location{"/srv/b.yaml", SourceArgs}},
		{"arg-first-wins", Options{K3sArgs: []string{"--config=/a.yaml", "--config=/b.yaml"}}, Location{"/a.yaml", SourceArgs}},
		{"env-wins", Options{Env: map[string]string{EnvConfigFile: "/env.yaml"}, K3sArgs: []string{"--config=/a.yaml"}}, Location{"/env.yaml", EnvConfigFile}},
		{"config-prefix-not-flag", Options{K3sArgs: []string{"--config-x=/a.yaml"}}, Location{DefaultConfigPath, SourceDefault}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.opts.Locate(); got != tt.want {
				t.Errorf("Locate = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDataDir(t *testing.T) {
	t.Parallel()
	files := []File{{Path: "/c.yaml", Data: []byte("data-dir: /file\n")}}
	tests := []struct {
		name      string
		files     []File
		args      []string
		env       map[string]string
		option    string
		want, src string
	}{
		{name: "default", want: DefaultDataDir, src: SourceDefault},
		{name: "option", option: "/opt", want: "/opt", src: SourceOption},
		{name: "env-over-option", option: "/opt", env: map[string]string{EnvDataDir: "/env"}, want: "/env", src: EnvDataDir},
		{name: "file-over-env", files: files, env: map[string]string{EnvDataDir: "/env"}, want: "/file", src: "/c.yaml"},
		{name: "arg-over-file", files: files, args: []string{"--data-dir=/arg"}, want: "/arg", src: ArgsSource},
		{name: "short-arg", args: []string{"-d /short"}, want: "/short", src: ArgsSource},
		// Class 8: "data-dir:" with no value is --data-dir=, k3s's default.
		{name: "null-resets", files: []File{{Path: "/c.yaml", Data: []byte("data-dir:\n")}}, env: map[string]string{EnvDataDir: "/env"}, want: DefaultDataDir, src: "/c.yaml"},
		{name: "short-key", files: []File{{Path: "/c.yaml", Data: []byte("d: /d\n")}}, want: "/d", src: "/c.yaml"},
		{name: "later-file", files: append(files, File{Path: "/c.yaml.d/x.yaml", Data: []byte("data-dir+: /later\n")}), want: "/later", src: "/c.yaml.d/x.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eff, err := Merge(tt.files, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			got, src := Options{Env: tt.env, DataDir: tt.option}.dataDir(eff)
			if got != tt.want || src != tt.src {
				t.Errorf("dataDir = %q from %q, want %q from %q", got, src, tt.want, tt.src)
			}
		})
	}
}

func TestParseEnvironmentFile(t *testing.T) {
	t.Parallel()
	got, err := ParseEnvironmentFile([]byte("# comment\n; also\n\nK3S_DATA_DIR = \"/srv/k3s\"\nK3S_URL='https://x:6443'\nA=\"q\\\"d\"\nK3S_DATA_DIR=/later\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"K3S_DATA_DIR": "/later", "K3S_URL": "https://x:6443", "A": `q"d`}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// A trailing backslash continues the line, as systemd reads it: the
	// second line is part of K3S_DATA_DIR's value, not K3S_CONFIG_FILE.
	// A comment's does not (systemd v254 on: env-file.c COMMENT_ESCAPE).
	got, err = ParseEnvironmentFile([]byte("K3S_DATA_DIR=/data\\\nK3S_CONFIG_FILE=/x.yaml\n# note \\\nK3S_URL=shown\nB=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"K3S_DATA_DIR": "/dataK3S_CONFIG_FILE=/x.yaml", "K3S_URL": "shown", "B": "1"}
	if !maps.Equal(got, want) {
		t.Errorf("continued lines: got %v, want %v", got, want)
	}
	// Quotes as systemd's env-file.c reads them: an unterminated quote
	// takes the rest of the file, line breaks included, so the later
	// lines set nothing; quoted and plain parts join; escapes in double
	// quotes only before "\`$ and a line break.
	for _, tc := range []struct {
		in   string
		want map[string]string
	}{
		{"K3S_CONFIG_FILE=\"/etc/k3s.yaml\nK3S_DATA_DIR=/data\n", map[string]string{"K3S_CONFIG_FILE": "/etc/k3s.yaml\nK3S_DATA_DIR=/data\n"}},
		{"A=1\nK3S_DATA_DIR='/data\nB=2", map[string]string{"A": "1", "K3S_DATA_DIR": "/data\nB=2"}},
		{"A=\"x\" 'y' z  \nB=\"a\\$b\\q\\\nc\"\n", map[string]string{"A": "xyz", "B": "a$b\\qc"}},
		{"A=x\\ \r\nB=  two words  \n", map[string]string{"A": "x ", "B": "two words"}},
		{"A=\"multi\nline\"\n", map[string]string{"A": "multi\nline"}},
	} {
		got, err := ParseEnvironmentFile([]byte(tc.in))
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"no-equals\n", "1X=y\n", "A B=c\n", "=v\n", "no-equals", "A=\xff\n"} {
		if _, err := ParseEnvironmentFile([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// A NUL byte anywhere, a value's or a comment's: systemd reads the
	// file as a C string and refuses one with a NUL in it (fileio.c
	// read_full_stream_full: EBADMSG), so k3s does not start.
	for _, bad := range []string{"K3S_TOKEN=abc\x00def\n", "# \x00\nA=1\n", "A='\x00'\n"} {
		if _, err := ParseEnvironmentFile([]byte(bad)); err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("%q: error %v; want one naming the NUL byte", bad, err)
		}
	}
}

func FuzzParseEnvironmentFile(f *testing.F) {
	f.Add([]byte("K3S_DATA_DIR=\"/srv/k3s\"\n# c\nX='y'\n"))
	f.Add([]byte("=\n\"\n"))
	f.Add([]byte("export K3S_TOKEN=K10abc::server:secretsecret\n"))
	f.Add([]byte("K3S_TOKEN: supersecretvalue\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ParseEnvironmentFile(data)
		if err != nil {
			// No line is quoted: the file holds the join token. (A word
			// of the line may appear only as the key the error names.)
			msg := err.Error()
			for _, line := range strings.Split(string(data), "\n") {
				if l := strings.TrimSpace(line); len(l) >= 24 && strings.Contains(msg, l) {
					t.Fatalf("error %q quotes line %q", msg, l)
				}
			}
			return
		}
		for k := range env {
			if !isEnvName(k) {
				t.Errorf("accepted bad name %q", k)
			}
		}
	})
}

func TestKubeletArgConflicts(t *testing.T) {
	t.Parallel()
	taints := mustTaints(t, "nvidia.com/gpu=present:NoSchedule")
	labels := mustLabels(t, "a=b")
	tests := []struct {
		arg          string
		errs, warns  int
		noTaintsErrs int // with no nodeprep taints
	}{
		{arg: "register-with-taints=x=y:NoExecute", errs: 1},
		{arg: "--register-with-taints=x=y:NoExecute", errs: 1},
		{arg: "register-with-taints+=x=y:NoExecute", errs: 1},
		{arg: "register-with-taints-=x=y:NoExecute", warns: 1},
		{arg: "node-labels=x=y", errs: 1, noTaintsErrs: 1},
		{arg: "node-labels+=x=y"},
		{arg: "max-pods=250"},
	}
	for _, tt := range tests {
		eff, err := Merge(nil, []string{"--kubelet-arg=" + tt.arg})
		if err != nil {
			t.Fatal(err)
		}
		var warns []string
		errs := kubeletArgConflicts(eff, labels, taints, &warns)
		if len(errs) != tt.errs || len(warns) != tt.warns {
			t.Errorf("%s: %d errors %v, %d warnings %v; want %d, %d", tt.arg, len(errs), errs, len(warns), warns, tt.errs, tt.warns)
		}
		if errs := kubeletArgConflicts(eff, labels, nil, &warns); len(errs) != tt.noTaintsErrs {
			t.Errorf("%s without nodeprep taints: %v", tt.arg, errs)
		}
	}
}

// BenchmarkRead measures locating and merging k3s's configuration (a
// config.yaml with kubelet-args and data-dir, plus a drop-in).
func BenchmarkRead(b *testing.B) {
	root, err := hostfs.New(testkit.HostFiles(b, map[string]string{
		"srv/k3s.yaml":                 "server: https://x:6443\ndata-dir: /data/k3s\nkubelet-arg: [max-pods=250, v=2]\nnode-label: [site=lab]\n",
		"srv/k3s.yaml.d/50-other.yaml": "node-taint+: [a=b:NoSchedule]\n",
	}))
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{K3sArgs: []string{"--config=/srv/k3s.yaml"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(root, opts); err != nil {
			b.Fatal(err)
		}
	}
}
