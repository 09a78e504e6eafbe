// Package config is nodeprep's config file (/etc/nodeprep/config.yaml,
// docs/config.md): its Go shape, the defaults, and the strict parse
// (YAML, unknown keys refused with the dotted key and a "did you mean",
// values validated with the rules of the packages they feed). Every field
// has a command-line flag that overrides it; the command layer merges the
// two. It parses bytes it is given and reads no file itself.
package config
