// Package nodeprep is the pipeline, and only that: `up` (inventory, CDI
// patch, adapter self-test, k3s join), `health` (the same stages again on
// a running node, judged against its boot) and the re-patch after boot,
// and the report and status files they share.
//
// Each stage is a step (pipeline.go) sharing one environment, env: `up`
// assembles the list inventory, cdi, selftest, join (step_*.go), plans
// every step in order, runs the preflight, then applies them in order;
// `health` reuses the steps and the re-patch the cdi stage's judgement,
// each saying only what differs.
// The report (report.go) is written to the status file and the metrics
// textfile (status.go), which know nothing of the steps. The work itself
// is done by the subpackages and cdi; this package takes a host root and
// interfaces, and never reads flags, the environment or os.Stdout.
package nodeprep
