package app

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
)

// TestPlainHandler: one line per record in nodeprep's voice, levels as
// words, attributes as key=value (quoted when they hold spaces), groups as
// dotted keys, records below the level dropped.
func TestPlainHandler(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	log := newLogger(&b, slog.LevelInfo, false)
	log.Debug("hidden")
	log.Info("simulated server dgx-h200")
	log.Warn("the node has already registered", "evidence", "/var/lib/rancher/k3s/agent/client-kubelet.crt")
	log.With("stage", "cdi").WithGroup("spec").Error("stage failed", "err", errors.New("no ICD manifest"), "n", 2)
	want := `nodeprep: simulated server dgx-h200
nodeprep: warning: the node has already registered evidence=/var/lib/rancher/k3s/agent/client-kubelet.crt
nodeprep: error: stage failed stage=cdi spec.err="no ICD manifest" spec.n=2
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
