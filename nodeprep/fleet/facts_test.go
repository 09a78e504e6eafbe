package fleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

func goodFacts(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(testkit.Testdata(t, "fleet", "good", "facts.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseFactsGood(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "gpu-01" || f.K3s.Role != "agent" || f.SimulatedServer() != "dgx-h200" || len(f.K3s.UnitPath) != 2 || f.K3s.KubeletConfig == nil {
		t.Errorf("parsed %+v", f)
	}
}

// TestParseFactsRefuses: malformed facts are refused (fault.ErrMalformed,
// exit 65) with a message naming what is wrong; an unknown field is named.
func TestParseFactsRefuses(t *testing.T) {
	t.Parallel()
	good := string(goodFacts(t))
	tests := []struct {
		name, from, to, msg string
	}{
		{"unknown top-level field", `"simulate": "dgx-h200"`, `"simulate": "dgx-h200", "gpus": 8`, `unknown field "gpus"`},
		{"unknown nested field", `"role": "agent"`, `"role": "agent", "nodeLabels": []`, `unknown field "nodeLabels"`},
		{"schema", `"nodeprep.dev/node-facts/v1"`, `"nodeprep.dev/node-facts/v2"`, `want "nodeprep.dev/node-facts/v1"`},
		{"role", `"role": "agent"`, `"role": "worker"`, "k3s.role"},
		{"simulate", `"simulate": "dgx-h200"`, `"simulate": "dgx-h900"`, "simulate"},
		{"name", `"name": "gpu-01"`, `"name": "gpu 01"`, "name"},
		{"relative unit path", `"/run/current-system/sw/bin"`, `"bin"`, "k3s.unitPath[1]"},
		{"unclean package", `"package": "/nix/store/`, `"package": "/nix/store/../`, "driver.package"},
		{"drop-in name", `"dropIns": {}`, `"dropIns": {"../x.yaml": ""}`, "not a plain file name"},
		{"wrong type", `"enable": true`, `"enable": "yes"`, "toolkit.enable"},
		{"trailing data", "}\n", "}\n{}", "data after"},
		{"not JSON", "{", "[", "invalid character"},
		{"duplicate key", `"simulate": "dgx-h200"`, `"simulate": "dgx-h200", "name": "other"`, `key "name" twice`},
		{"duplicate nested key", `"role": "agent"`, `"role": "agent", "role": "server"`, `key "role" twice`},
		{"not UTF-8", `"name": "gpu-01"`, "\"name\": \"gpu-\xff\"", "not UTF-8"},
		{"empty", "", "", "empty"},
		{"package outside the store", `"package": "/nix/store/4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6-nvidia-x11-550.54.15-6.6.30"`, `"package": "/dev/zero"`, "driver.package"},
		{"package is the store", `"package": "/nix/store/4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6-nvidia-x11-550.54.15-6.6.30"`, `"package": "/nix/store"`, "driver.package"},
		{"k3s version", `"version": "1.33.4+k3s1"`, `"version": "latest; rm -rf /"`, "k3s.version"},
		{"kubelet config at /", `"--kubelet-arg=config=/nix/store/0a1b2c3d4e5f6g7h8j9k0l1m2n3p4q5r-k3s-kubelet-config"
    ]`, `"--kubelet-arg=config=/"
    ]`, `--kubelet-arg=config= "/": the root directory`},
		{"kubelet config over /var/run", `"--kubelet-arg=config=/nix/store/0a1b2c3d4e5f6g7h8j9k0l1m2n3p4q5r-k3s-kubelet-config"
    ]`, `"--kubelet-arg=config=/var/run"
    ]`, `--kubelet-arg=config= "/var/run"`},
		{"k3s config at /", `"configPath": null`, `"configPath": "/"`, "k3s.configPath"},
		{"k3s config over nodeprep's", `"configPath": null`, `"configPath": "/etc/nodeprep/config.yaml"`, "k3s.configPath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := strings.Replace(good, tt.from, tt.to, 1)
			if tt.name == "trailing data" {
				data = strings.TrimRight(good, "\n") + "\n{}"
			}
			if tt.name == "empty" {
				data = " \n"
			}
			if data == good {
				t.Fatalf("%q is not in the good facts", tt.from)
			}
			_, err := ParseFacts("f.json", []byte(data))
			if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), "f.json") {
				t.Errorf("error %v, want malformed naming f.json and %q", err, tt.msg)
			}
		})
	}
	big := make([]byte, MaxFacts+1)
	if _, err := ParseFacts("big.json", big); !errors.Is(err, fault.ErrMalformed) {
		t.Errorf("a %d-byte file: %v, want malformed", len(big), err)
	}
}

// FuzzParseFacts: any input is parsed or refused as malformed, never
// panics, and what parses has the schema and absolute paths Assemble
// relies on.
func FuzzParseFacts(f *testing.F) {
	f.Add(goodFacts(f))
	f.Add([]byte(`{"schema":"nodeprep.dev/node-facts/v1","name":"n","k3s":{"role":"server","dropIns":{"a.yaml":"x"}}}`))
	f.Add([]byte(`{"schema":"nodeprep.dev/node-facts/v1","name":"n","k3s":{"role":"agent","unitPath":["/a/../b"]}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"schema":"nodeprep.dev/node-facts/v1","name":"a","name":"b","k3s":{"role":"agent"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		facts, err := ParseFacts("fuzz.json", data)
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("error %v is not marked malformed", err)
			}
			return
		}
		if facts.Schema != Schema || facts.Name == "" || noDuplicateKeys(data) != nil || !utf8.Valid(data) {
			t.Fatalf("parsed %+v", facts)
		}
		if p := facts.Driver.Package; p != "" && !IsStorePath(p) {
			t.Fatalf("driver package %q accepted", p)
		}
		for _, d := range facts.K3s.UnitPath {
			if !filepath.IsAbs(d) || filepath.Clean(d) != d {
				t.Fatalf("unit path %q accepted", d)
			}
		}
		for n := range facts.K3s.DropIns {
			if strings.Contains(n, "/") || n == ".." {
				t.Fatalf("drop-in name %q accepted", n)
			}
		}
	})
}

// TestNixFactsParse: the facts the Nix side writes for the project's
// example configuration (testdata/fleet/example-facts.json, written by
// `scripts/nix-check.sh --update` from the module's stand-in evaluation)
// are facts this parser accepts, and the nodeprep config they carry is one
// nodeprep's own config parser accepts: the two halves of the fleet check
// agree on the schema and on the config keys the module writes.
func TestNixFactsParse(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(testkit.Testdata(t, "fleet", "example-facts.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFacts("example-facts.json", data)
	if err != nil {
		t.Fatalf("the Nix side's facts are refused: %v", err)
	}
	if f.Name == "" || len(f.K3s.UnitPath) == 0 || len(f.K3s.Args) == 0 {
		t.Errorf("parsed %+v: want a name, the unit's PATH and its arguments", f)
	}
	cfg, err := config.Parse("example-facts.json: nodeprep.configYaml", []byte(f.Nodeprep.ConfigYAML), config.Default("amd64"))
	if err != nil {
		t.Fatalf("the module's config.yaml is refused by nodeprep: %v", err)
	}
	if !slices.Equal(cfg.Join.K3sUnitPath, f.K3s.UnitPath) {
		t.Errorf("config join.k3sUnitPath = %q, facts k3s.unitPath = %q: want the same PATH", cfg.Join.K3sUnitPath, f.K3s.UnitPath)
	}
}

// TestParseFactsBoundsUnitPath: a k3s unit PATH of more directories than
// any unit has is refused, naming the bound (each is looked in, and named
// in the handler finding).
func TestParseFactsBoundsUnitPath(t *testing.T) {
	t.Parallel()
	dirs := make([]string, MaxUnitPath+1)
	for i := range dirs {
		dirs[i] = fmt.Sprintf(`"/nix/store/%032d-p/bin"`, i)
	}
	data := strings.Replace(string(goodFacts(t)), `"unitPath": [`, `"unitPath": [`+strings.Join(dirs, ",")+",", 1)
	_, err := ParseFacts("f.json", []byte(data))
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "k3s.unitPath") {
		t.Errorf("error %v, want malformed naming k3s.unitPath", err)
	}
}
