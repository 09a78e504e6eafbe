package generate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// ErrNotModelled marks arguments, toolkit versions or hosts the model does
// not cover (a --mode other than auto or nvml, MIG devices, --device-id,
// ...): the prediction would be a guess, so there is none. It is marked
// fault.Malformed (exit 65).
var ErrNotModelled = errors.New("not modelled by nodeprep's generator model")

// ErrRejected marks arguments the real nvidia-ctk of that version refuses
// (an unknown flag, a bad value): on a node the generator unit fails and
// writes no spec. It is marked fault.Malformed (exit 65).
var ErrRejected = errors.New("the generator refuses its arguments")

// Toolkit is a modelled toolkit release line.
type Toolkit int

// The toolkit release lines the model follows, each checked against the
// real nvidia-ctk of the tools module named (testdata/tools).
const (
	// V117 is nvidia-container-toolkit 1.17.x (tools module
	// nvidia-container-toolkit-1.17, v1.17.8): urfave/cli v2 flags, hooks
	// through nvidia-ctk or nvidia-cdi-hook, device nodes by path only.
	V117 Toolkit = 117
	// V120 is nvidia-container-toolkit 1.20.x (tools module
	// nvidia-container-toolkit-1.20, v1.20.2): --disable-hook,
	// --no-all-device, device nodes with their numbers, the
	// disable-device-node-modification, update-application-profile and
	// apply-cuda-memory-limits hooks.
	V120 Toolkit = 120
)

// ParseToolkit maps a toolkit version ("1.17.8", "1.20.2") to its release
// line. Versions outside 1.17.x and 1.20.x give an error wrapping
// ErrNotModelled.
func ParseToolkit(version string) (Toolkit, error) {
	v := strings.TrimPrefix(version, "v")
	parts := strings.Split(v, ".")
	if len(parts) >= 2 && parts[0] == "1" {
		switch parts[1] {
		case "17":
			return V117, nil
		case "20":
			return V120, nil
		}
	}
	return 0, fault.Malformed(fmt.Errorf("toolkit version %q: %w (only 1.17.x and 1.20.x are)", version, ErrNotModelled))
}

// Options are the `nvidia-ctk cdi generate` settings the model reads,
// after ParseArgs. Zero values are the generator's defaults where it has
// one.
type Options struct {
	// Format is "json" or "yaml" (--format, or the --output file's
	// extension when --format is not given; default yaml).
	Format string
	// Output is --output ("" for stdout). The model does not write it.
	Output string
	// NameStrategies are the --device-name-strategy values in order
	// (index, uuid, type-index; default index and uuid).
	NameStrategies []string
	// NoAllDevice is --no-all-device (1.20 only).
	NoAllDevice bool
	// DisabledHooks and EnabledHooks are --disable-hook and --enable-hook
	// (1.20 only); "all" disables every hook.
	DisabledHooks []string
	EnabledHooks  []string // see DisabledHooks
	// LdconfigPath is --ldconfig-path, put in the update-ldcache hook.
	LdconfigPath string
	// LibrarySearchPaths are --library-search-path's directories.
	LibrarySearchPaths []string
	// HookPath is --nvidia-cdi-hook-path (alias --nvidia-ctk-path); empty
	// means the generator looks nvidia-cdi-hook up on its PATH, which the
	// model refuses (ErrNotModelled).
	HookPath string
	// DriverRoot is --driver-root ("" or "/"; the model covers no other).
	DriverRoot string
	// Vendor and Class make the spec's kind (default nvidia.com/gpu).
	Vendor string
	Class  string // see Vendor
}

// flag describes one `cdi generate` flag: its names, whether it takes a
// value, whether it is a list, and the release lines that have it.
type flag struct {
	names []string
	kind  int // flagString, flagList, flagBool
	since Toolkit
	set   func(o *Options, v string) error
}

const (
	flagString = iota
	flagList
	flagBool
)

// flags lists the generate command's flags of both release lines
// (cmd/nvidia-ctk/cdi/generate/generate.go at v1.17.8 and v1.20.2). A nil
// set is a flag the model refuses.
var flags = []flag{
	{names: []string{"format"}, kind: flagString, since: V117, set: func(o *Options, v string) error {
		v = strings.ToLower(v)
		if v != "json" && v != "yaml" {
			return fmt.Errorf("invalid output format: %v", v)
		}
		o.Format = v
		return nil
	}},
	{names: []string{"output"}, kind: flagString, since: V117, set: func(o *Options, v string) error { o.Output = v; return nil }},
	{names: []string{"mode", "discovery-mode"}, kind: flagString, since: V117, set: func(o *Options, v string) error {
		switch strings.ToLower(v) {
		case "auto", "nvml":
			return nil
		case "csv", "wsl", "management", "gds", "mofed", "imex", "gdrcopy", "nvswitch":
			return notModelled("--mode %s (only auto and nvml, as on a NixOS host with NVML)", v)
		}
		return fmt.Errorf("invalid discovery mode: %v", v)
	}},
	{names: []string{"device-name-strategy"}, kind: flagList, since: V117, set: func(o *Options, v string) error {
		switch v {
		case "index", "uuid", "type-index":
			o.NameStrategies = append(o.NameStrategies, v)
			return nil
		}
		return fmt.Errorf("invalid device name strategy: %v", v)
	}},
	{names: []string{"driver-root"}, kind: flagString, since: V117, set: func(o *Options, v string) error {
		if v != "" && v != "/" {
			return notModelled("--driver-root %s (only the host's /)", v)
		}
		o.DriverRoot = v
		return nil
	}},
	{names: []string{"dev-root"}, kind: flagString, since: V117, set: func(o *Options, v string) error {
		if v != "" && v != "/" {
			return notModelled("--dev-root %s (only the host's /)", v)
		}
		return nil
	}},
	{names: []string{"library-search-path"}, kind: flagList, since: V117, set: func(o *Options, v string) error {
		if !filepath.IsAbs(v) {
			return notModelled("--library-search-path %q (only absolute directories)", v)
		}
		o.LibrarySearchPaths = append(o.LibrarySearchPaths, v)
		return nil
	}},
	{names: []string{"nvidia-cdi-hook-path", "nvidia-ctk-path"}, kind: flagString, since: V117, set: func(o *Options, v string) error { o.HookPath = v; return nil }},
	{names: []string{"ldconfig-path"}, kind: flagString, since: V117, set: func(o *Options, v string) error { o.LdconfigPath = v; return nil }},
	{names: []string{"vendor", "cdi-vendor"}, kind: flagString, since: V117, set: func(o *Options, v string) error { o.Vendor = v; return nil }},
	{names: []string{"class", "cdi-class"}, kind: flagString, since: V117, set: func(o *Options, v string) error { o.Class = v; return nil }},
	{names: []string{"config-search-path"}, kind: flagList, since: V117},
	{names: []string{"csv.file"}, kind: flagList, since: V117},
	{names: []string{"csv.ignore-pattern"}, kind: flagList, since: V117},
	{names: []string{"csv.compat-container-root"}, kind: flagString, since: V120},
	{names: []string{"disable-hook", "disable-hooks"}, kind: flagList, since: V120, set: func(o *Options, v string) error {
		o.DisabledHooks = append(o.DisabledHooks, v)
		return nil
	}},
	{names: []string{"enable-hook", "enable-hooks"}, kind: flagList, since: V120, set: func(o *Options, v string) error {
		if v == "all" {
			return errors.New("enabling all hooks is not supported")
		}
		o.EnabledHooks = append(o.EnabledHooks, v)
		return nil
	}},
	{names: []string{"feature-flag", "feature-flags"}, kind: flagList, since: V120},
	{names: []string{"no-all-device"}, kind: flagBool, since: V120, set: func(o *Options, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("invalid value %q for flag -no-all-device: %v", v, err)
		}
		o.NoAllDevice = b
		return nil
	}},
	{names: []string{"device-id", "device-ids", "device", "devices"}, kind: flagList, since: V120, set: func(o *Options, v string) error {
		if v != "all" {
			return notModelled("--device-id %s (only all)", v)
		}
		return nil
	}},
}

func notModelled(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrNotModelled)
}

func lookupFlag(name string) *flag {
	for i := range flags {
		for _, n := range flags[i].names {
			if n == name {
				return &flags[i]
			}
		}
	}
	return nil
}

// ParseArgs parses args, the arguments after `nvidia-ctk cdi generate`, as
// the toolkit line tk's command line does (urfave/cli: --name value,
// --name=value, a single dash alike; a list flag repeated or
// comma-separated replaces its default; a boolean takes no separate value;
// parsing stops at "--"; a positional argument, which would end the flags
// there, is not modelled). Errors are marked
// fault.Malformed and wrap ErrRejected (the real generator fails on them)
// or ErrNotModelled (a setting the model does not cover).
func ParseArgs(tk Toolkit, args []string) (Options, error) {
	o, err := parseArgs(tk, args)
	if err != nil {
		if !errors.Is(err, ErrNotModelled) {
			err = fmt.Errorf("%w: %w", ErrRejected, err)
		}
		return Options{}, fault.Malformed(fmt.Errorf("nvidia-ctk cdi generate arguments: %w", err))
	}
	return o, nil
}

func parseArgs(tk Toolkit, args []string) (Options, error) {
	if tk != V117 && tk != V120 {
		return Options{}, notModelled("toolkit line %d", tk)
	}
	var o Options
	formatSet := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return o, notModelled("arguments after --: %q (the generator ignores them)", args[i+1:])
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return o, notModelled("positional argument %q (the generator stops reading flags there and ignores the rest)", a)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		value, hasValue := "", false
		if n, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = n, v, true
		}
		f := lookupFlag(name)
		if f == nil || f.since > tk {
			return o, fmt.Errorf("flag provided but not defined: -%s", name)
		}
		if f.kind == flagBool {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return o, fmt.Errorf("flag needs an argument: -%s", name)
			}
			i++
			value = args[i]
		}
		if f.set == nil {
			return o, notModelled("--%s", name)
		}
		if name == "format" {
			formatSet = true
		}
		values := []string{value}
		if f.kind == flagList {
			values = strings.Split(value, ",")
		}
		for _, v := range values {
			if f.kind == flagList {
				v = strings.TrimSpace(v)
			}
			if err := f.set(&o, v); err != nil {
				return o, err
			}
		}
	}
	if o.NameStrategies == nil {
		o.NameStrategies = []string{"index", "uuid"}
	}
	if !formatSet {
		o.Format = "yaml"
		switch strings.ToLower(filepath.Ext(o.Output)) {
		case ".json":
			o.Format = "json"
		}
	}
	if o.Vendor == "" {
		o.Vendor = "nvidia.com"
	}
	if o.Class == "" {
		o.Class = "gpu"
	}
	if err := validName(o.Vendor, true); err != nil {
		return o, fmt.Errorf("invalid CDI vendor name: %v", err)
	}
	if err := validName(o.Class, false); err != nil {
		return o, fmt.Errorf("invalid CDI class name: %v", err)
	}
	if o.HookPath == "" {
		return o, notModelled("no --nvidia-cdi-hook-path (the generator would look nvidia-cdi-hook up on its own PATH)")
	}
	if len(o.LibrarySearchPaths) == 0 {
		return o, notModelled("no --library-search-path (the generator would search the FHS library directories and the ld.so.cache, which a NixOS host does not use)")
	}
	return o, nil
}

// validName checks a CDI vendor or class name as the CDI library's
// ValidateVendorName/ValidateClassName do (pkg/parser in
// container-device-interface): letters and digits at both ends, with '-',
// '_' and, in a vendor, '.' between.
func validName(s string, vendor bool) error {
	if s == "" {
		return errors.New("empty name")
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return fmt.Errorf("%q: must start and end with a letter or digit", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if alnum(c) || c == '-' || c == '_' || vendor && c == '.' {
			continue
		}
		return fmt.Errorf("%q: invalid character %q", s, c)
	}
	return nil
}
