// Package yamlbound bounds what a YAML document expands to before any
// YAML decoder expands it.
//
// An alias (*a) stands for the whole node its anchor (&a) names, so a
// small document can stand for a huge one: a 212 KB k3s config.yaml whose
// 200 KB string is aliased 4,000 times is 800 MB once decoded. The YAML
// libraries nodeprep and its libraries decode with (go.yaml.in/yaml/v2,
// which k3s and sigs.k8s.io/yaml use, and v3, which the CDI library
// uses) guard only the ratio of aliases to decoded nodes, which one large
// aliased scalar passes, and offer no limit on the decoded size. So the
// bound is nodeprep's own: Check parses the document with yaml.v3 into
// yaml.Node values, which keep an alias as a pointer to its anchor's node
// and never copy it, and adds up what every node would expand to, each
// anchor's size computed once, in time linear in the document.
//
// The package is apart from nodeprep/bounded because it links yaml.v3,
// and the lean child that links nodeprep/bounded links the standard
// library only.
package yamlbound

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
)

// NodeCost is what ExpandedSize adds for every node besides its scalar's
// bytes, in bytes: about what a node costs written out as JSON (quotes, a
// comma, a colon), which is what sigs.k8s.io/yaml turns YAML into. It
// makes a flood of empty values count.
const NodeCost = 4

// MaxDepth is the deepest nesting, aliases expanded, that Check accepts:
// 10,000 levels, the depth yaml.v2's and yaml.v3's parsers accept in the
// text itself (max_flow_level, max_indents); only aliases of nested nodes
// placed in nested nodes go deeper, and a decoder recursing that deep
// could exhaust its stack, a fatal error no recover catches.
const MaxDepth = 10000

// aliasFree is the most an alias-free document expands to per byte of
// its text: every scalar's value is at most its text, and a node takes at
// least two thirds of a byte ("[?,?]": a mapping and its empty key and
// value for each "?,"), so 1 + 1.5*NodeCost = 7, with room (FuzzCheck
// checks the ratio). Estimate starts from it, and the limits are
// multiples of it.
const aliasFree = 8

// The expansion limits, in bytes of ExpandedSize: one per kind of YAML
// input, most of them aliasFree (8) times the kind's file limit in
// nodeprep/bounded, what the largest alias-free file of the kind could
// expand to, so that aliases let no file of the kind cost more than one
// without them could.
const (
	// MaxConfig is for the nodeprep config file: 8 MiB.
	MaxConfig = aliasFree * bounded.MaxConfig
	// MaxK3sConfig is for a k3s config file or drop-in: 8 MiB.
	MaxK3sConfig = aliasFree * bounded.MaxK3sConfig
	// MaxKubeconfig is for a kubeconfig: 8 MiB.
	MaxKubeconfig = aliasFree * bounded.MaxKubeconfig
	// MaxCDISpec is for a CDI spec: 128 MiB, 2 times bounded.MaxCDISpec
	// rather than 8: a spec is paths and names, not a flood of empty
	// values, and patching one takes about 4 times its size.
	MaxCDISpec = 2 * bounded.MaxCDISpec
	// MaxClusterDocument is for one document of a manifest stream:
	// 64 MiB, 4 times bounded.MaxClusterDocument, which is itself far
	// more than any manifest a person writes.
	MaxClusterDocument = 4 * bounded.MaxClusterDocument
)

// ErrExpands is returned (wrapped) by Check and CheckFirst for a document
// that expands past its limit or MaxDepth.
var ErrExpands = errors.New("YAML aliases expand it past its limit")

// Check returns an error wrapping ErrExpands, naming the document, its
// expanded size and the limit, when a document of the YAML stream data
// expands (ExpandedSize) to more than limit bytes or nests deeper than
// MaxDepth, aliases expanded; nil otherwise. Text without a '*' holds no
// alias and is accepted without parsing: it is what it expands to, at
// most aliasFree times its size, which its file's size limit bounds.
// Text yaml.v3 cannot parse is measured by Estimate; the decoder the
// caller runs next reports why it does not parse. Call it before every
// decoder, on the same bytes.
func Check(data []byte, limit int64) error {
	_, err := check(data, limit, false)
	return err
}

// CheckFirst is Check for the first document of data only: what
// yaml.v2's and yaml.v3's Unmarshal and sigs.k8s.io/yaml decode (k3s reads
// its config files that way), and never what follows it.
func CheckFirst(data []byte, limit int64) error {
	_, err := check(data, limit, true)
	return err
}

// Budget is what the documents of one input that hold aliases may
// expand to together (ExpandedSize): a manifest stream, the k3s config
// file and its drop-ins. Check bounds each document by its own limit
// only, so without it a stream of documents each just within that limit
// costs their number times it (60 manifests of a 20 KB string aliased
// 3,000 times, 1.9 MB of text, took 1.4 GiB). A document without an
// alias draws nothing: it is what it expands to, and its file's size
// limit bounds it. Not safe for concurrent use.
type Budget struct {
	limit, used int64
}

// NewBudget returns a Budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// CheckFirst is the package's CheckFirst(data, limit), and then draws
// what the first document of data expands to from b when it holds an
// alias. Errors: CheckFirst's, and one wrapping ErrExpands naming what
// the documents so far expand to and the budget when that is over it.
func (b *Budget) CheckFirst(data []byte, limit int64) error {
	size, err := check(data, limit, true)
	if err != nil {
		return err
	}
	return b.draw(size)
}

// Check is the package's Check(data, limit), and then draws what every
// document of data that holds an alias expands to from b. Errors as
// CheckFirst's.
func (b *Budget) Check(data []byte, limit int64) error {
	size, err := check(data, limit, false)
	if err != nil {
		return err
	}
	return b.draw(size)
}

// draw takes size from b: an error wrapping ErrExpands when that is more
// than b has left.
func (b *Budget) draw(size int64) error {
	b.used = addSat(b.used, size)
	if b.used > b.limit {
		return fmt.Errorf("the documents before it and this one expand to %s with their aliases, more than the %s all of them may expand to: %w",
			sizeText(b.used), sizeText(b.limit), ErrExpands)
	}
	return nil
}

// check is Check (or CheckFirst) that also returns what the documents
// holding an alias expand to, together: 0 for text without one (a '*'
// in a string or a comment is none), the estimate (Estimate) for text
// yaml.v3 cannot parse.
func check(data []byte, limit int64, firstOnly bool) (int64, error) {
	if bytes.IndexByte(data, '*') < 0 {
		return 0, nil // no alias: nothing expands past the text
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var total int64
	for n := 1; ; n++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			// yaml.v3 does not read it; the decoder the caller runs (k3s's
			// yaml.v2) may. Bound it by what its aliases could make.
			est := Estimate(data)
			if countAliases(data) == 0 {
				return total, nil
			}
			if est > limit {
				return 0, fmt.Errorf("YAML document %d does not parse as YAML 1.2, and its %d possible aliases could expand it to %s, more than the %s it may expand to: %w",
					n, countAliases(data), sizeText(est), sizeText(limit), ErrExpands)
			}
			return addSat(total, est), nil
		}
		var w walker
		size, depth := w.measure(&doc)
		if size > limit {
			return 0, fmt.Errorf("YAML document %d expands to %s with its aliases, more than the %s it may expand to (%d bytes of text): %w",
				n, sizeText(size), sizeText(limit), len(data), ErrExpands)
		}
		if depth > MaxDepth {
			return 0, fmt.Errorf("YAML document %d nests %d levels deep with its aliases, more than %d: %w", n, depth, MaxDepth, ErrExpands)
		}
		if w.aliases > 0 { // a '*' in a string or a comment is no alias
			total = addSat(total, size)
		}
		if firstOnly {
			return total, nil
		}
	}
}

// ExpandedSize returns what the first document of data expands to, in
// bytes: the bytes of every scalar plus NodeCost for every node, an alias
// counted as its anchor's node, and its deepest nesting, aliases
// expanded. Errors are yaml.v3's (text it cannot parse). An alias inside
// its own anchor (which every decoder refuses) counts as one node.
func ExpandedSize(data []byte) (size int64, depth int, err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return 0, 0, err
	}
	var w walker
	size, depth = w.measure(&doc)
	return size, depth, nil
}

// walker measures the graph of a parsed document: each node once,
// an alias by its anchor's memoised size, so the walk is linear in the
// nodes of the text however far they expand. Only anchored nodes are
// memoised: no other node is reached twice.
type walker struct {
	anchored map[*yaml.Node]measured
	aliases  int // the alias nodes met
}

type measured struct {
	size  int64
	depth int
}

// inProgress marks an anchored node whose measure is under way: an alias
// to it is an alias inside its own anchor.
var inProgress = measured{size: -1}

// measure returns n's expanded size (saturating at the largest int64)
// and depth.
func (w *walker) measure(n *yaml.Node) (int64, int) {
	if n == nil {
		return 0, 0
	}
	if n.Kind == yaml.AliasNode {
		w.aliases++
		if n.Alias == nil {
			return NodeCost, 1
		}
		n = n.Alias
	}
	if n.Anchor != "" {
		if m, ok := w.anchored[n]; ok {
			if m == inProgress {
				return NodeCost, 1 // the decoder refuses it
			}
			return m.size, m.depth
		}
		if w.anchored == nil {
			w.anchored = map[*yaml.Node]measured{}
		}
		w.anchored[n] = inProgress
	}
	size, depth := int64(NodeCost)+int64(len(n.Value)), 0
	for _, c := range n.Content {
		s, d := w.measure(c)
		size = addSat(size, s)
		depth = max(depth, d)
	}
	depth++
	if n.Anchor != "" {
		w.anchored[n] = measured{size, depth}
	}
	return size, depth
}

// addSat is a+b for non-negative sizes, the largest int64 when that
// overflows (a chain of aliases doubling 64 times).
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// Estimate returns an upper bound of what YAML text data (that yaml.v3
// may not parse) could expand to, in ExpandedSize's bytes, without parsing
// it: aliasFree times its size, doubled for every '*' that could begin an
// alias (at the start of a line or after white space or one of "[{,:-?").
// Each alias copies a node that precedes it, whose expansion is at most
// everything expanded before it, so each at most doubles the whole.
func Estimate(data []byte) int64 {
	est := aliasFree * int64(len(data))
	for range countAliases(data) {
		if est > 1<<62 {
			return 1<<63 - 1
		}
		est *= 2
	}
	return est
}

// countAliases counts the '*' of data that could begin an alias.
func countAliases(data []byte) int {
	n := 0
	for i, c := range data {
		if c != '*' {
			continue
		}
		if i == 0 {
			n++
			continue
		}
		switch data[i-1] {
		case ' ', '\t', '\n', '\r', '[', '{', ',', ':', '-', '?':
			n++
		}
	}
	return n
}

// sizeText writes a size in bytes, KiB or MiB, as a person reads it.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
