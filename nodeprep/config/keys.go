package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"
)

// checkKeys walks a config document against t (Config's type) and returns
// one error per key Config does not have, named by its dotted path and,
// when a known key is close, the key it probably meant:
// "unknown key selftest.timout (did you mean timeout?)". yaml.v3's own
// KnownFields error names the Go type instead ("field timout not found in
// type config.SelftestConfig"), which the user never wrote; keys maps each
// value's line to its dotted key for typeErrors.
func checkKeys(n *yaml.Node, t reflect.Type, prefix string, keys map[int]string) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.DocumentNode {
		var errs []error
		for _, c := range n.Content {
			errs = append(errs, checkKeys(c, t, prefix, keys)...)
		}
		return errs
	}
	if n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Duration(0)) {
		return nil // a type mismatch: the decoder reports it (typeErrors)
	}
	fields := yamlFields(t)
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := prefix + k.Value
		keys[v.Line] = key
		ft, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("line %d: unknown key %s", k.Line, key)
			if s := closest(k.Value, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		errs = append(errs, checkKeys(v, ft, key+".", keys)...)
	}
	return errs
}

// yamlFields maps a struct's YAML keys (yaml.v3's rules: the tag's name,
// else the lowercased field name; ",inline" structs merged) to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// closest returns the known key nearest to key when it is a plausible typo
// (edit distance at most 2, or equal ignoring case), else "".
func closest(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 3
	for k := range fields {
		d := levenshtein.ComputeDistance(strings.ToLower(key), strings.ToLower(k))
		if d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	return best
}

// typeLine matches one of yaml.v3's TypeError lines:
// "line 2: cannot unmarshal !!str `five` into time.Duration".
var typeLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
})

// typeErrors rewrites yaml.v3's type errors in the user's words: the dotted
// key and what it wants ("line 2: selftest.timeout wants a duration such as
// 30s, not \"five\""), never a Go type name.
func typeErrors(te *yaml.TypeError, keys map[int]string) error {
	var errs []error
	for _, e := range te.Errors {
		m := typeLine().FindStringSubmatch(e)
		if m == nil {
			errs = append(errs, errors.New(e))
			continue
		}
		var line int
		fmt.Sscan(m[1], &line)
		key := keys[line]
		if key == "" {
			key = "a value"
		}
		got := map[string]string{"map": "a mapping", "seq": "a list", "str": "a string", "int": "a number", "float": "a number", "bool": "true or false", "null": "empty"}[m[2]]
		if m[3] != "" {
			got = strconv.Quote(m[3])
		} else if got == "" {
			got = "a " + m[2]
		}
		errs = append(errs, fmt.Errorf("line %d: %s wants %s, not %s", line, key, wantWords(m[4]), got))
	}
	return errors.Join(errs...)
}

// wantWords says what a Go type holds, for typeErrors.
func wantWords(goType string) string {
	switch goType {
	case "time.Duration":
		return "a duration such as 30s"
	case "bool", "*bool":
		return "true or false"
	case "string":
		return "a string"
	case "[]string":
		return "a list of strings"
	case "int", "int64", "uint32", "float64":
		return "a number"
	}
	if strings.HasPrefix(goType, "[]") {
		return "a list"
	}
	return "a mapping of keys"
}
