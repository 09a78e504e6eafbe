package app

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

// flagValues are the flags whose values are a closed set: shell completion
// offers exactly these (the same lists the flags' checks accept).
func flagValues() map[string][]string {
	return map[string][]string{
		"simulate":            gpu.SimulatedNames(),
		"output":              {"text", "json", "yaml"},
		"device-names":        {nodepolicy.DeviceNameUUID, nodepolicy.DeviceNameIndex},
		"on-selftest-failure": {nodepolicy.PolicyBlock, nodepolicy.PolicyTaint},
		"mig-strategy":        {nodepolicy.MIGStrategyNone, nodepolicy.MIGStrategySingle, nodepolicy.MIGStrategyMixed},
		"arch":                knownArches,
	}
}

// fileFlags name files (completed as paths, with these extensions when
// any); dirFlags name directories. Both are host paths (or, for --root, the
// host root itself).
var (
	fileFlags = map[string][]string{
		"config": {"yaml", "yml"}, "spec": {"json", "yaml"}, "k3s-config": {"yaml", "yml"},
		"nvml-lib": nil, "vulkan-loader": nil, "egl-lib": nil, "cuda-lib": nil, "oci-runtime": nil,
		"status-file": {"json"}, "metrics-file": {"prom"}, "k3s-env-file": nil,
	}
	dirFlags = []string{"root", "driver-root", "glvnd-dir", "rootfs", "spec-dir", "k3s-data-dir"}
)

// registerCompletions gives every flag of root and its commands real
// candidates for `nodeprep completion bash|zsh|fish`: the closed sets of
// flagValues, paths for file and directory flags, and no file names where
// a command takes no arguments.
func registerCompletions(root *cobra.Command) {
	values := flagValues()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Args != nil && c.ValidArgsFunction == nil && !c.HasSubCommands() {
			c.ValidArgsFunction = noFileCompletion
		}
		fs := c.LocalNonPersistentFlags()
		if c == root {
			fs = c.PersistentFlags()
		}
		for name, list := range values {
			if fs.Lookup(name) != nil {
				_ = c.RegisterFlagCompletionFunc(name, listCompletion(list, name == "device-names"))
			}
		}
		for name, exts := range fileFlags {
			if f := fs.Lookup(name); f != nil {
				_ = c.MarkFlagFilename(name, exts...)
			}
		}
		for _, name := range dirFlags {
			if fs.Lookup(name) != nil {
				_ = c.MarkFlagDirname(name)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func noFileCompletion(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// listCompletion completes one value of list; with commaList, the value is
// a comma-separated list (--device-names uuid,index) and the candidates
// continue what is already typed.
func listCompletion(list []string, commaList bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		prefix := ""
		if i := strings.LastIndex(toComplete, ","); commaList && i >= 0 {
			prefix = toComplete[:i+1]
		}
		var out []cobra.Completion
		for _, v := range list {
			if commaList && strings.Contains(","+prefix, ","+v+",") {
				continue // already in the list
			}
			out = append(out, prefix+v)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
