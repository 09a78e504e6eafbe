package nodeprep

import (
	"bytes"
	"math"
	"testing"

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

// FuzzWriteGauges: writeGauges writes the bytes expfmt writes, for any
// help text, label value and value.
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
		if want := expfmtGauges(t, families); !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("writeGauges:\n%s\nexpfmt:\n%s", got.Bytes(), want)
		}
	})
}
