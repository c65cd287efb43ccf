//! The plugins: kube-scheduler's defaults, and gantry's own. One module per plugin, each
//! holding the plugin, its arguments and its tests.

use crate::framework::Registry;

pub mod balanced_allocation;
pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod gpu_share;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod load_aware;
pub mod node_affinity;
pub mod node_declared_features;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod overcommit;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod resource_allocation;
pub mod scheduling_gates;
pub mod shape;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;
pub mod zone_policy;

/// Every plugin gantry knows, by the name configuration files use.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    for spec in [
        balanced_allocation::SPEC,
        coscheduling::SPEC,
        default_binder::SPEC,
        default_preemption::SPEC,
        dynamic_resources::SPEC,
        gpu_share::SPEC,
        image_locality::SPEC,
        inter_pod_affinity::SPEC,
        load_aware::SPEC,
        node_affinity::SPEC,
        node_declared_features::SPEC,
        node_name::SPEC,
        node_ports::SPEC,
        node_resources_fit::SPEC,
        node_unschedulable::SPEC,
        node_volume_limits::SPEC,
        overcommit::SPEC,
        pod_topology_spread::SPEC,
        priority_sort::SPEC,
        scheduling_gates::SPEC,
        taint_toleration::SPEC,
        volume_binding::SPEC,
        volume_restrictions::SPEC,
        volume_zone::SPEC,
        zone_policy::SPEC,
    ] {
        r.register(spec);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Plugin;

    /// Every registered plugin, built with its default arguments.
    fn every_plugin() -> Vec<std::sync::Arc<dyn Plugin>> {
        let r = registry();
        r.names()
            .map(|name| {
                let factory = r.get(name).expect("registered");
                factory(None).unwrap_or_else(|e| panic!("{name} with default args: {e}"))
            })
            .collect()
    }

    #[test]
    fn every_plugin_that_can_reject_a_pod_declares_the_events_that_may_help_it() {
        let plugins = every_plugin();
        assert!(plugins.len() >= 17);
        // PreEnqueue plugins are asked again whenever their pod changes: the queue does that
        // itself, whatever the cluster does. Nothing gantry sees lets a pod with resource
        // claims in until it allocates them (issue 52).
        let silent: Vec<&str> = plugins
            .iter()
            .filter(|p| p.name() != dynamic_resources::NAME)
            .filter(|p| {
                p.as_pre_filter().is_some()
                    || p.as_filter().is_some()
                    || p.as_reserve().is_some()
                    || p.as_permit().is_some()
            })
            .filter(|p| p.events().is_empty())
            .map(|p| p.name())
            .collect();
        assert!(
            silent.is_empty(),
            "plugins that declare no events: {silent:?}"
        );
    }

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
        let mut input = crate::sim::ClusterInput::default();
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
            let config = crate::config::Config::parse(&config, &registry())
                .unwrap_or_else(|e| panic!("a profile of {name}: {e}"));
            let tracked = crate::scheduler::Scheduler::new(config.clone(), None)
                .cache()
                .tracked();
            let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::sim::simulate(&input, config, None)
            }))
            .unwrap_or_else(|_| panic!("{name} reads state it does not declare ({tracked:?})"));
            assert!(report.invalid.is_empty(), "{name}: {:?}", report.invalid);
        }
    }

    #[test]
    fn the_default_profile_is_kube_schedulers_in_its_order_and_weights() {
        assert_eq!(
            registry().defaults(),
            [
                (scheduling_gates::NAME, None),
                (priority_sort::NAME, None),
                (node_name::NAME, None),
                (node_unschedulable::NAME, None),
                (taint_toleration::NAME, Some(3)),
                (node_affinity::NAME, Some(2)),
                (node_ports::NAME, None),
                (node_resources_fit::NAME, Some(1)),
                (volume_restrictions::NAME, None),
                (node_volume_limits::NAME, None),
                (volume_binding::NAME, None),
                (volume_zone::NAME, None),
                (pod_topology_spread::NAME, Some(2)),
                (inter_pod_affinity::NAME, Some(2)),
                (dynamic_resources::NAME, None),
                (default_preemption::NAME, None),
                (balanced_allocation::NAME, Some(1)),
                (image_locality::NAME, Some(1)),
                (default_binder::NAME, None),
                (node_declared_features::NAME, None),
            ]
        );
    }
}
