package child

import (
	"io"
	"strings"
	"testing"
)

// TestCaptureBounded: io.Copy of 64 MiB into a Capture keeps Head+Tail
// bytes and says how much it left out. A Capture must not be an
// io.ReaderFrom: io.Copy would then bypass Write and its bound (the
// fault that made the old 64 KiB cap a no-op).
func TestCaptureBounded(t *testing.T) {
	t.Parallel()
	if _, ok := any(&Capture{}).(io.ReaderFrom); ok {
		t.Fatal("Capture implements io.ReaderFrom: io.Copy would bypass its bound")
	}
	c := &Capture{Head: 10, Tail: 10}
	src := io.MultiReader(strings.NewReader("HEAD-START"), io.LimitReader(zeros{}, 64<<20), strings.NewReader("TAIL--END!"))
	n, err := io.Copy(c, src)
	if err != nil || n != 64<<20+20 || c.Total() != n {
		t.Fatalf("io.Copy = %d, %v; Total %d", n, err, c.Total())
	}
	want := "HEAD-START\n[… 67108864 bytes left out …]\nTAIL--END!"
	if got := c.String(); got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	small := &Capture{}
	_, _ = small.Write([]byte("short"))
	if small.String() != "short" {
		t.Fatalf("String of a short output = %q", small.String())
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}
