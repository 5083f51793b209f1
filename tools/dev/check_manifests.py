#!/usr/bin/python3
"""check_manifests.py - check the Kubernetes manifests under docs/k8s/ (or
the files and directories given) without a cluster: every document parses
(PyYAML), declares an apiVersion and kind listed below, and uses only field
names that kind has in that API version, with values of the right shape
(string, integer, boolean, list, map), plus a few rules the API server
enforces: a DaemonSet's or Job's selector matches its template's labels,
mountPropagation Bidirectional only in a privileged container, a probe has
exactly one handler, every volumeMount names a volume, $(VAR) in command
and args names an env entry.

This is not a full schema validation: the field lists are the subset of the
Kubernetes API reference (v1.29; the same in every version since apps/v1
and batch/v1 became GA) that the manifests here use or might, written by
hand. A field missing from them is reported as unknown: look it up in the
reference and add it. What only a cluster checks (images, admission
policies, whether the node has /dev/fuse, propagation at run time) is not
checked. Exit status 0 when all is well, 1 with one line per problem.

Usage: check_manifests.py [PATH...]   (default: docs/k8s)"""

import glob
import os
import re
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Shapes: "str", "int", "bool", "intstr" (an int or a string, e.g. a port
# name), "quantity" (a string like 1Gi or 500m, or a number), "strmap" (a
# map of strings), [shape] (a list of it), or the name of a struct below.
STRUCTS = {
    "ObjectMeta": {"name": "str", "namespace": "str", "labels": "strmap",
                   "annotations": "strmap", "generateName": "str"},
    "LabelSelector": {"matchLabels": "strmap",
                      "matchExpressions": ["LabelSelectorRequirement"]},
    "LabelSelectorRequirement": {"key": "str", "operator": "str",
                                 "values": ["str"]},
    "PodTemplateSpec": {"metadata": "ObjectMeta", "spec": "PodSpec"},
    "PodSpec": {
        "containers": ["Container"], "initContainers": ["Container"],
        "volumes": ["Volume"], "restartPolicy": "str",
        "terminationGracePeriodSeconds": "int", "nodeSelector": "strmap",
        "tolerations": ["Toleration"], "serviceAccountName": "str",
        "securityContext": "PodSecurityContext", "priorityClassName": "str",
        "hostNetwork": "bool", "hostPID": "bool", "dnsPolicy": "str",
        "activeDeadlineSeconds": "int", "shareProcessNamespace": "bool",
        "automountServiceAccountToken": "bool"},
    "Container": {
        "name": "str", "image": "str", "imagePullPolicy": "str",
        "command": ["str"], "args": ["str"], "workingDir": "str",
        "env": ["EnvVar"], "ports": ["ContainerPort"],
        "resources": "ResourceRequirements", "volumeMounts": ["VolumeMount"],
        "securityContext": "SecurityContext", "livenessProbe": "Probe",
        "readinessProbe": "Probe", "startupProbe": "Probe",
        "lifecycle": "Lifecycle", "stdin": "bool", "tty": "bool",
        "terminationMessagePolicy": "str", "terminationMessagePath": "str"},
    "EnvVar": {"name": "str", "value": "str", "valueFrom": "EnvVarSource"},
    "EnvVarSource": {"fieldRef": "ObjectFieldSelector",
                     "secretKeyRef": "KeySelector",
                     "configMapKeyRef": "KeySelector"},
    "ObjectFieldSelector": {"fieldPath": "str", "apiVersion": "str"},
    "KeySelector": {"name": "str", "key": "str", "optional": "bool"},
    "ContainerPort": {"name": "str", "containerPort": "int",
                      "protocol": "str", "hostPort": "int", "hostIP": "str"},
    "ResourceRequirements": {"requests": "quantities", "limits": "quantities"},
    "VolumeMount": {"name": "str", "mountPath": "str", "readOnly": "bool",
                    "mountPropagation": "str", "subPath": "str"},
    "SecurityContext": {
        "privileged": "bool", "runAsUser": "int", "runAsGroup": "int",
        "runAsNonRoot": "bool", "allowPrivilegeEscalation": "bool",
        "readOnlyRootFilesystem": "bool", "capabilities": "Capabilities",
        "seccompProfile": "SeccompProfile"},
    "PodSecurityContext": {"runAsUser": "int", "runAsGroup": "int",
                           "runAsNonRoot": "bool", "fsGroup": "int",
                           "supplementalGroups": ["int"],
                           "seccompProfile": "SeccompProfile"},
    "Capabilities": {"add": ["str"], "drop": ["str"]},
    "SeccompProfile": {"type": "str", "localhostProfile": "str"},
    "Probe": {"httpGet": "HTTPGetAction", "exec": "ExecAction",
              "tcpSocket": "TCPSocketAction", "initialDelaySeconds": "int",
              "periodSeconds": "int", "timeoutSeconds": "int",
              "failureThreshold": "int", "successThreshold": "int",
              "terminationGracePeriodSeconds": "int"},
    "HTTPGetAction": {"path": "str", "port": "intstr", "host": "str",
                      "scheme": "str", "httpHeaders": ["HTTPHeader"]},
    "HTTPHeader": {"name": "str", "value": "str"},
    "ExecAction": {"command": ["str"]},
    "TCPSocketAction": {"port": "intstr", "host": "str"},
    "Lifecycle": {"preStop": "LifecycleHandler",
                  "postStart": "LifecycleHandler"},
    "LifecycleHandler": {"exec": "ExecAction", "httpGet": "HTTPGetAction",
                         "tcpSocket": "TCPSocketAction"},
    "Volume": {"name": "str", "hostPath": "HostPathVolumeSource",
               "emptyDir": "EmptyDirVolumeSource",
               "configMap": "ConfigMapVolumeSource"},
    "HostPathVolumeSource": {"path": "str", "type": "str"},
    "EmptyDirVolumeSource": {"medium": "str", "sizeLimit": "quantity"},
    "ConfigMapVolumeSource": {"name": "str", "defaultMode": "int",
                              "optional": "bool"},
    "Toleration": {"key": "str", "operator": "str", "value": "str",
                   "effect": "str", "tolerationSeconds": "int"},
    "DaemonSetSpec": {"selector": "LabelSelector",
                      "template": "PodTemplateSpec",
                      "updateStrategy": "DaemonSetUpdateStrategy",
                      "minReadySeconds": "int",
                      "revisionHistoryLimit": "int"},
    "DaemonSetUpdateStrategy": {"type": "str",
                                "rollingUpdate": "RollingUpdateDaemonSet"},
    "RollingUpdateDaemonSet": {"maxUnavailable": "intstr",
                               "maxSurge": "intstr"},
    "JobSpec": {"template": "PodTemplateSpec", "backoffLimit": "int",
                "completions": "int", "parallelism": "int",
                "activeDeadlineSeconds": "int",
                "ttlSecondsAfterFinished": "int", "selector": "LabelSelector",
                "manualSelector": "bool"},
    "PodTop": {"apiVersion": "str", "kind": "str", "metadata": "ObjectMeta",
               "spec": "PodSpec"},
    "DaemonSetTop": {"apiVersion": "str", "kind": "str",
                     "metadata": "ObjectMeta", "spec": "DaemonSetSpec"},
    "JobTop": {"apiVersion": "str", "kind": "str", "metadata": "ObjectMeta",
               "spec": "JobSpec"},
    "NamespaceTop": {"apiVersion": "str", "kind": "str",
                     "metadata": "ObjectMeta"},
}

# (apiVersion, kind) -> the struct of the whole document
KINDS = {("v1", "Namespace"): "NamespaceTop", ("v1", "Pod"): "PodTop",
         ("apps/v1", "DaemonSet"): "DaemonSetTop",
         ("batch/v1", "Job"): "JobTop"}

ENUMS = {
    "mountPropagation": {"None", "HostToContainer", "Bidirectional"},
    "imagePullPolicy": {"Always", "IfNotPresent", "Never"},
    "restartPolicy": {"Always", "OnFailure", "Never"},
    "protocol": {"TCP", "UDP", "SCTP"},
    "scheme": {"HTTP", "HTTPS"},
}
HOSTPATH_TYPES = {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File",
                  "Socket", "CharDevice", "BlockDevice"}
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def check_value(shape, v, where, problems):
    if isinstance(shape, list):
        if not isinstance(v, list):
            problems.append("%s: a list expected" % where)
            return
        for i, item in enumerate(v):
            check_value(shape[0], item, "%s[%d]" % (where, i), problems)
    elif shape == "str":
        if not isinstance(v, str):
            problems.append("%s: a string expected, got %r" % (where, v))
    elif shape == "int":
        if not isinstance(v, int) or isinstance(v, bool):
            problems.append("%s: an integer expected, got %r" % (where, v))
    elif shape == "bool":
        if not isinstance(v, bool):
            problems.append("%s: true or false expected, got %r" % (where, v))
    elif shape == "intstr":
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            problems.append("%s: an integer or a name expected" % where)
    elif shape == "quantity":
        if isinstance(v, bool) or not QUANTITY.match(str(v)):
            problems.append("%s: not a quantity: %r" % (where, v))
    elif shape == "quantities":
        if not isinstance(v, dict):
            problems.append("%s: a map expected" % where)
            return
        for k, q in v.items():
            check_value("quantity", q, "%s.%s" % (where, k), problems)
    elif shape == "strmap":
        if not isinstance(v, dict) or not all(
                isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
            problems.append("%s: a map of strings expected" % where)
    else:
        check_struct(shape, v, where, problems)


def check_struct(name, obj, where, problems):
    if not isinstance(obj, dict):
        problems.append("%s: a map (%s) expected" % (where, name))
        return
    fields = STRUCTS[name]
    for key, v in obj.items():
        at = "%s.%s" % (where, key) if where else key
        if key not in fields:
            problems.append("%s: not a field of %s" % (at, name.replace("Top", "")))
            continue
        if key in ENUMS and v not in ENUMS[key]:
            problems.append("%s: %r is not one of %s" % (at, v, sorted(ENUMS[key])))
        check_value(fields[key], v, at, problems)


def check_probe(p, where, problems):
    handlers = [h for h in ("httpGet", "exec", "tcpSocket") if h in (p or {})]
    if len(handlers) != 1:
        problems.append("%s: exactly one of httpGet, exec, tcpSocket" % where)


def check_container(c, volumes, where, problems):
    for key in ("name", "image"):
        if key not in c:
            problems.append("%s: %s missing" % (where, key))
    privileged = (c.get("securityContext") or {}).get("privileged") is True
    for i, vm in enumerate(c.get("volumeMounts") or []):
        if vm.get("name") not in volumes:
            problems.append("%s.volumeMounts[%d]: no volume %r" % (where, i, vm.get("name")))
        if vm.get("mountPropagation") == "Bidirectional" and not privileged:
            problems.append("%s.volumeMounts[%d]: Bidirectional propagation "
                            "needs a privileged container" % (where, i))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in c:
            check_probe(c[probe], "%s.%s" % (where, probe), problems)
    env = {e.get("name") for e in c.get("env") or []}
    for arg in (c.get("command") or []) + (c.get("args") or []):
        for var in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(arg)):
            if var not in env:
                problems.append("%s: $(%s) is not in its env" % (where, var))


def check_pod_spec(spec, where, problems):
    if not isinstance(spec, dict) or not spec.get("containers"):
        problems.append("%s: no containers" % where)
        return
    volumes = {}
    for i, v in enumerate(spec.get("volumes") or []):
        volumes[v.get("name")] = v
        hp = v.get("hostPath")
        if hp and hp.get("type", "") not in HOSTPATH_TYPES:
            problems.append("%s.volumes[%d].hostPath.type: %r" % (where, i, hp.get("type")))
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if isinstance(c, dict):
                check_container(c, volumes, "%s.%s[%d]" % (where, key, i), problems)


def check_doc(doc, problems):
    av, kind = doc.get("apiVersion"), doc.get("kind")
    top = KINDS.get((av, kind))
    if top is None:
        problems.append("apiVersion %r kind %r: not a kind this check knows "
                        "(known: %s)" % (av, kind, ", ".join(
                            "%s %s" % k for k in sorted(KINDS))))
        return
    check_struct(top, doc, "", problems)
    if not (doc.get("metadata") or {}).get("name"):
        problems.append("metadata.name missing")
    spec = doc.get("spec") or {}
    if kind == "Pod":
        check_pod_spec(spec, "spec", problems)
        return
    if kind in ("DaemonSet", "Job"):
        tmpl = spec.get("template") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        sel = (spec.get("selector") or {}).get("matchLabels")
        if kind == "DaemonSet" and not sel:
            problems.append("spec.selector.matchLabels missing")
        if sel and any(labels.get(k) != v for k, v in sel.items()):
            problems.append("spec.selector does not match the template's labels")
        if kind == "Job" and (tmpl.get("spec") or {}).get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append("spec.template.spec.restartPolicy: Never or OnFailure for a Job")
        check_pod_spec(tmpl.get("spec"), "spec.template.spec", problems)


def manifest_files(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(glob.glob(os.path.join(p, "*.yaml")) +
                          glob.glob(os.path.join(p, "*.yml")))
        else:
            out.append(p)
    return out


def check_file(path):
    """One line per problem of the file at path; [] when there is none."""
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        return ["%s: does not parse: %s" % (path, str(e).replace("\n", " "))]
    if not docs:
        return ["%s: no document" % path]
    lines = []
    for i, doc in enumerate(docs):
        problems = []
        if isinstance(doc, dict):
            check_doc(doc, problems)
        else:
            problems.append("not a map")
        name = "%s#%d (%s %s)" % (path, i + 1, doc.get("kind") if isinstance(doc, dict) else "?",
                                  ((doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else "?"))
        lines += ["%s: %s" % (name, p) for p in problems]
    return lines


def main(argv):
    files = manifest_files(argv[1:] or [os.path.join(REPO, "docs", "k8s")])
    if not files:
        print("check_manifests: no manifest found", file=sys.stderr)
        return 1
    lines = []
    for path in files:
        lines += check_file(path)
    for line in lines:
        print(line)
    if not lines:
        print("check_manifests: %d files, all well (not a full schema "
              "validation; see the script's header)" % len(files))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
