// Package nodepolicy is the node policy: what a GPU node registers with and
// what its CDI spec must serve, derived from the GPU inventory. It holds the
// labels nodeprep gives the Node (GPU Feature Discovery's nvidia.com/ keys
// with GFD's names and sanitising, the MIG labels of GFD's strategies, and
// nodeprep's own nodeprep.dev/ labels), the default and self-test taints
// and the self-test failure policies, and the CDI device names each GPU
// must have under the device-name strategies (FIELD-REPORTS F6). It takes
// an inventory and options; it reads and writes nothing.
package nodepolicy
