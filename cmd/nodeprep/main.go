// Command nodeprep turns a NixOS machine with NVIDIA GPUs into a k3s GPU
// node that is safe to schedule on. See the README for what it does.
package main

import (
	"os"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
)

func main() {
	os.Exit(app.Main())
}
