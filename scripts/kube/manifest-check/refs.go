// The documents as one set: each object's metadata, and what points from one object to
// another — a Service to the DaemonSet's pods and their ports, a ServiceMonitor to the Service
// and to the keys of the Secret it reads, a volume to its ConfigMap's or Secret's keys.
package main

import (
	"fmt"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

type objects struct{ docs []*doc }

func (s *objects) find(kind, ns, name string) any {
	for _, d := range s.docs {
		if d.kind == kind && d.meta.Namespace == ns && d.meta.Name == name {
			return d.obj
		}
	}
	return nil
}

func (s *objects) configMap(ns, name string) *corev1.ConfigMap {
	cm, _ := s.find("ConfigMap", ns, name).(*corev1.ConfigMap)
	return cm
}

func (s *objects) secret(ns, name string) *corev1.Secret {
	sec, _ := s.find("Secret", ns, name).(*corev1.Secret)
	return sec
}

func (s *objects) secretKey(ns string, sel *corev1.SecretKeySelector) bool {
	if sec := s.secret(ns, sel.Name); sec != nil {
		_, inData := sec.Data[sel.Key]
		_, inString := sec.StringData[sel.Key]
		return inData || inString
	}
	return false
}

// hasKey says whether the ConfigMap or Secret behind volume v has key.
func (s *objects) hasKey(ns string, v *corev1.Volume, key string) bool {
	switch {
	case v.ConfigMap != nil:
		if cm := s.configMap(ns, v.ConfigMap.Name); cm != nil {
			_, inData := cm.Data[key]
			_, inBinary := cm.BinaryData[key]
			return inData || inBinary
		}
	case v.Secret != nil:
		return s.secretKey(ns, &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: v.Secret.SecretName}, Key: key})
	}
	return false
}

func check(docs []*doc) []string {
	set := &objects{docs}
	var out []string
	seen := map[string]bool{}
	for _, d := range docs {
		id := d.kind + " " + d.meta.Namespace + "/" + d.meta.Name
		if seen[id] {
			out = append(out, d.where+": defined twice")
		}
		seen[id] = true
		out = append(out, checkMeta(d)...)
		switch o := d.obj.(type) {
		case *appsv1.DaemonSet:
			out = append(out, checkDaemonSet(d, o, set)...)
		case *corev1.Service:
			out = append(out, checkService(d, o, set)...)
		case *monitoringv1.ServiceMonitor:
			out = append(out, checkServiceMonitor(d, o, set)...)
		case *corev1.ConfigMap:
			for k := range o.Data {
				out = append(out, keyProblems(d, k)...)
			}
		case *corev1.Secret:
			for k := range o.StringData {
				out = append(out, keyProblems(d, k)...)
			}
		}
	}
	return out
}

func keyProblems(d *doc, key string) []string {
	var out []string
	for _, e := range validation.IsConfigMapKey(key) {
		out = append(out, fmt.Sprintf("%s: key %q: %s", d.where, key, e))
	}
	return out
}

// checkMeta: a valid name, an explicit namespace (never the one kubectl happens to use), valid labels.
func checkMeta(d *doc) []string {
	var out []string
	for _, e := range validation.IsDNS1123Subdomain(d.meta.Name) {
		out = append(out, fmt.Sprintf("%s: metadata.name: %s", d.where, e))
	}
	if d.meta.Namespace == "" {
		out = append(out, d.where+": metadata.namespace is not set")
	}
	for _, e := range validation.IsDNS1123Label(d.meta.Namespace) {
		out = append(out, fmt.Sprintf("%s: metadata.namespace: %s", d.where, e))
	}
	for _, e := range metav1validation.ValidateLabels(d.meta.Labels, field.NewPath("metadata", "labels")) {
		out = append(out, fmt.Sprintf("%s: %v", d.where, e))
	}
	return out
}

// selected returns the containers of the DaemonSets in ns whose pods sel selects.
func (s *objects) selected(ns string, sel labels.Selector) []*corev1.Container {
	var out []*corev1.Container
	for _, d := range s.docs {
		if ds, ok := d.obj.(*appsv1.DaemonSet); ok && d.meta.Namespace == ns && sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
			for i := range ds.Spec.Template.Spec.Containers {
				out = append(out, &ds.Spec.Template.Spec.Containers[i])
			}
		}
	}
	return out
}

func checkService(d *doc, svc *corev1.Service, set *objects) []string {
	var out []string
	bad := func(f string, a ...any) { out = append(out, d.where+": "+fmt.Sprintf(f, a...)) }
	if len(svc.Spec.Selector) == 0 {
		return append(out, d.where+": spec.selector is empty: the Service would have no endpoints of its own")
	}
	containers := set.selected(d.meta.Namespace, labels.SelectorFromSet(svc.Spec.Selector))
	if len(containers) == 0 {
		bad("spec.selector %v selects no pod of a DaemonSet here", svc.Spec.Selector)
	}
	for _, p := range svc.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		found := false
		for _, c := range containers {
			found = found || portOf(c, target)
		}
		if len(containers) > 0 && !found {
			bad("port %q: targetPort %s is no port of the selected pods' containers", p.Name, target.String())
		}
		for _, e := range validation.IsValidPortName(p.Name) {
			bad("port name %q: %s", p.Name, e)
		}
	}
	return out
}

// durationPattern is the CRD's own pattern for a ServiceMonitor's interval and scrapeTimeout.
var durationPattern = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

func checkServiceMonitor(d *doc, sm *monitoringv1.ServiceMonitor, set *objects) []string {
	var out []string
	bad := func(f string, a ...any) { out = append(out, d.where+": "+fmt.Sprintf(f, a...)) }
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		return append(out, fmt.Sprintf("%s: spec.selector: %v", d.where, err))
	}
	namespaces := sm.Spec.NamespaceSelector.MatchNames
	if len(namespaces) == 0 && !sm.Spec.NamespaceSelector.Any {
		namespaces = []string{d.meta.Namespace}
	}
	var services []*corev1.Service
	for _, o := range set.docs {
		svc, ok := o.obj.(*corev1.Service)
		inNs := sm.Spec.NamespaceSelector.Any || contains(namespaces, o.meta.Namespace)
		if ok && inNs && !sel.Empty() && sel.Matches(labels.Set(o.meta.Labels)) {
			services = append(services, svc)
		}
	}
	if len(services) == 0 {
		bad("spec.selector %s (namespaces %v) selects no Service here", sel, namespaces)
	}
	for i, e := range sm.Spec.Endpoints {
		at := fmt.Sprintf("endpoints[%d]: ", i)
		for _, svc := range services {
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == e.Port
			}
			if !found {
				bad(at+"port %q is no port of Service %s/%s", e.Port, svc.Namespace, svc.Name)
			}
		}
		for _, dur := range []monitoringv1.Duration{e.Interval, e.ScrapeTimeout} {
			if dur != "" && !durationPattern.MatchString(string(dur)) {
				bad(at+"%q is not a Prometheus duration", dur)
			}
		}
		scheme := strings.ToLower(e.Scheme.String())
		if scheme != "" && scheme != "http" && scheme != "https" {
			bad(at+"scheme %q is neither http nor https", scheme)
		}
		var secretRefs []*corev1.SecretKeySelector
		if e.BasicAuth != nil {
			if scheme != "https" {
				bad("%sbasicAuth over plain http would send the password in clear text", at)
			}
			secretRefs = append(secretRefs, &e.BasicAuth.Username, &e.BasicAuth.Password)
		}
		if e.TLSConfig != nil {
			secretRefs = append(secretRefs, e.TLSConfig.CA.Secret, e.TLSConfig.Cert.Secret, e.TLSConfig.KeySecret)
		}
		for _, ref := range secretRefs {
			if ref != nil && !set.secretKey(d.meta.Namespace, ref) {
				bad(at+"Secret %s/%s has no key %q here", d.meta.Namespace, ref.Name, ref.Key)
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
