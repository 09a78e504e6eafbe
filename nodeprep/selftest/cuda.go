package selftest

import (
	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"strings"
)

// ApplyCUDA adds the CUDA probe's verdict to r (Evaluate's report over
// inv): the report (r.CUDA), each GPU's CUDA device and result
// (Match.CUDADevice, Match.CUDA), and a reason per finding
// (cudaprobe.Evaluate), or a warning where require lets the finding pass
// (WithCUDA: nil fails every finding but a missing library on a simulated
// inventory; false fails none; true fails all). A child that printed no
// report (timeout, crash) is one reason, or a warning with require false. It sets r.Passed again.
func ApplyCUDA(r *Report, inv *gpu.Inventory, res ProbeResult[cudaprobe.Report], require *bool) {
	required := inv == nil || !inv.Simulated
	if require != nil {
		required = *require
	}
	strict := require == nil || *require
	r.RequireCUDA = required
	r.CUDA = res.Report
	add := func(kind ReasonKind, msg string, fails bool) {
		if fails {
			r.Reasons = append(r.Reasons, Reason{Kind: kind, Message: msg})
		} else {
			r.warn("CUDA (not required): %s", strings.TrimPrefix(msg, "CUDA: "))
		}
	}
	switch {
	case res.Failure != nil:
		add(res.Failure.Kind, res.Failure.Message, strict)
	case res.Report != nil && inv != nil:
		results, findings := cudaprobe.Evaluate(inv.GPUs, res.Report)
		for _, g := range results {
			for i := range r.Matches {
				if r.Matches[i].GPU == g.GPU {
					r.Matches[i].CUDADevice, r.Matches[i].CUDA = g.Device, g.OK
				}
			}
		}
		for _, f := range findings {
			fails := strict
			if f.Kind == cudaprobe.KindNotFound {
				fails = required
			}
			add(ReasonKind(f.Kind), "CUDA: "+f.Message, fails)
		}
	}
	r.Passed = len(r.Reasons) == 0
}
