package bounded

import (
	"bytes"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestCheckTOML(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return "a = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n" }
	tests := []struct {
		name, doc string
		ok        bool
	}{
		{"containerd config", "version = 3\n[plugins.'io.containerd.cri.v1.runtime']\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n", true},
		{"at the limit", deep(MaxTOMLDepth), true},
		{"one deeper", deep(MaxTOMLDepth + 1), false},
		{"two million", "version = 3\na = " + strings.Repeat("[", 2_000_000), false},
		{"inline tables", "a = " + strings.Repeat("{b = ", MaxTOMLDepth+1) + "1" + strings.Repeat("}", MaxTOMLDepth+1), false},
		{"brackets in a basic string", "a = \"" + strings.Repeat("[", 1000) + "\"\n", true},
		{"an escaped quote", "a = \"\\\"" + strings.Repeat("[", 1000) + "\"\n", true},
		{"brackets in a literal string", "a = '" + strings.Repeat("{", 1000) + "'\n", true},
		{"brackets in a multi-line string", "a = \"\"\"\n" + strings.Repeat("[", 1000) + "\n\"\"\"\n", true},
		{"brackets in a multi-line literal", "a = '''" + strings.Repeat("[", 1000) + "'''\n", true},
		{"brackets in a comment", "# " + strings.Repeat("[", 1000) + "\na = 1\n", true},
		{"deep after a string", "a = \"x\"\nb = " + strings.Repeat("[", MaxTOMLDepth+1), false},
		{"deep after a comment", "# x\nb = " + strings.Repeat("[", MaxTOMLDepth+1), false},
		// Dotted keys and headers cost the decoder time and memory
		// quadratic in their parts (a 40 KB key: 36 s, 6.6 GB).
		{"a dotted key of 64 parts", "x" + strings.Repeat(".a", MaxTOMLDots) + " = 1\n", true},
		{"a dotted key of 20,000 parts", "x" + strings.Repeat(".a", 20000) + " = 1\n", false},
		{"a quoted dotted key", strings.Repeat(`"a".`, MaxTOMLDots+1) + "b = 1\n", false},
		{"a long table header", "[x" + strings.Repeat(".a", MaxTOMLDots+1) + "]\n", false},
		{"dots in strings and comments", "a = \"" + strings.Repeat(".", 1000) + "\" # " + strings.Repeat(".", 1000) + "\n", true},
		{"many short keys", strings.Repeat("a.b.c = 1.5\n", 10000), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := CheckTOML([]byte(tt.doc)); (err == nil) != tt.ok {
				t.Errorf("CheckTOML = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// FuzzCheckTOML: CheckTOML never panics, and a document it accepts decodes
// without overflowing the stack (the decoder may refuse it: that is its
// error to report).
func FuzzCheckTOML(f *testing.F) {
	f.Add([]byte("version = 3\n[plugins]\na = [[1], {b = 2}]\n"))
	f.Add([]byte("a = \"\"\"[[[\"\"\"\nb = '''{{{'''\n# [[[\n"))
	f.Add([]byte(strings.Repeat("[", 100)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if CheckTOML(data) != nil {
			return
		}
		var v map[string]any
		_, _ = toml.NewDecoder(bytes.NewReader(data)).Decode(&v)
	})
}
