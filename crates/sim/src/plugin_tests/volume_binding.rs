use std::time::Duration;

use crate::{ClusterInput, Report, simulate};
use gantry_core::config::Config;
use gantry_core::framework::PreBindAction;
use gantry_core::scheduler::{Attempt, Scheduler};

/// Two zones of one node each; `local` binds on first consumer (no provisioner), `zonal`
/// provisions in zone `a` only, `fast` binds at once.
const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1, labels: {zone: a, kubernetes.io/hostname: n1}}
  status: {allocatable: {cpu: "8", memory: 16Gi, pods: "20"}}
- apiVersion: v1
  kind: Node
  metadata: {name: n2, labels: {zone: b, kubernetes.io/hostname: n2}}
  status: {allocatable: {cpu: "8", memory: 16Gi, pods: "20"}}
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: local}
  provisioner: kubernetes.io/no-provisioner
  volumeBindingMode: WaitForFirstConsumer
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: zonal}
  provisioner: example.com/disk
  volumeBindingMode: WaitForFirstConsumer
  allowedTopologies: [{matchLabelExpressions: [{key: zone, values: [a]}]}]
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: fast}
  provisioner: example.com/disk
  volumeBindingMode: Immediate
"#;

fn local_pv(name: &str, node: &str, size: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: PersistentVolume
  metadata: {{name: {name}}}
  spec:
    storageClassName: local
    capacity: {{storage: {size}}}
    accessModes: [ReadWriteOnce]
    local: {{path: /mnt/{name}}}
    nodeAffinity: {{required: {{nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]}}]}}}}
  status: {{phase: Available}}
"#
    )
}

fn claim(name: &str, class: &str, size: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {{name: {name}, namespace: default, uid: uid-{name}}}
  spec: {{storageClassName: {class}, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: {size}}}}}}}
"#
    )
}

fn pod_using(name: &str, claim: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Pod
  metadata: {{name: {name}, namespace: default}}
  spec:
    containers: [{{name: c, image: app:1, resources: {{requests: {{cpu: 100m}}}}}}]
    volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]
"#
    )
}

fn run(extra: &[String]) -> Report {
    let mut input = ClusterInput::default();
    let text = format!("{CLUSTER}{}", extra.concat());
    input.add_yaml(&text, "test").expect("valid input");
    let config = Config::default_with(&gantry_core::plugins::registry()).expect("defaults");
    let report = simulate(&input, config, None);
    assert!(report.invalid.is_empty(), "{:?}", report.invalid);
    report
}

fn outcome<'a>(report: &'a Report, pod: &str) -> &'a crate::PodOutcome {
    report
        .pods
        .iter()
        .find(|p| p.name == pod)
        .expect("pod in report")
}

#[test]
fn each_replica_lands_on_the_node_of_the_volume_it_gets() {
    let report = run(&[
        local_pv("pv-a", "n1", "10Gi"),
        local_pv("pv-b", "n2", "10Gi"),
        claim("data-0", "local", "5Gi"),
        claim("data-1", "local", "5Gi"),
        claim("data-2", "local", "5Gi"),
        pod_using("web-0", "data-0"),
        pod_using("web-1", "data-1"),
        pod_using("web-2", "data-2"),
    ]);
    let mut placed: Vec<(String, String)> = ["web-0", "web-1"]
        .iter()
        .map(|p| {
            let o = outcome(&report, p);
            let volume = o.volumes.values().next().cloned().unwrap_or_default();
            (o.node.clone().unwrap_or_default(), volume)
        })
        .collect();
    placed.sort();
    assert_eq!(
        placed,
        [("n1".into(), "pv-a".into()), ("n2".into(), "pv-b".into())]
    );
    let last = outcome(&report, "web-2");
    assert_eq!(last.node, None, "no volume is given twice");
    assert_eq!(
        last.message.as_deref(),
        Some(
            "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
}

#[test]
fn a_missing_claim_leaves_the_pod_pending_with_kube_schedulers_message() {
    let report = run(&[pod_using("web-0", "missing")]);
    let o = outcome(&report, "web-0");
    assert_eq!(o.node, None);
    assert_eq!(
        o.message.as_deref(),
        Some(
            "0/2 nodes are available: persistentvolumeclaim \"missing\" not found. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
}

#[test]
fn an_unbound_claim_of_an_immediate_class_waits_for_the_pv_controller() {
    let report = run(&[claim("data", "fast", "1Gi"), pod_using("web-0", "data")]);
    assert_eq!(
        outcome(&report, "web-0").message.as_deref(),
        Some(
            "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
}

#[test]
fn a_bound_volume_pins_the_pod_to_where_it_can_be_reached() {
    let bound = r#"
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: pv-b}
  spec:
    capacity: {storage: 1Gi}
    accessModes: [ReadWriteOnce]
    claimRef: {namespace: default, name: data, uid: uid-data}
    nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [b]}]}]}}
  status: {phase: Bound}
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {name: data, namespace: default, uid: uid-data, annotations: {pv.kubernetes.io/bind-completed: "yes"}}
  spec: {volumeName: pv-b, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"#;
    let report = run(&[bound.to_string(), pod_using("web-0", "data")]);
    let o = outcome(&report, "web-0");
    assert_eq!(o.node.as_deref(), Some("n2"));
    assert!(o.volumes.is_empty(), "nothing to bind: the claim was bound");
}

#[test]
fn a_claim_to_provision_gets_a_node_its_class_allows() {
    let report = run(&[claim("data", "zonal", "1Gi"), pod_using("web-0", "data")]);
    let o = outcome(&report, "web-0");
    assert_eq!(o.node.as_deref(), Some("n1"));
    assert_eq!(
        o.volumes.get("data").map(String::as_str),
        Some("provisioned on n1")
    );
}

#[test]
fn a_failed_binding_gives_the_volume_back() {
    let mut input = ClusterInput::default();
    let text = format!(
        "{CLUSTER}{}{}{}",
        local_pv("pv-a", "n1", "10Gi"),
        claim("data-0", "local", "5Gi"),
        pod_using("web-0", "data-0")
    );
    input.add_yaml(&text, "test").unwrap();
    let config = Config::default_with(&gantry_core::plugins::registry()).unwrap();
    let mut s = Scheduler::new(config, None);
    let now = Duration::ZERO;
    struct Strict<'a>(&'a mut Scheduler);
    impl gantry_core::kinds::Target for Strict<'_> {
        fn scheduler(&mut self) -> &mut Scheduler {
            self.0
        }
    }
    impl crate::Loader for Strict<'_> {
        fn invalid(&mut self, error: String) {
            panic!("{error}");
        }
    }
    input.apply_objects(&mut Strict(&mut s), now);
    let pod = std::sync::Arc::new(gantry_core::model::PodInfo::from_api(&input.pods[0]).unwrap());
    s.upsert_pod(pod, now).unwrap();
    let Some(Attempt::Scheduled(task, _)) = s.schedule_next(now) else {
        panic!("the pod fits on n1");
    };
    let reserved = |s: &Scheduler| {
        s.cache()
            .storage()
            .volume("pv-a")
            .is_some_and(|v| v.claim_ref.is_some())
    };
    assert!(reserved(&s), "the chosen volume is assumed for the claim");
    let [PreBindAction::BindVolumes(binding)] = task.plan.pre_bind.as_slice() else {
        panic!(
            "PreBind asks for the volume to be bound: {:?}",
            task.plan.pre_bind
        );
    };
    assert_eq!(binding.timeout, Duration::from_secs(600));
    assert_eq!(
        binding.claims,
        [("default".to_string(), "data-0".to_string())]
    );
    s.binding_failed(*task, now);
    assert!(!reserved(&s), "a failed binding gives the volume back");
}

/// `capped` provisions through a CSI driver; with `reports` true the driver reports its
/// free storage, which `capacities` (each a zone and a size) describe.
fn capped(reports: bool, capacities: &[(&str, &str)]) -> Vec<String> {
    let mut objects = vec![format!(
        r#"
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {{name: capped}}
  provisioner: csi.example.com
  volumeBindingMode: WaitForFirstConsumer
- apiVersion: storage.k8s.io/v1
  kind: CSIDriver
  metadata: {{name: csi.example.com}}
  spec: {{storageCapacity: {reports}}}
"#
    )];
    for (i, (zone, size)) in capacities.iter().enumerate() {
        objects.push(format!(
            r#"
- apiVersion: storage.k8s.io/v1
  kind: CSIStorageCapacity
  metadata: {{name: cap-{i}, namespace: kube-system}}
  storageClassName: capped
  capacity: {size}
  nodeTopology: {{matchLabels: {{zone: {zone}}}}}
"#
        ));
    }
    objects
}

#[test]
fn provisioning_needs_reported_room_where_the_driver_reports_capacity() {
    let with = |reports, capacities: &[(&str, &str)], size| {
        let mut objects = capped(reports, capacities);
        objects.push(claim("data", "capped", size));
        objects.push(pod_using("web-0", "data"));
        let report = run(&objects);
        let o = outcome(&report, "web-0");
        (o.node.clone(), o.message.clone())
    };
    let room = [("a", "1Gi"), ("b", "10Gi")];
    assert_eq!(with(true, &room, "5Gi").0.as_deref(), Some("n2"));
    let (node, message) = with(true, &room, "20Gi");
    assert_eq!(node, None);
    assert_eq!(
        message.as_deref(),
        Some(
            "0/2 nodes are available: 2 node(s) did not have enough free storage. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
    assert!(
        with(false, &room, "20Gi").0.is_some(),
        "a driver that reports nothing is not held to reports"
    );
    assert_eq!(
        with(true, &[], "1Gi").1.as_deref(),
        Some(
            "0/2 nodes are available: 2 node(s) did not have enough free storage. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        ),
        "a reporting driver without a report has no room"
    );
}

#[test]
fn a_claim_without_a_request_is_not_held_to_reported_capacity() {
    let mut objects = capped(true, &[]);
    objects.push(
        r#"
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {name: data, namespace: default, uid: uid-data}
  spec: {storageClassName: capped, accessModes: [ReadWriteOnce]}
"#
        .to_string(),
    );
    objects.push(pod_using("web-0", "data"));
    assert!(outcome(&run(&objects), "web-0").node.is_some());
}
