// Command kubelet is the kubelet resource managers' oracle: v1.37.2's Topology Manager with the device, CPU
// and memory managers as container_manager_linux.go wires them (hint providers in that order), built from a
// case's machine (cadvisor's MachineInfo), kubelet configuration (KubeletConfiguration v1beta1) and device
// plugins' devices. The case's earlier pods are admitted one after another, as the kubelet admitted them,
// and the pods it admitted then start (AddContainer); the answer is the managers' state at that point (what
// the node would report) and the admission of the case's pod: PodAdmitResult and each container's NUMA
// affinity from the Topology Manager's store, with what each manager gave the container.
//
// Managers are made per case with upstream's constructors, the CPU and memory managers' state files in a
// folder of the case's own. The device manager has no such choice: NewManagerImpl keeps its checkpoint and
// registration socket in /var/lib/kubelet/device-plugins, which the oracle must be allowed to create (root).
package main

import (
	"io"
	"os"
	"runtime/debug"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"kubenexus.io/tests/oracles/internal/wire"
)

func main() {
	// Upstream logs every hint at the default level; nothing may reach stdout (the answers) or fill an
	// unread stderr pipe.
	// A fatal error (not a panic: those are answered) would list every goroutine, the CPU managers' sleeping
	// reconcile loops among them, into a stderr pipe nobody reads, and hang there: say only what happened.
	debug.SetTraceback("none")
	klog.SetLogger(logr.Discard())
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	base, err := os.MkdirTemp("", "kubenexus-kubelet-oracle-")
	if err != nil {
		klog.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(base) }()
	wire.Main(func(line []byte) (any, error) { return judge(base, line) })
}
