package upstream_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealPrometheusScrapesTextfile: Prometheus, through node_exporter's
// textfile collector, sees a metrics file as nodeprep writes it, with the
// target's labels, and follows it when it is rewritten.
func TestRealPrometheusScrapesTextfile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(v string) {
		t.Helper()
		tmp := filepath.Join(dir, ".nodeprep.prom.tmp")
		if err := os.WriteFile(tmp, []byte("# TYPE nodeprep_ready gauge\nnodeprep_ready "+v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "nodeprep.prom")); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	addr := upstream.StartNodeExporter(t, dir)
	prom := upstream.StartPrometheus(t, upstream.ScrapeTarget{Job: "nodeprep", Address: addr, Labels: map[string]string{"pool": "gpu"}})
	for _, want := range []float64{1, 0} {
		if want == 0 {
			write("0")
		}
		took := prom.Wait(t, "nodeprep_ready", time.Minute, func(q func(string) ([]upstream.Sample, error)) bool {
			s, err := q(`nodeprep_ready{job="nodeprep",pool="gpu"}`)
			return err == nil && len(s) == 1 && s[0].Value == want
		})
		t.Logf("nodeprep_ready %v seen in %s", want, took.Round(time.Millisecond))
	}
	if _, err := prom.Query("nodeprep_ready{"); err == nil {
		t.Error("a query Prometheus cannot parse returned no error")
	}
}

// TestRealRabbitMQQueue: a private RabbitMQ node takes messages on a queue
// and gives them back, and Prometheus scraping its metrics endpoint counts
// the messages waiting on that queue.
func TestRealRabbitMQQueue(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := upstream.StartRabbitMQ(t)
	t.Logf("RabbitMQ answered after %s", time.Since(start).Round(time.Millisecond))
	r.DeclareQueue(t, "work")
	r.DeclareQueue(t, "other")
	r.Publish(t, "work", 3)
	r.Publish(t, "other", 7)
	prom := upstream.StartPrometheus(t, upstream.ScrapeTarget{Job: "rabbitmq", Address: r.Metrics})
	ready := func(want float64) {
		t.Helper()
		took := prom.Wait(t, "the queue's ready messages", time.Minute, func(q func(string) ([]upstream.Sample, error)) bool {
			s, err := q(`rabbitmq_queue_messages_ready{queue="work"}`)
			return err == nil && len(s) == 1 && s[0].Value == want
		})
		t.Logf("rabbitmq_queue_messages_ready{queue=\"work\"} %v seen in %s", want, took.Round(time.Millisecond))
	}
	ready(3)
	if got := r.Get(t, "work", 2); got != 2 {
		t.Errorf("got %d messages, want 2", got)
	}
	ready(1)
	r.Purge(t, "work")
	if got := r.Get(t, "work", 5); got != 0 {
		t.Errorf("after a purge: got %d messages, want 0", got)
	}
}
