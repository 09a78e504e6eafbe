package main_test

import (
	"os"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestMain removes the nodeprep that testkit.Binary builds once the tests end.
func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
