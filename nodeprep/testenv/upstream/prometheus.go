package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Debian programs the failover tests scrape nodeprep's metrics with
// (scripts/install-deps.sh's test set installs them; their system services
// are never used: each test runs its own on loopback ports).
const (
	// PrometheusProgram is Debian's prometheus (package prometheus).
	PrometheusProgram = "prometheus"
	// NodeExporterProgram is Debian's node_exporter (package
	// prometheus-node-exporter), whose textfile collector is how
	// nodeprep's metrics file is meant to be scraped.
	NodeExporterProgram = "prometheus-node-exporter"
)

// Debian returns the path of program from a Debian package, or marks t
// Unavailable (a skip, a failure under CI) naming the package that
// scripts/install-deps.sh installs.
func Debian(t testing.TB, program, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		Unavailable(t, fmt.Errorf("%s (Debian package %s; make deps installs it): %w", program, pkg, err))
	}
	return p
}

// StartNodeExporter runs node_exporter with only its textfile collector,
// reading the *.prom files of dir (a node's directory that holds
// nodeprep's metrics file), on a loopback port, stopped with t.Cleanup. It
// returns the host:port Prometheus scrapes; it fails t when the exporter
// does not answer within a minute.
func StartNodeExporter(t testing.TB, dir string) string {
	t.Helper()
	prog := Debian(t, NodeExporterProgram, "prometheus-node-exporter")
	work := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	done := start(t, work, "node_exporter", prog,
		"--collector.disable-defaults", "--collector.textfile", "--collector.textfile.directory="+dir,
		"--web.listen-address="+addr)
	waitHTTP(t, "node_exporter", "http://"+addr+"/metrics", done, filepath.Join(work, "node_exporter.log"))
	return addr
}

// ScrapeTarget is one scrape job of StartPrometheus: its job name, the
// host:port it scrapes (/metrics), and labels added to every series.
type ScrapeTarget struct {
	Job     string
	Address string
	Labels  map[string]string
}

// Prometheus is a Prometheus server started by StartPrometheus.
type Prometheus struct {
	// URL is its http URL (http://127.0.0.1:<port>), a KEDA trigger's
	// serverAddress.
	URL string
	// Dir holds its configuration, its data and its log.
	Dir string
}

// StartPrometheus runs Prometheus on a loopback port scraping targets
// every second (evaluation every second), its data in a temporary
// directory, stopped with t.Cleanup. It returns once every target has been
// scraped up (at most 2 minutes), failing t with the log otherwise.
func StartPrometheus(t testing.TB, targets ...ScrapeTarget) *Prometheus {
	t.Helper()
	prog := Debian(t, PrometheusProgram, "prometheus")
	work := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n")
	for _, tg := range targets {
		labels, _ := json.Marshal(tg.Labels)
		if tg.Labels == nil {
			labels = []byte("{}")
		}
		fmt.Fprintf(&cfg, "- job_name: %q\n  static_configs:\n  - targets: [%q]\n    labels: %s\n", tg.Job, tg.Address, labels)
	}
	conf := filepath.Join(work, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Prometheus{URL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), Dir: work}
	u, _ := url.Parse(p.URL)
	done := start(t, work, "prometheus", prog,
		"--config.file="+conf, "--storage.tsdb.path="+filepath.Join(work, "data"),
		"--web.listen-address="+u.Host, "--log.level=warn")
	log := filepath.Join(work, "prometheus.log")
	waitHTTP(t, "prometheus", p.URL+"/-/ready", done, log)
	p.Wait(t, fmt.Sprintf("every target up (%d)", len(targets)), 2*time.Minute, func(q func(string) ([]Sample, error)) bool {
		s, err := q("sum(up)")
		return err == nil && len(s) == 1 && s[0].Value == float64(len(targets))
	})
	return p
}

// Sample is one series of an instant query's result: its labels and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant PromQL query (GET /api/v1/query) and returns its
// samples; a scalar result is one sample without labels. The error is the
// request's, or Prometheus's own for a query it refuses.
func (p *Prometheus) Query(q string) ([]Sample, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(p.URL + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, fmt.Errorf("querying %s: %w", q, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("querying %s: %w", q, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("querying %s: %w: %s", q, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("querying %s: %s", q, r.Error)
	}
	parse := func(v []any) (float64, error) {
		if len(v) != 2 {
			return 0, fmt.Errorf("querying %s: a value of %d fields", q, len(v))
		}
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch r.Data.ResultType {
	case "scalar":
		var v []any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, fmt.Errorf("querying %s: %w", q, err)
		}
		f, err := parse(v)
		return []Sample{{Value: f}}, err
	case "vector":
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &vs); err != nil {
			return nil, fmt.Errorf("querying %s: %w", q, err)
		}
		out := make([]Sample, 0, len(vs))
		for _, v := range vs {
			f, err := parse(v.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Sample{Labels: v.Metric, Value: f})
		}
		return out, nil
	}
	return nil, fmt.Errorf("querying %s: result type %q", q, r.Data.ResultType)
}

// Wait polls ok (given Query) every 250 ms until it holds, failing t with
// what after deadline; it returns how long it took.
func (p *Prometheus) Wait(t testing.TB, what string, deadline time.Duration, ok func(query func(string) ([]Sample, error)) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok(p.Query) {
		if time.Since(start) > deadline {
			t.Fatalf("prometheus: %s not reached after %s; log:\n%s", what, deadline, logTail(filepath.Join(p.Dir, "prometheus.log")))
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Since(start)
}

// waitHTTP waits (at most 2 minutes) until url answers 200, failing t with
// the log when the program exits or the time is up.
func waitHTTP(t testing.TB, name, url string, done <-chan struct{}, log string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			t.Fatalf("%s exited before it answered:\n%s", name, logTail(log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering %s after 2 minutes: %v\n%s", name, url, err, logTail(log))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
