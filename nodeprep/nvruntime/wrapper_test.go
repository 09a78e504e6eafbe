package nvruntime

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// TestParseWrapper: the config file a wrapper script makes the runtime
// read, in the NVIDIA runtime's own order (NVIDIA_CTK_CONFIG_FILE_PATH,
// then XDG_CONFIG_HOME, then /etc).
func TestParseWrapper(t *testing.T) {
	t.Parallel()
	const toolkit = "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"
	tests := []struct {
		name, script string
		path, from   string
		unresolved   []string
	}{
		{"installer 1.18 and later", "#! /bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH=" + toolkit + " \\\nPATH=/usr/local/nvidia/toolkit:$PATH \\\n\t/usr/local/nvidia/toolkit/nvidia-container-runtime.real \\\n\t\t\"$@\"\n", toolkit, "NVIDIA_CTK_CONFIG_FILE_PATH in w", nil},
		{"installer before 1.18", "#! /bin/sh\nLD_LIBRARY_PATH=/x:$LD_LIBRARY_PATH \\\nXDG_CONFIG_HOME=/usr/local/nvidia/toolkit/.config \\\nnvidia-container-runtime.real \\\n\t\"$@\"\n", toolkit, "XDG_CONFIG_HOME in w", nil},
		{"the file path wins over XDG", "#!/bin/sh\nexport XDG_CONFIG_HOME=/a\nexport NVIDIA_CTK_CONFIG_FILE_PATH='/b/c.toml'\nexec /real \"$@\"\n", "/b/c.toml", "NVIDIA_CTK_CONFIG_FILE_PATH in w", nil},
		{"makeWrapper's default", "#! /nix/store/x-bash/bin/bash -e\nexport NVIDIA_CTK_CONFIG_FILE_PATH=${NVIDIA_CTK_CONFIG_FILE_PATH-'/etc/nvidia/rt.toml'}\nexec -a \"$0\" /nix/store/y/.nvidia-container-runtime-wrapped \"$@\"\n", "/etc/nvidia/rt.toml", "NVIDIA_CTK_CONFIG_FILE_PATH in w", nil},
		{"an empty value is unset", "#!/bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH= XDG_CONFIG_HOME=\"/x\" exec /real\n", "/x/nvidia-container-runtime/config.toml", "XDG_CONFIG_HOME in w", nil},
		{"a variable is not followed", "#!/bin/sh\nexport NVIDIA_CTK_CONFIG_FILE_PATH=$HOME/c.toml\nexec /real\n", DefaultPath, "", []string{"NVIDIA_CTK_CONFIG_FILE_PATH"}},
		{"a comment is not a setting", "#!/bin/sh\n# XDG_CONFIG_HOME=/x\nexec /real\n", DefaultPath, "", nil},
		{"after the command is an argument", "#!/bin/sh\nexec /real XDG_CONFIG_HOME=/x\n", DefaultPath, "", nil},
		{"nothing set", "#!/bin/sh\nexec /real \"$@\"\n", DefaultPath, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := ParseWrapper("w", []byte(tt.script))
			if err != nil {
				t.Fatal(err)
			}
			p, from := w.ConfigPath()
			if p != tt.path || from != tt.from || strings.Join(w.Unresolved, ",") != strings.Join(tt.unresolved, ",") {
				t.Errorf("ConfigPath() = %q, %q (unresolved %v); want %q, %q (%v)", p, from, w.Unresolved, tt.path, tt.from, tt.unresolved)
			}
		})
	}
}

// TestParseWrapperRefuses: what is not a script nodeprep reads is
// malformed, and a nil Wrapper (the runtime's own binary) reads /etc's.
func TestParseWrapperRefuses(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]string{
		"not a script": "\x7fELF",
		"a NUL":        "#!/bin/sh\n\x00",
		"too large":    "#!/bin/sh\n" + strings.Repeat("#", MaxWrapper),
	} {
		if _, err := ParseWrapper("w", []byte(data)); !errors.Is(err, fault.ErrMalformed) {
			t.Errorf("%s: %v, want malformed", name, err)
		}
	}
	w, err := ParseWrapper("w", []byte("#!/bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH=/a.toml XDG_CONFIG_HOME=/x exec /real\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := w.ConfigPathFor(Version{1, 17, 8}); p != "/x/nvidia-container-runtime/config.toml" {
		t.Errorf("toolkit 1.17.8 (XDG_CONFIG_HOME only): %q", p)
	}
	if p, _ := w.ConfigPathFor(Version{1, 20, 2}); p != "/a.toml" {
		t.Errorf("toolkit 1.20.2: %q", p)
	}
	if p, from := (*Wrapper)(nil).ConfigPath(); p != DefaultPath || from != "" {
		t.Errorf("nil wrapper: %q %q", p, from)
	}
}

// FuzzParseWrapper: any input gives a config path or a malformed error,
// never a panic, and a path only from a literal value.
func FuzzParseWrapper(f *testing.F) {
	f.Add([]byte("#! /bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH=/a \\\n\t/real \"$@\"\n"))
	f.Add([]byte("#!/bin/sh\nexport XDG_CONFIG_HOME=${XDG_CONFIG_HOME:-'/x'}\n"))
	f.Add([]byte("#!/bin/sh\nXDG_CONFIG_HOME=\"$(id)\" exec /r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := ParseWrapper("w", data)
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("error %v not malformed", err)
			}
			return
		}
		p, _ := w.ConfigPath()
		if strings.ContainsAny(p, "$`") {
			t.Fatalf("config path %q from an unexpanded value", p)
		}
	})
}
