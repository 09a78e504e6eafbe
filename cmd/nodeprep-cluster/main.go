// Command nodeprep-cluster is nodeprep with the cluster commands
// (`cluster render`, `cluster check`, cmd/nodeprep/clustercmd) linked in.
// They need the Kubernetes API types, which the nodeprep binary leaves
// out to start fast at every boot; `nodeprep cluster …` runs this
// executable, installed beside it, with the same arguments
// (app.ClusterExecutable). It takes every nodeprep command and flag.
package main

import (
	"os"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/cmd/nodeprep/clustercmd"
	"github.com/nodeprep/nodeprep/cmd/nodeprep/nodecmd"
)

func main() {
	os.Exit(app.Main(clustercmd.New, nodecmd.New))
}
