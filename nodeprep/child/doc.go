// Package child runs a process that calls into a driver (the NVML
// inventory, the Vulkan and EGL probes) so that nothing the driver does
// can take nodeprep down with it: the child is bounded in time (a timeout
// and the caller's context, told apart), in what nodeprep keeps of its
// output (Capture), and in its descendants (a child sub-reaper sweep kills
// whatever the driver left running, even in its own session). The child
// writes its report on a private pipe (ReportFD), never on stdout, so a
// line a driver prints cannot pass for the report; a fatal signal in the
// driver is reported with the library it happened in (InstallCrashReport).
//
// Run is the parent's side; ChildReport and InstallCrashReport are the
// child's. docs/faults.md explains the design and lists the faults it
// survives.
package child
