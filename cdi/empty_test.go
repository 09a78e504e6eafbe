package cdi

import (
	"strings"
	"testing"
)

// TestParseSpecEmpty: an empty spec (a generator stopped before it wrote
// anything) is named as such, not as the decoder's "EOF".
func TestParseSpecEmpty(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", " \n\t\n"} {
		_, err := ParseSpec([]byte(data))
		if err == nil || !strings.Contains(err.Error(), "the file is empty") {
			t.Errorf("%q: %v, want an error saying the file is empty", data, err)
		}
	}
}
