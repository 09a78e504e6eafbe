package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// newLogger returns the logger every command logs through. In text mode on
// a terminal (the default) it writes one plain line per record in nodeprep's
// voice, "nodeprep: warning: …" / "nodeprep: error: …", as nvidia-ctk and
// kubectl do. With -v, or when stderr is the journal (systemd sets
// JOURNAL_STREAM, systemd.exec(5)), it writes slog's structured key=value
// form, which keeps the attributes machine-readable.
func newLogger(w io.Writer, level slog.Level, structured bool) *slog.Logger {
	if structured {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(&plainHandler{w: w, level: level, mu: &sync.Mutex{}})
}

// plainHandler is a slog.Handler for people: "nodeprep: LEVEL: msg k=v".
// slog ships only structured handlers, so this one is ours.
type plainHandler struct {
	w      io.Writer
	level  slog.Level
	mu     *sync.Mutex // shared by the handlers WithAttrs derives: one writer
	attrs  []slog.Attr
	prefix string // group prefix for attribute keys
}

// levelWord is the word after "nodeprep: " for a record's level; info
// records have none.
func levelWord(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error: "
	case l >= slog.LevelWarn:
		return "warning: "
	case l < slog.LevelInfo:
		return "debug: "
	}
	return ""
}

// Enabled reports whether records at l are written.
func (h *plainHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

// Handle writes one line for r.
func (h *plainHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("nodeprep: ")
	b.WriteString(levelWord(r.Level))
	b.WriteString(r.Message)
	write := func(prefix string, a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		v := a.Value.String()
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s%s=%s", prefix, a.Key, v)
	}
	for _, a := range h.attrs { // keys already carry their group prefix
		write("", a)
	}
	r.Attrs(func(a slog.Attr) bool { write(h.prefix, a); return true })
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs returns a handler that writes attrs on every line.
func (h *plainHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	for i := range c.attrs[len(h.attrs):] {
		c.attrs[len(h.attrs)+i].Key = h.prefix + c.attrs[len(h.attrs)+i].Key
	}
	return &c
}

// WithGroup returns a handler that prefixes later attribute keys with name.
func (h *plainHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}
