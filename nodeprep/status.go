package nodeprep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// writeOutputs writes the status file and, when set, the metrics file,
// each atomically. Write errors are marked fault.ErrCantWrite; an encoding
// error (a bug) is returned as is.
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
// node_exporter's textfile collector, encoded by prometheus's own text
// format library (prometheus/common expfmt; client_golang's registry is
// not used: its init reads /proc in every nodeprep process, probes
// included):
//
//	nodeprep_gpus                                GPUs in the inventory
//	nodeprep_gpus_healthy                        healthy GPUs
//	nodeprep_last_run_timestamp_seconds          when the run ended (Unix time)
//	nodeprep_ready                               1 ready, 0 not (tainted counts as ready)
//	nodeprep_selftest_adapters_matched           GPUs matched to a working Vulkan adapter
//	nodeprep_stage_duration_seconds{stage}       each stage's wall time
//	nodeprep_stage_ok{stage}                     1 ok or warning, 0 failed or skipped
//	nodeprep_tainted                             1 when joined with the unhealthy taint
func Metrics(r *Report, now time.Time) ([]byte, error) {
	gpus, healthy := 0, 0
	if r.Inventory != nil {
		gpus, healthy = len(r.Inventory.GPUs), len(r.Inventory.Healthy())
	}
	matched := 0
	if r.Selftest != nil {
		for _, m := range r.Selftest.Matches {
			if m.Vulkan {
				matched++
			}
		}
	}
	stages := slices.Clone(r.Stages)
	slices.SortFunc(stages, func(a, b StageResult) int { return strings.Compare(a.Name, b.Name) })
	var dur, ok []*dto.Metric
	for _, s := range stages {
		dur = append(dur, stageGauge(s.Name, s.DurationMS/1000))
		ok = append(ok, stageGauge(s.Name, b2f(s.Status == StatusOK || s.Status == StatusWarning)))
	}
	families := []*dto.MetricFamily{ // sorted by name
		gaugeFamily("nodeprep_gpus", "GPUs NVML reports.", gauge(float64(gpus))),
		gaugeFamily("nodeprep_gpus_healthy", "GPUs NVML reports healthy.", gauge(float64(healthy))),
		gaugeFamily("nodeprep_last_run_timestamp_seconds", "Unix time the last nodeprep up ended.", gauge(float64(now.Unix()))),
		gaugeFamily("nodeprep_ready", "1 when the last nodeprep up declared the node ready to join.", gauge(b2f(r.Ready))),
		gaugeFamily("nodeprep_selftest_adapters_matched", "GPUs matched by UUID to a Vulkan adapter whose compute dispatch verified.", gauge(float64(matched))),
		gaugeFamily("nodeprep_stage_duration_seconds", "Wall time of each stage of the last nodeprep up.", dur...),
		gaugeFamily("nodeprep_stage_ok", "1 when the stage passed (ok or warning) in the last nodeprep up.", ok...),
		gaugeFamily("nodeprep_tainted", "1 when the node joined with the nodeprep.dev/gpu-unhealthy taint.", gauge(b2f(r.Tainted))),
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if len(mf.Metric) == 0 {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// MetricLabels are the metric families Metrics writes, each with its label
// names: what a KEDA trigger or an alert may query (cluster check judges
// triggers against it). A test keeps it equal to Metrics' output.
var MetricLabels = map[string][]string{
	"nodeprep_gpus":                       nil,
	"nodeprep_gpus_healthy":               nil,
	"nodeprep_last_run_timestamp_seconds": nil,
	"nodeprep_ready":                      nil,
	"nodeprep_selftest_adapters_matched":  nil,
	"nodeprep_stage_duration_seconds":     {"stage"},
	"nodeprep_stage_ok":                   {"stage"},
	"nodeprep_tainted":                    nil,
}

func gaugeFamily(name, help string, ms ...*dto.Metric) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum(), Metric: ms}
}

func gauge(v float64) *dto.Metric { return &dto.Metric{Gauge: &dto.Gauge{Value: proto.Float64(v)}} }

func stageGauge(stage string, v float64) *dto.Metric {
	m := gauge(v)
	m.Label = []*dto.LabelPair{{Name: proto.String("stage"), Value: proto.String(stage)}}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
