package cluster

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s with every byte or rune a terminal would not show
// as itself escaped: control characters (\n, \t, \x1b...), format
// characters including the bidirectional overrides and isolates (U+202E
// RIGHT-TO-LEFT OVERRIDE, Unicode category Cf), other non-printable runes
// (unicode.IsPrint) and invalid UTF-8 bytes, in Go's escape syntax
// (\u202e, \x1b, \xff); in a string that needs escapes, a backslash is
// doubled. Names from manifests (object names, file names, label keys) go
// through it before they are printed, so a name cannot reorder or hide the
// text around it. A string of printable runes comes back unchanged.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}
