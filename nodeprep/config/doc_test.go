package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestConfigDocListsEveryKey: the defaults block of docs/config.md is a
// config file Parse accepts, and it names every key Config has, so
// the page cannot fall behind the code.
func TestConfigDocListsEveryKey(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/config.md has no yaml block")
	}
	block := string(m[1])
	if _, err := Parse("docs/config.md", []byte(block), Default("amd64")); err != nil {
		t.Fatalf("docs/config.md's defaults are not a valid config: %v", err)
	}
	var missing []string
	var walk func(t reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for key, ft := range yamlFields(typ) {
			path := prefix + key
			if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(key) + `:`).MatchString(block) {
				missing = append(missing, path)
			}
			if ft.Kind() == reflect.Struct && ft.String() != "time.Duration" {
				walk(ft, path+".")
			}
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	if len(missing) > 0 {
		t.Errorf("docs/config.md does not list %s", strings.Join(missing, ", "))
	}
}
