package nodeprep

import "fmt"

// count is n and noun, plural unless n is 1: "1 taint", "2 taints".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
