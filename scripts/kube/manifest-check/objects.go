// The documents: split from each file and strictly decoded into the type their apiVersion and
// kind name. Only the kinds joule's manifests use are known; any other is a problem, not a pass.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// doc is one decoded document and where it came from.
type doc struct {
	where string // "FILE: document N (Kind namespace/name)"
	kind  string
	meta  *metav1.ObjectMeta
	obj   any
}

var kinds = map[string]func() any{
	"v1 ConfigMap":      func() any { return &corev1.ConfigMap{} },
	"v1 Secret":         func() any { return &corev1.Secret{} },
	"v1 Service":        func() any { return &corev1.Service{} },
	"apps/v1 DaemonSet": func() any { return &appsv1.DaemonSet{} },
	"monitoring.coreos.com/v1 ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
}

// decodeStrict decodes raw into obj as the API server does: keys matched case-sensitively, and
// every unknown or duplicate field, wrong type or bad quantity an error (encoding/json alone
// would take "hostPid" for hostPID).
func decodeStrict(raw []byte, obj any) []error {
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return []error{err}
	}
	strict, err := k8sjson.UnmarshalStrict(js, obj)
	if err != nil {
		return []error{err}
	}
	return strict
}

// objectMeta returns the decoded object's metadata.
func objectMeta(obj any) *metav1.ObjectMeta {
	return obj.(interface{ GetObjectMeta() metav1.Object }).GetObjectMeta().(*metav1.ObjectMeta)
}

// load decodes every non-empty document of path; a document that fails is a problem.
func load(path string) ([]*doc, []string) {
	f, err := os.Open(path)
	if err != nil {
		return nil, []string{err.Error()}
	}
	defer f.Close()
	var docs []*doc
	var problems []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for n := 1; ; n++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return docs, append(problems, fmt.Sprintf("%s: document %d: %v", path, n, err))
		}
		var fields map[string]any
		if err := yaml.Unmarshal(raw, &fields); err != nil {
			problems = append(problems, fmt.Sprintf("%s: document %d: %v", path, n, err))
			continue
		}
		if fields == nil { // comments only
			n--
			continue
		}
		var tm metav1.TypeMeta
		_ = yaml.Unmarshal(raw, &tm)
		mk, ok := kinds[tm.APIVersion+" "+tm.Kind]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: document %d: apiVersion %q kind %q is not a kind these manifests use", path, n, tm.APIVersion, tm.Kind))
			continue
		}
		obj := mk()
		if errs := decodeStrict(raw, obj); len(errs) > 0 {
			for _, err := range errs {
				problems = append(problems, fmt.Sprintf("%s: document %d (%s): %v", path, n, tm.Kind, err))
			}
			continue
		}
		m := objectMeta(obj)
		docs = append(docs, &doc{where: fmt.Sprintf("%s: document %d (%s %s/%s)", path, n, tm.Kind, m.Namespace, m.Name), kind: tm.Kind, meta: m, obj: obj})
	}
	return docs, problems
}
