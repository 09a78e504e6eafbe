package app

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/cdi/specwatch"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

// pathFlags are the flags that name host paths (under --root): they must
// be absolute. --rootfs is not one: it names a directory on this machine,
// and a relative one is taken from the working directory (containerFlags).
var pathFlags = []string{"spec", "spec-dir", "driver-root", "glvnd-dir", "k3s-config", "k3s-data-dir", "k3s-env-file", "status-file", "metrics-file"}

// knownArches are the GOARCH values nodeprep knows the ICD manifest name and
// multiarch directory of (the architectures NVIDIA ships Linux drivers for).
var knownArches = []string{"amd64", "arm64"}

// checkFlags validates the values the flag types cannot, for the flags given
// on the command line: the same rules config.Config.Validate applies to
// the config file, but a bad flag is a usage error (exit 2), checked before
// anything is read or written.
func checkFlags(fs *pflag.FlagSet) error {
	var errs []error
	for _, name := range pathFlags {
		f := fs.Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		values := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			values = sv.GetSlice()
		}
		for _, v := range values {
			if !path.IsAbs(v) {
				errs = append(errs, fmt.Errorf("--%s %q: want an absolute path", name, v))
			}
		}
	}
	if f := fs.Lookup("device-names"); f != nil && f.Changed {
		if err := nodepolicy.CheckDeviceNames(f.Value.(pflag.SliceValue).GetSlice()); err != nil {
			errs = append(errs, fmt.Errorf("--device-names: %w", err))
		}
	}
	if f := fs.Lookup("on-selftest-failure"); f != nil && f.Changed {
		if err := nodepolicy.CheckPolicy(f.Value.String()); err != nil {
			errs = append(errs, fmt.Errorf("--on-selftest-failure: %w", err))
		}
	}
	if f := fs.Lookup("arch"); f != nil && f.Changed && !slices.Contains(knownArches, f.Value.String()) {
		errs = append(errs, fmt.Errorf("--arch %q: want one of %s", f.Value.String(), strings.Join(knownArches, ", ")))
	}
	if f := fs.Lookup("wait"); f != nil && f.Changed {
		if d, err := time.ParseDuration(f.Value.String()); err != nil || d < 0 || d > config.MaxWait {
			errs = append(errs, fmt.Errorf("--wait %s: want a duration from 0 to %s, such as 30s", f.Value.String(), config.ShortDuration(config.MaxWait)))
		}
	}
	if f := fs.Lookup("settle"); f != nil && f.Changed {
		d, err := time.ParseDuration(f.Value.String())
		if err == nil {
			err = specwatch.CheckSettle(d)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--settle %s: %w", f.Value.String(), err))
		}
	}
	if f := fs.Lookup("drop-in"); f != nil && f.Changed {
		if err := k3s.CheckDropInName(f.Value.String()); err != nil {
			errs = append(errs, fmt.Errorf("--drop-in: %w", err))
		}
	}
	return fault.Usage(errors.Join(errs...))
}
