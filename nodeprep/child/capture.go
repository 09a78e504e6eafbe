package child

import (
	"fmt"
	"strings"
)

// Capture keeps a bounded record of what a child printed: the first Head
// bytes and the last Tail bytes, and counts the rest. It implements only
// io.Writer on purpose: a type with a ReadFrom method (bytes.Buffer, and
// any struct that embeds one) is filled by io.Copy through ReadFrom, which
// bypasses Write and with it any cap. The zero value keeps 16 KiB of each.
type Capture struct {
	Head, Tail int // bytes kept from the start and from the end (0: 16 KiB)

	head    []byte
	ring    []byte // the last Tail bytes, circular
	pos     int    // next write position in ring
	full    bool   // ring has wrapped
	dropped int64  // bytes neither in head nor in ring
	total   int64
}

const defaultKeep = 16 << 10

// Write keeps what fits in the head and the tail and reports every byte
// taken; it never fails and never allocates more than Head+Tail bytes.
func (c *Capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	head := c.Head
	if head <= 0 {
		head = defaultKeep
	}
	if room := head - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	tail := c.Tail
	if tail <= 0 {
		tail = defaultKeep
	}
	if c.ring == nil {
		c.ring = make([]byte, tail)
	}
	for len(p) > 0 {
		k := copy(c.ring[c.pos:], p)
		p = p[k:]
		c.pos += k
		if c.pos == len(c.ring) {
			c.pos, c.full = 0, true
		}
	}
	kept := int64(len(c.head))
	if c.full {
		kept += int64(len(c.ring))
	} else {
		kept += int64(c.pos)
	}
	c.dropped = c.total - kept
	return n, nil
}

// Total is the number of bytes written.
func (c *Capture) Total() int64 { return c.total }

// String is what was kept: the head, then "[… N bytes left out …]" when
// something was dropped, then the tail.
func (c *Capture) String() string {
	var b strings.Builder
	b.Write(c.head)
	if c.dropped > 0 {
		fmt.Fprintf(&b, "\n[… %d bytes left out …]\n", c.dropped)
	}
	if c.full {
		b.Write(c.ring[c.pos:])
	}
	b.Write(c.ring[:c.pos])
	return b.String()
}
