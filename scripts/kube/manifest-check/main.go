// manifest-check: checks Kubernetes manifests against the Kubernetes API types, offline. Every
// YAML document is strictly decoded into its typed object (k8s.io/api, and prometheus-operator's
// for a ServiceMonitor): an unknown field, a duplicate key, a wrong type or a bad quantity fails.
// Then what a decode cannot see (checks.go, refs.go): names that must point at something (a
// volume, a port, a key of a ConfigMap or Secret, the pods a selector selects) and what joule's
// DaemonSet must keep (read-only CRI socket, resources, probes, every node).
//
//	manifest-check FILE...    (scripts/kube/manifest-check.sh runs it on deploy/kubernetes)
//
// Exit status: 0 when every document passes, 1 with each problem on its own line, 2 on usage.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: manifest-check FILE...")
		os.Exit(2)
	}
	var docs []*doc
	var problems []string
	for _, path := range os.Args[1:] {
		d, p := load(path)
		docs = append(docs, d...)
		problems = append(problems, p...)
	}
	if len(problems) == 0 {
		problems = check(docs)
	} else {
		problems = append(problems, "manifest-check: what points from one document to another is checked once every document decodes")
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "manifest-check: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
	fmt.Printf("manifest-check: %d document(s) in %d file(s) match the Kubernetes API types and each other\n", len(docs), len(os.Args)-1)
}
