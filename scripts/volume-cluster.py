#!/usr/bin/env python3
"""A cluster of scheduler_perf's volume workloads for `gantry simulate`, as one JSON List.

    scripts/volume-cluster.py NODES PODS csi|in-tree|migrated > cluster.json
    gantry simulate cluster.json --config <percentageOfNodesToScore: 0 or 100>

The same objects as `cluster-bench`'s volume workloads (scripts/bench-volumes.sh): nodes of
4 cpu, 32Gi and 110 pods (with the EBS CSI driver's attach limit of 39 and a CSINode in the
csi and migrated workloads, the latter naming the in-tree AWS EBS plugin migrated), and per
pod (100m, 500Mi) a claim bound to a volume of its own (a CSI volume, or an in-tree AWS EBS
one), written bound as the PV controller leaves them. It measures the scheduling core on
pods with volumes without an API server.
"""
import json
import sys

DRIVER = "ebs.csi.aws.com"


def main():
    nodes, pods, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if kind not in ("csi", "in-tree", "migrated"):
        sys.exit(f"workload {kind!r}: one of csi, in-tree, migrated")
    items = []
    for i in range(nodes):
        name = f"scheduler-perf-{i:05}"
        capacity = {"pods": "110", "cpu": "4", "memory": "32Gi"}
        allocatable = dict(capacity)
        if kind != "in-tree":
            allocatable[f"attachable-volumes-csi-{DRIVER}"] = "39"
        items.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": capacity, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
        if kind != "in-tree":
            metadata = {"name": name}
            if kind == "migrated":
                metadata["annotations"] = {
                    "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs"}
            items.append({
                "apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": metadata,
                "spec": {"drivers": [{"name": DRIVER, "nodeID": name,
                                      "allocatable": {"count": 39}}]},
            })
    namespace = "bench"
    for i in range(pods):
        volume, claim = f"{namespace}-vol-{i}", f"pvc-{i}"
        spec = {
            "accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Gi"},
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": namespace,
                         "name": claim, "uid": f"uid-{claim}"},
        }
        if kind == "csi":
            spec["csi"] = {"driver": DRIVER, "volumeHandle": f"vol-{i}"}
        else:
            spec["awsElasticBlockStore"] = {"volumeID": f"vol-{i}"}
        items.append({"apiVersion": "v1", "kind": "PersistentVolume",
                      "metadata": {"name": volume}, "spec": spec,
                      "status": {"phase": "Bound"}})
        items.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace, "uid": f"uid-{claim}",
                         "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadOnlyMany"],
                     "resources": {"requests": {"storage": "1Gi"}}, "volumeName": volume},
            "status": {"phase": "Bound"},
        })
    resources = {"cpu": "100m", "memory": "500Mi"}
    for i in range(pods):
        items.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i:05}", "namespace": namespace},
            "spec": {
                "containers": [{"name": "pause", "image": "k8s.gcr.io/pause:3.2",
                                "ports": [{"containerPort": 80}],
                                "resources": {"requests": resources, "limits": resources}}],
                "volumes": [{"name": "vol", "persistentVolumeClaim": {"claimName": f"pvc-{i}"}}],
            },
        })
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


if __name__ == "__main__":
    main()
