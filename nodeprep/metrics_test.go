package nodeprep

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

// expfmtGauges encodes families with prometheus/common's expfmt, the
// library writeGauges stands in for (test-only: it is not linked into
// nodeprep).
func expfmtGauges(t testing.TB, families []gaugeFamily) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		mf := &dto.MetricFamily{Name: proto.String(f.name), Help: proto.String(f.help), Type: dto.MetricType_GAUGE.Enum()}
		for _, s := range f.samples {
			m := &dto.Metric{Gauge: &dto.Gauge{Value: proto.Float64(s.value)}}
			if s.stage != "" {
				m.Label = []*dto.LabelPair{{Name: proto.String("stage"), Value: proto.String(s.stage)}}
			} else if s.uuid != "" {
				m.Label = []*dto.LabelPair{{Name: proto.String("uuid"), Value: proto.String(s.uuid)}}
			}
			mf.Metric = append(mf.Metric, m)
		}
		if len(mf.Metric) == 0 {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// FuzzWriteGauges: writeGauges writes what expfmt writes, for any help
// text, label value and value: the same bytes but for the values' form
// (formatValue: whole numbers in plain digits), and values that read the
// same.
func FuzzWriteGauges(f *testing.F) {
	f.Add("Wall time.", "cdi", 0.005, false)
	f.Add("back\\slash\nnew line \"quoted\"", "a\"b\\c\nd", 1.79596603e+09, true)
	f.Add("x", "", math.Inf(1), false)
	f.Add("x", "y", math.NaN(), false)
	f.Add("x", "y", math.Copysign(0, -1), false)
	f.Fuzz(func(t *testing.T, help, stage string, value float64, empty bool) {
		families := []gaugeFamily{
			{"nodeprep_a", help, []sample{{value: value}}},
			{"nodeprep_b", "labelled", []sample{{stage: stage, value: value}, {stage: stage + "2", value: -value}}},
		}
		if empty {
			families = append(families, gaugeFamily{"nodeprep_c", "none", nil})
		}
		var got bytes.Buffer
		writeGauges(&got, families)
		want := expfmtGauges(t, families)
		if !bytes.Equal(valuesOut(got.Bytes()), valuesOut(want)) {
			t.Fatalf("writeGauges:\n%s\nexpfmt:\n%s", got.Bytes(), want)
		}
		g, w := values(t, got.Bytes()), values(t, want)
		for i := range w {
			if g[i] != w[i] && !(math.IsNaN(g[i]) && math.IsNaN(w[i])) {
				t.Fatalf("sample %d reads %v, expfmt's %v:\n%s\nexpfmt:\n%s", i, g[i], w[i], got.Bytes(), want)
			}
		}
	})
}

// valuesOut is a text exposition with each sample line's value (after the
// last space) cut: what must equal expfmt's byte for byte.
func valuesOut(b []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) > 0 && line[0] != '#' {
			if i := bytes.LastIndexByte(line, ' '); i >= 0 {
				line = append(line[:i:i], '\n')
			}
		}
		out = append(out, line...)
	}
	return out
}

// values reads each sample line's value as the text format's parsers do
// (strconv.ParseFloat: +Inf, -Inf, NaN included).
func values(t *testing.T, b []byte) []float64 {
	t.Helper()
	var out []float64
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

// TestFormatValue: whole numbers read as integers (a Unix timestamp to the
// second), the rest in Go's shortest form; a stage's duration in seconds
// is whole microseconds, without binary floating point's tail.
func TestFormatValue(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{
		1796153423: "1796153423", 1796153420: "1796153420", 8: "8", -3: "-3", 1 << 52: "4503599627370496",
		1 << 53: "9.007199254740992e+15", 1e20: "1e+20", 0.5: "0.5", 0.018881: "0.018881",
		math.Copysign(0, -1): "0", math.Inf(1): "+Inf", math.Inf(-1): "-Inf", math.NaN(): "NaN",
	} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
	r := &Report{Stages: []StageResult{{Name: StageCDI, Status: StatusOK, DurationMS: 18.881}, {Name: StageJoin, Status: StatusOK, DurationMS: 0.0004}}}
	out, err := Metrics(r, time.Unix(1796153423, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nnodeprep_stage_duration_seconds{stage=\"cdi\"} 0.018881\n",
		"\nnodeprep_stage_duration_seconds{stage=\"join\"} 0\n",
		"\nnodeprep_last_run_timestamp_seconds 1796153423\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}
