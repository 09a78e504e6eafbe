// Package nodeprep is the boot pipeline: the steps that inspect the GPUs,
// patch the CDI spec, run the adapter self-test and write the k3s join
// drop-in, the report they share, the config file, and the node policy
// (labels from the inventory, default taints). It takes a host root and
// interfaces; it never reads flags, the environment or os.Stdout.
package nodeprep
