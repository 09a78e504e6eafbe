package app

import (
	"encoding/json"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// print writes v to stdout in the --output format: text through the given
// function, json (indented) and yaml through their encoders.
func (g *globals) print(v any, text func(w io.Writer) error) error {
	w := g.streams.Out
	switch g.output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	}
	return text(w)
}

// count is n and noun, plural unless n is 1: "1 taint", "2 taints".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
