//! The plugins' behaviour through the simulator, which loads clusters from YAML: tests that
//! need a whole cluster, and the check that every plugin declares the cache state it reads.

mod default_preemption;
mod volume_binding;

use gantry_core::plugins::{default_binder, priority_sort, registry, zone_policy};

/// A cluster that gives every plugin something to read: zones, images, taints, GPUs and
/// load on the nodes; labelled namespaces and a Service; a claim bound to a zoned CSI
/// volume, a storage class and a CSINode with an attach limit; running pods with labels,
/// affinity and volumes; pending pods with pod (anti-)affinity, namespace selectors,
/// spreading (explicit and default), images, GPUs, a claim and an inline disk.
const EVERYTHING: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: shop, labels: {team: shop}}}
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec: {selector: {app: web}}
- apiVersion: policy/v1
  kind: PodDisruptionBudget
  metadata: {name: db, namespace: shop}
  spec: {minAvailable: 1, selector: {matchLabels: {app: db}}}
  status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}
- apiVersion: v1
  kind: Node
  metadata:
    name: a1
    labels: {topology.kubernetes.io/zone: a, kubernetes.io/hostname: a1, nvidia.com/gpu.product: T4}
    annotations: {gantry.io/cpu-utilization: "0.2", gantry.io/memory-utilization: "0.3"}
  spec: {taints: [{key: spot, value: "1", effect: PreferNoSchedule}]}
  status:
    allocatable: {cpu: "8", memory: 16Gi, pods: "20", nvidia.com/gpu: "2"}
    images: [{names: ["registry.example/web:1"], sizeBytes: 500000000}]
- apiVersion: v1
  kind: Node
  metadata:
    name: b1
    labels: {topology.kubernetes.io/zone: b, kubernetes.io/hostname: b1}
  status:
    allocatable: {cpu: "8", memory: 16Gi, pods: "20"}
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: fast}
  provisioner: ebs.csi.aws.com
  volumeBindingMode: WaitForFirstConsumer
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: pv-data, labels: {topology.kubernetes.io/zone: b}}
  spec:
    capacity: {storage: 10Gi}
    accessModes: [ReadWriteOnce]
    storageClassName: fast
    claimRef: {namespace: shop, name: data}
    csi: {driver: ebs.csi.aws.com, volumeHandle: vol-data}
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {name: data, namespace: shop, annotations: {pv.kubernetes.io/bind-completed: "yes"}}
  spec:
    accessModes: [ReadWriteOnce]
    storageClassName: fast
    volumeName: pv-data
    resources: {requests: {storage: 10Gi}}
- apiVersion: storage.k8s.io/v1
  kind: CSINode
  metadata: {name: b1}
  spec: {drivers: [{name: ebs.csi.aws.com, nodeID: b1, allocatable: {count: 2}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: db, namespace: shop, labels: {app: db}}
  spec:
    nodeName: b1
    containers: [{name: c, image: db:1, resources: {requests: {cpu: "1"}}}]
    volumes: [{name: d, persistentVolumeClaim: {claimName: data}}, {name: pd, gcePersistentDisk: {pdName: disk-1}}]
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: batch}}}
      podAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 10
          podAffinityTerm: {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: web}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: web-0, namespace: shop, labels: {app: web}}
  spec:
    containers: [{name: c, image: "registry.example/web:1", resources: {requests: {cpu: "1"}}}]
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: topology.kubernetes.io/zone
          labelSelector: {matchLabels: {app: db}}
          namespaceSelector: {matchLabels: {team: shop}}
- apiVersion: v1
  kind: Pod
  metadata: {name: web-1, namespace: shop, labels: {app: web}}
  spec:
    containers: [{name: c, image: "registry.example/web:1", resources: {requests: {cpu: "1"}}}]
    topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: web-2, namespace: shop, labels: {app: web}}
  spec:
    containers: [{name: c, image: "registry.example/web:1", resources: {requests: {cpu: "1", nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: batch, namespace: shop, labels: {app: batch}}
  spec:
    containers: [{name: c, image: batch:1, resources: {requests: {cpu: "1"}}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: reader, namespace: shop, labels: {app: reader}}
  spec:
    containers: [{name: c, image: reader:1, resources: {requests: {cpu: "1"}}}]
    volumes: [{name: d, persistentVolumeClaim: {claimName: data}}, {name: pd, gcePersistentDisk: {pdName: disk-1, readOnly: true}}]
"#;

#[test]
fn every_plugin_declares_the_cache_state_it_reads() {
    // A profile of one plugin (with the sort and binder a profile needs) keeps only the
    // state that plugin declares; a read of anything else fails a debug assertion.
    let mut input = crate::ClusterInput::default();
    input
        .add_yaml(EVERYTHING, "everything")
        .expect("valid input");
    for name in registry().names() {
        // A QueueSort plugin stands in for PrioritySort: a profile has one.
        let sorts = registry().get(name).expect("registered")(None)
            .is_ok_and(|p| p.as_queue_sort().is_some());
        let mut enabled = vec![default_binder::NAME];
        if !sorts {
            enabled.push(priority_sort::NAME);
        }
        if !enabled.contains(&name) {
            enabled.push(name);
        }
        let enabled = enabled
            .iter()
            .map(|n| format!("{{name: {n}}}"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      disabled: [{{name: '*'}}]
      enabled: [{enabled}]
  pluginConfig:
  - name: {}
    args:
      rules:
      - name: shop
        namespaceSelector: {{matchLabels: {{team: shop}}}}
        preferred: [{{weight: 10, zones: [a]}}]
",
            zone_policy::NAME,
        );
        let config = gantry_core::config::Config::parse(&config, &registry())
            .unwrap_or_else(|e| panic!("a profile of {name}: {e}"));
        let tracked = gantry_core::scheduler::Scheduler::new(config.clone(), None)
            .cache()
            .tracked();
        let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::simulate(&input, config, None)
        }))
        .unwrap_or_else(|_| panic!("{name} reads state it does not declare ({tracked:?})"));
        assert!(report.invalid.is_empty(), "{name}: {:?}", report.invalid);
    }
}
