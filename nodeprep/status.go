package nodeprep

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// writeOutputs writes the status file and, when set, the metrics file,
// each atomically. Errors are marked fault.ErrCantWrite.
func (u *upRun) writeOutputs() error {
	r := u.report
	if u.opts.StatusFile != "" {
		data, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding status %q: %w", u.opts.StatusFile, err)
		}
		if err := u.host.WriteFile(u.opts.StatusFile, append(data, '\n'), hostfs.WriteOptions{Mode: 0o644, MkdirAll: true}); err != nil {
			return err
		}
	}
	if u.opts.MetricsFile != "" {
		data, err := Metrics(r, u.opts.Now())
		if err != nil {
			return fmt.Errorf("encoding metrics %q: %w", u.opts.MetricsFile, err)
		}
		if err := u.host.WriteFile(u.opts.MetricsFile, data, hostfs.WriteOptions{Mode: 0o644}); err != nil {
			return err
		}
	}
	return nil
}

// Metrics renders the report in the Prometheus text format for
// node_exporter's textfile collector, with prometheus's own client and
// encoder:
//
//	nodeprep_ready                               1 ready, 0 not (tainted counts as ready)
//	nodeprep_tainted                             1 when joined with the unhealthy taint
//	nodeprep_gpus                                GPUs in the inventory
//	nodeprep_gpus_healthy                        healthy GPUs
//	nodeprep_selftest_adapters_matched           GPUs matched to a working Vulkan adapter
//	nodeprep_stage_duration_seconds{stage}       each stage's wall time
//	nodeprep_stage_ok{stage}                     1 ok or warning, 0 failed or skipped
//	nodeprep_last_run_timestamp_seconds          when the run ended (Unix time)
func Metrics(r *Report, now interface{ Unix() int64 }) ([]byte, error) {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		g.Set(v)
		reg.MustRegister(g)
	}
	gauge("nodeprep_ready", "1 when the last nodeprep up declared the node ready to join.", b2f(r.Ready))
	gauge("nodeprep_tainted", "1 when the node joined with the nodeprep.dev/gpu-unhealthy taint.", b2f(r.Tainted))
	gpus, healthy := 0, 0
	if r.Inventory != nil {
		gpus, healthy = len(r.Inventory.GPUs), len(r.Inventory.Healthy())
	}
	gauge("nodeprep_gpus", "GPUs NVML reports.", float64(gpus))
	gauge("nodeprep_gpus_healthy", "GPUs NVML reports healthy.", float64(healthy))
	matched := 0
	if r.Selftest != nil {
		for _, m := range r.Selftest.Matches {
			if m.Vulkan {
				matched++
			}
		}
	}
	gauge("nodeprep_selftest_adapters_matched", "GPUs matched by UUID to a Vulkan adapter whose compute dispatch verified.", float64(matched))
	dur := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeprep_stage_duration_seconds", Help: "Wall time of each stage of the last nodeprep up."}, []string{"stage"})
	ok := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeprep_stage_ok", Help: "1 when the stage passed (ok or warning) in the last nodeprep up."}, []string{"stage"})
	for _, s := range r.Stages {
		dur.WithLabelValues(s.Name).Set(s.DurationMS / 1000)
		ok.WithLabelValues(s.Name).Set(b2f(s.Status == StatusOK || s.Status == StatusWarning))
	}
	reg.MustRegister(dur, ok)
	gauge("nodeprep_last_run_timestamp_seconds", "Unix time the last nodeprep up ended.", float64(now.Unix()))
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
