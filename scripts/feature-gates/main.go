// Prints the feature gates kube-scheduler registers (Kubernetes' own, the API server's, and
// the logging and metrics gates its command adds), each at the release named by the first
// argument: name, default, locked to its default, and stage (empty for GA), tab-separated,
// sorted by name. scripts/feature-gates.sh runs it inside the module install-kube.sh builds
// Kubernetes from.
package main

import (
	"fmt"
	"os"
	"sort"

	"k8s.io/apimachinery/pkg/util/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
	_ "k8s.io/kubernetes/pkg/features"
)

func main() {
	gate := utilfeature.DefaultMutableFeatureGate
	if err := logsapi.AddFeatureGates(gate); err != nil {
		panic(err)
	}
	if err := metricsfeatures.AddFeatureGates(gate); err != nil {
		panic(err)
	}
	at := version.MustParse(os.Args[1])
	all := gate.GetAllVersioned()
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		var current *featuregate.FeatureSpec
		for _, s := range all[featuregate.Feature(n)] {
			if s.Version == nil || !s.Version.GreaterThan(at) {
				current = &s
			}
		}
		if current != nil {
			fmt.Printf("%s\t%v\t%v\t%s\n", n, current.Default, current.LockToDefault, current.PreRelease)
		}
	}
}
