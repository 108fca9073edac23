// What a strict decode cannot see in a DaemonSet's pods: every name must point at something
// (a volume, a container port, a key of a ConfigMap or Secret defined beside it), and joule's
// node agent must keep what docs/deploy.md promises (every node, node-critical, the host's PID
// namespace, the CRI socket read-only, resources and probes set).
package main

import (
	"fmt"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// runtimeSocketDirs are where container runtimes keep their CRI socket; a hostPath on one of
// them, or on any *.sock, is the runtime's API.
var runtimeSocketDirs = []string{"/run/containerd", "/var/run/containerd", "/run/crio", "/var/run/crio", "/run/cri-dockerd", "/var/run/cri-dockerd"}

func isRuntimeSocket(p string) bool {
	p = path.Clean(p)
	if strings.HasSuffix(p, ".sock") {
		return true
	}
	for _, d := range runtimeSocketDirs {
		if p == d {
			return true
		}
	}
	return false
}

func checkDaemonSet(d *doc, ds *appsv1.DaemonSet, set *objects) []string {
	var out []string
	bad := func(f string, a ...any) { out = append(out, d.where+": "+fmt.Sprintf(f, a...)) }
	if ds.Spec.Selector == nil {
		bad("spec.selector is missing")
	} else if sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); err != nil {
		bad("spec.selector: %v", err)
	} else if sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		bad("spec.selector %s does not select the pod template's labels %v", sel, ds.Spec.Template.Labels)
	}
	pod := &ds.Spec.Template.Spec
	// A node agent: on every node, last to be evicted, seeing every process.
	if pod.PriorityClassName != "system-node-critical" {
		bad("priorityClassName is %q, not system-node-critical", pod.PriorityClassName)
	}
	everyTaint := false
	for _, t := range pod.Tolerations {
		everyTaint = everyTaint || (t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == "")
	}
	if !everyTaint {
		bad("no toleration {operator: Exists} without key or effect: nodes with taints would run no agent")
	}
	if !pod.HostPID {
		bad("hostPID is not true: the agent would see only its own processes")
	}
	return append(out, checkPod(d, pod, set)...)
}

func checkPod(d *doc, pod *corev1.PodSpec, set *objects) []string {
	var out []string
	bad := func(f string, a ...any) { out = append(out, d.where+": "+fmt.Sprintf(f, a...)) }
	volumes := map[string]*corev1.Volume{}
	for i := range pod.Volumes {
		v := &pod.Volumes[i]
		if volumes[v.Name] != nil {
			bad("volume %q is defined twice", v.Name)
		}
		volumes[v.Name] = v
		switch {
		case v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type == ""):
			bad("hostPath volume %q has no type: a missing %s would be made an empty directory", v.Name, v.HostPath.Path)
		case v.ConfigMap != nil && set.configMap(d.meta.Namespace, v.ConfigMap.Name) == nil:
			bad("volume %q names ConfigMap %s/%s, which no manifest here defines", v.Name, d.meta.Namespace, v.ConfigMap.Name)
		case v.Secret != nil && set.secret(d.meta.Namespace, v.Secret.SecretName) == nil:
			bad("volume %q names Secret %s/%s, which no manifest here defines", v.Name, d.meta.Namespace, v.Secret.SecretName)
		}
	}
	mounted := map[string]bool{}
	criMounted := false
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		in := fmt.Sprintf("container %q: ", c.Name)
		if c.ImagePullPolicy != corev1.PullNever && c.ImagePullPolicy != corev1.PullIfNotPresent {
			bad(in+"imagePullPolicy %q: the image is loaded on each node, never pulled (Never or IfNotPresent)", c.ImagePullPolicy)
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			if p.Name != "" {
				for _, e := range validation.IsValidPortName(p.Name) {
					bad(in+"port name %q: %s", p.Name, e)
				}
				ports[p.Name] = true
			}
		}
		paths := map[string]bool{}
		for _, m := range c.VolumeMounts {
			v := volumes[m.Name]
			mounted[m.Name] = true
			if v == nil {
				bad(in+"volumeMount %q names no volume of the pod", m.Name)
				continue
			}
			if !path.IsAbs(m.MountPath) || paths[m.MountPath] {
				bad(in+"mountPath %q is not absolute or is mounted twice", m.MountPath)
			}
			paths[m.MountPath] = true
			if m.SubPath != "" && !set.hasKey(d.meta.Namespace, v, m.SubPath) {
				bad(in+"volumeMount %q: subPath %q is not a key of the volume's ConfigMap or Secret", m.Name, m.SubPath)
			}
			if v.HostPath != nil && isRuntimeSocket(v.HostPath.Path) {
				criMounted = true
				if !m.ReadOnly {
					bad(in+"volumeMount %q mounts the container runtime's socket (%s) without readOnly: true", m.Name, v.HostPath.Path)
				}
			}
		}
		out = append(out, checkProbes(d, in, &c)...)
		out = append(out, checkResources(d, in, &c)...)
	}
	for name := range volumes {
		if !mounted[name] {
			bad("volume %q is mounted by no container", name)
		}
	}
	if !criMounted {
		bad("no container mounts the container runtime's CRI socket (%s, or a *.sock)", strings.Join(runtimeSocketDirs, ", "))
	}
	return out
}

// portOf says whether port names or numbers one of c's container ports.
func portOf(c *corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return true
		}
	}
	return false
}

func checkProbes(d *doc, in string, c *corev1.Container) []string {
	var out []string
	bad := func(f string, a ...any) { out = append(out, d.where+": "+in+fmt.Sprintf(f, a...)) }
	for _, wp := range []struct {
		what string
		p    *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}} {
		what, p := wp.what, wp.p
		switch {
		case p == nil:
			bad("no %s", what)
		case p.HTTPGet != nil:
			if !portOf(c, p.HTTPGet.Port) {
				bad("%s: port %s is none of the container's ports", what, p.HTTPGet.Port.String())
			}
			if !strings.HasPrefix(p.HTTPGet.Path, "/") {
				bad("%s: path %q does not start with /", what, p.HTTPGet.Path)
			}
		case p.TCPSocket != nil:
			if !portOf(c, p.TCPSocket.Port) {
				bad("%s: port %s is none of the container's ports", what, p.TCPSocket.Port.String())
			}
		}
	}
	return out
}

func checkResources(d *doc, in string, c *corev1.Container) []string {
	var out []string
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[r]
		lim, hasLim := c.Resources.Limits[r]
		switch {
		case !hasReq || !hasLim:
			out = append(out, fmt.Sprintf("%s: %sresources: %s needs a request and a limit", d.where, in, r))
		case req.Cmp(lim) > 0:
			out = append(out, fmt.Sprintf("%s: %sresources: %s request %s is above its limit %s", d.where, in, r, req.String(), lim.String()))
		}
	}
	return out
}
