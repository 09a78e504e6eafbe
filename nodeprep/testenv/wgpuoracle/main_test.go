package wgpuoracle

import (
	"os"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
