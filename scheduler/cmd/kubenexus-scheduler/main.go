// Command kubenexus-scheduler is kube-scheduler v1.37 with the KubeNexus plugin registered: every flag and
// configuration of upstream's kube-scheduler, plus the plugin for the profiles that enable it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // JSON logging, as upstream's command
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"kubenexus.io/scheduler/pkg/kubenexus"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(kubenexus.Name, kubenexus.New))
	os.Exit(cli.Run(command))
}
