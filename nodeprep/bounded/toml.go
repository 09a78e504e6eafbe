package bounded

// The TOML nesting bound. github.com/BurntSushi/toml, which nodeprep
// decodes containerd's and the NVIDIA runtime's configs with, recurses
// once per nested array or inline table with no limit, so a 2 MB config of
// "[[[[…" overflows the Go stack: a fatal error that no recover catches,
// which would end every nodeprep run (and a boot) on one bad file. It also
// spends time and memory quadratic in the parts of a dotted key or table
// header (a 40 KB key "x.a.a.a…" took 36 s and 6.6 GB). No TOML library
// offers such limits, so this scan is nodeprep's own: it counts brackets
// and braces, and the dots of each line, outside strings and comments, as
// the TOML 1.0 grammar delimits them, and refuses a document over either
// limit.

import "fmt"

// MaxTOMLDepth is the deepest nesting of arrays and inline tables (table
// headers included) CheckTOML accepts, in levels: 64. containerd's and
// the NVIDIA runtime's configs nest three or four levels deep.
const MaxTOMLDepth = 64

// MaxTOMLDots is the most dots a TOML line may hold outside strings and
// comments: 64. A key cannot span lines, so this bounds the parts of
// every dotted key and table header (containerd's longest has about six);
// a line of floats has one dot each.
const MaxTOMLDots = 64

// CheckTOML returns an error naming the line when data (a TOML document)
// nests arrays or inline tables deeper than MaxTOMLDepth or holds a line
// with more than MaxTOMLDots dots outside strings and comments, and nil
// otherwise (also for a document that is not valid TOML: the decoder
// reports that). Call it before the decoder. It reads data once, in
// O(len(data)) time and constant memory.
func CheckTOML(data []byte) error {
	depth, line, dots := 0, 1, 0
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '\n':
			line++
			dots = 0
		case '.':
			dots++
			if dots > MaxTOMLDots {
				return fmt.Errorf("line %d: more than %d dots outside strings (a dotted key or table header of that many parts)", line, MaxTOMLDots)
			}
		case '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i-- // the newline is counted by the loop
		case '"', '\'':
			end, lines := skipTOMLString(data, i)
			line += lines
			i = end
		case '[', '{':
			depth++
			if depth > MaxTOMLDepth {
				return fmt.Errorf("line %d: arrays and inline tables nested more than %d deep", line, MaxTOMLDepth)
			}
		case ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// skipTOMLString returns the index of the last byte of the string that starts
// at data[i] (a quote) and how many newlines it holds: a basic string
// "…" (backslash escapes), a literal string '…', or their multi-line
// forms """…""" and ”'…”'. An unterminated string runs to the end.
func skipTOMLString(data []byte, i int) (end, lines int) {
	q := data[i]
	multi := i+2 < len(data) && data[i+1] == q && data[i+2] == q
	j := i + 1
	if multi {
		j = i + 3
	}
	for ; j < len(data); j++ {
		c := data[j]
		switch {
		case c == '\\' && q == '"':
			if j+1 < len(data) && data[j+1] == '\n' {
				lines++
			}
			j++
		case c == '\n':
			lines++
			if !multi {
				return j - 1, lines - 1 // a one-line string ends at the line's end; the loop counts the newline
			}
		case c == q && !multi:
			return j, lines
		case c == q && j+2 < len(data) && data[j+1] == q && data[j+2] == q:
			// Up to two more quotes may close it (""""" is '""' + close).
			k := j + 3
			for n := 0; n < 2 && k < len(data) && data[k] == q; n++ {
				k++
			}
			return k - 1, lines
		}
	}
	return len(data) - 1, lines
}
