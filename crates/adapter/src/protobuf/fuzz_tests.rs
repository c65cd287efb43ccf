//! Properties of the protobuf reader: pod and node lists, watch streams split into frames at
//! any chunk boundary, and single objects read back what was encoded; no bytes, arbitrary or
//! a valid encoding mutated, make any reader (or the conversion into the model) panic.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as api;
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message;

use super::meta::{ObjectMeta, OwnerReference, Quantity, Time};
use super::node::{Node, NodeSpec, NodeStatus, Taint};
use super::pod::{
    Container, ContainerPort, ContainerRestartRule, Pod, PodSpec, ResourceRequirements,
    TopologySpreadConstraint,
};
use super::tests::{envelope, field};
use super::volume::{
    AwsElasticBlockStoreVolumeSource, AzureDiskVolumeSource, CinderVolumeSource,
    EphemeralVolumeSource, GcePersistentDiskVolumeSource, IscsiVolumeSource,
    PersistentVolumeClaimVolumeSource, PortworxVolumeSource, RbdVolumeSource, Volume, VolumeSource,
    VsphereVirtualDiskVolumeSource,
};
use super::*;
use crate::watch::LeanPod;
use gantry_core::model::NodeModel;
use gantry_test_support::fuzz;

fn short() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-z0-9-]{0,12}", 1 => any::<String>()]
}

fn quantities() -> impl Strategy<Value = BTreeMap<String, Quantity>> {
    prop::collection::btree_map(
        prop_oneof![
            Just("cpu".to_string()),
            Just("memory".to_string()),
            Just("pods".to_string()),
            short()
        ],
        fuzz::quantity_like().prop_map(|q| Quantity { string: Some(q) }),
        0..3,
    )
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(short(), short(), 0..3)
}

fn metadata() -> impl Strategy<Value = ObjectMeta> {
    (
        (
            prop::option::of(short()),
            prop::option::of(short()),
            prop::option::of(short()),
        ),
        prop::option::of("[0-9]{1,9}"),
        prop::option::of((
            prop::option::of(any::<i64>()),
            prop::option::of(any::<i32>()),
        )),
        labels(),
        labels(),
        prop::collection::vec(
            (
                prop::option::of(short()),
                prop::option::of(short()),
                prop::option::of(any::<bool>()),
            ),
            0..2,
        ),
    )
        .prop_map(
            |((name, namespace, uid), version, created, labels, annotations, owners)| ObjectMeta {
                name,
                namespace,
                uid,
                resource_version: version,
                creation_timestamp: created.map(|(seconds, nanos)| Time { seconds, nanos }),
                deletion_timestamp: None,
                labels,
                annotations,
                owner_references: owners
                    .into_iter()
                    .map(|(kind, name, controller)| OwnerReference {
                        kind,
                        name,
                        uid: None,
                        api_version: None,
                        controller,
                    })
                    .collect(),
            },
        )
}

fn container() -> impl Strategy<Value = Container> {
    (
        prop::option::of(short()),
        quantities(),
        quantities(),
        prop::collection::vec(
            (
                prop::option::of(any::<i32>()),
                prop::option::of(any::<i32>()),
            ),
            0..2,
        ),
        prop::option::of(prop_oneof![Just("Always".to_string()), short()]),
        prop::collection::vec(
            prop::option::of(prop_oneof![
                Just("RestartAllContainers".to_string()),
                short()
            ]),
            0..2,
        ),
    )
        .prop_map(
            |(name, requests, limits, ports, restart_policy, rules)| Container {
                name,
                image: Some("app:1".to_string()),
                ports: ports
                    .into_iter()
                    .map(|(host_port, container_port)| ContainerPort {
                        host_port,
                        container_port,
                        protocol: None,
                        host_ip: None,
                    })
                    .collect(),
                resources: Some(ResourceRequirements { limits, requests }),
                restart_policy,
                restart_policy_rules: rules
                    .into_iter()
                    .map(|action| ContainerRestartRule { action })
                    .collect(),
            },
        )
}

/// A volume with any of the sources the model reads, or none of them (as a volume of a
/// source the decoder skips arrives).
fn volume() -> impl Strategy<Value = Volume> {
    let text = || prop::option::of(short());
    let flag = || prop::option::of(any::<bool>());
    (
        text(),
        prop::option::of(text()),
        any::<bool>(),
        prop::option::of((text(), flag())),
        prop::option::of(text()),
        prop::option::of((prop::collection::vec(short(), 0..3), text(), text(), flag())),
        prop::option::of((text(), flag())),
        (
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
        ),
    )
        .prop_map(
            |(name, claim, ephemeral, gce, ebs, rbd, iscsi, (azure, cinder, vsphere, portworx))| {
                Volume {
                    name,
                    volume_source: Some(VolumeSource {
                        persistent_volume_claim: claim
                            .map(|claim_name| PersistentVolumeClaimVolumeSource { claim_name }),
                        ephemeral: ephemeral.then_some(EphemeralVolumeSource {}),
                        gce_persistent_disk: gce.map(|(pd_name, read_only)| {
                            GcePersistentDiskVolumeSource { pd_name, read_only }
                        }),
                        aws_elastic_block_store: ebs
                            .map(|volume_id| AwsElasticBlockStoreVolumeSource { volume_id }),
                        rbd: rbd.map(|(monitors, image, pool, read_only)| RbdVolumeSource {
                            monitors,
                            image,
                            pool,
                            read_only,
                        }),
                        iscsi: iscsi.map(|(iqn, read_only)| IscsiVolumeSource { iqn, read_only }),
                        azure_disk: azure.map(|disk_uri| AzureDiskVolumeSource { disk_uri }),
                        cinder: cinder.map(|volume_id| CinderVolumeSource { volume_id }),
                        vsphere_volume: vsphere
                            .map(|volume_path| VsphereVirtualDiskVolumeSource { volume_path }),
                        portworx_volume: portworx
                            .map(|volume_id| PortworxVolumeSource { volume_id }),
                    }),
                }
            },
        )
}

fn pod() -> impl Strategy<Value = Pod> {
    (
        metadata(),
        prop::collection::vec(container(), 0..3),
        prop::collection::vec(container(), 0..2),
        labels(),
        (
            prop::option::of(short()),
            prop::option::of(short()),
            prop::option::of(any::<i32>()),
        ),
        quantities(),
        prop::collection::vec(
            (
                prop::option::of(any::<i32>()),
                prop::option::of(short()),
                prop::option::of(short()),
            ),
            0..2,
        ),
        prop::collection::vec(volume(), 0..3),
    )
        .prop_map(
            |(
                metadata,
                containers,
                init_containers,
                node_selector,
                (node, scheduler, priority),
                overhead,
                spread,
                volumes,
            )| Pod {
                metadata: Some(metadata),
                spec: Some(PodSpec {
                    volumes,
                    containers,
                    init_containers,
                    node_selector,
                    node_name: node,
                    scheduler_name: scheduler,
                    priority,
                    overhead,
                    topology_spread_constraints: spread
                        .into_iter()
                        .map(|(max_skew, topology_key, when_unsatisfiable)| {
                            TopologySpreadConstraint {
                                max_skew,
                                topology_key,
                                when_unsatisfiable,
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                }),
                status: None,
            },
        )
}

fn node() -> impl Strategy<Value = Node> {
    (
        metadata(),
        prop::option::of(any::<bool>()),
        prop::collection::vec(
            (
                prop::option::of(short()),
                prop::option::of(short()),
                prop::option::of(short()),
            ),
            0..2,
        ),
        quantities(),
    )
        .prop_map(|(metadata, unschedulable, taints, allocatable)| Node {
            metadata: Some(metadata),
            spec: Some(NodeSpec {
                unschedulable,
                taints: taints
                    .into_iter()
                    .map(|(key, value, effect)| Taint {
                        key,
                        value,
                        effect,
                        ..Default::default()
                    })
                    .collect(),
            }),
            status: Some(NodeStatus {
                allocatable,
                images: Vec::new(),
                declared_features: vec!["RestartAllContainersOnContainerExits".to_string()],
            }),
        })
}

/// A list response: `k8s\0`, a `runtime.Unknown`, the list with its version and items.
fn list(kind: &str, version: &str, items: &[Vec<u8>]) -> Vec<u8> {
    let mut body = field(1, &field(2, version.as_bytes()));
    for item in items {
        body.extend(field(2, item));
    }
    envelope(kind, &body)
}

/// A watch frame: its length, then the event's type and its object in an envelope.
fn frame(kind: &str, object: &[u8]) -> Vec<u8> {
    let mut event = field(1, kind.as_bytes());
    event.extend(field(2, &field(1, &envelope("Pod", object))));
    let mut out = (event.len() as u32).to_be_bytes().to_vec();
    out.extend(event);
    out
}

/// Every reader on `bytes`, with the results thrown away: none may panic.
fn read_everything(bytes: &[u8]) {
    let _ = for_each_item(bytes, |item| {
        if let Ok(pod) = Pod::decode(item) {
            let _ = gantry_core::model::PodInfo::from_api(&api::Pod::from(pod));
        }
        let _ = LeanPod::decode(item);
        if let Ok(node) = Node::decode(item) {
            let _ = NodeModel::from_api(&api::Node::from(node));
        }
        let _ = object_key(item);
        Ok(())
    });
    let _ = unwrap(bytes);
    if let Ok((_, object)) = watch_event(bytes) {
        let _ = LeanPod::decode(object);
        let _ = resource_version(object);
        let _ = status(object);
    }
    let _ = resource_version(bytes);
    let _ = status(bytes);
    let _ = object_key(bytes);
    let mut frames = Frames::default();
    frames.push(bytes);
    for _ in 0..64 {
        match frames.pop() {
            Some(Ok(frame)) => {
                if let Ok((_, object)) = watch_event(frame) {
                    let _ = LeanPod::decode(object);
                }
            }
            _ => break,
        }
    }
    let _ = frames.is_partial();
}

/// One change to a byte string.
#[derive(Debug, Clone)]
enum ByteMutation {
    Flip(Index, u8),
    Set(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
}

fn byte_mutation() -> impl Strategy<Value = ByteMutation> {
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| ByteMutation::Flip(i, b)),
        (
            any::<Index>(),
            prop_oneof![Just(0xff), Just(0x80), Just(0), any::<u8>()]
        )
            .prop_map(|(i, b)| ByteMutation::Set(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteMutation::Insert(i, b)),
        any::<Index>().prop_map(ByteMutation::Remove),
        any::<Index>().prop_map(ByteMutation::Truncate),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &ByteMutation) {
    let len = bytes.len();
    if len == 0 {
        return;
    }
    match m {
        ByteMutation::Flip(i, bit) => bytes[i.index(len)] ^= 1 << bit,
        ByteMutation::Set(i, b) => bytes[i.index(len)] = *b,
        ByteMutation::Insert(i, b) => bytes.insert(i.index(len + 1), *b),
        ByteMutation::Remove(i) => {
            bytes.remove(i.index(len));
        }
        ByteMutation::Truncate(i) => bytes.truncate(i.index(len)),
    }
}

/// A valid encoding of one of the kinds the reader meets.
fn encoding() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (prop::collection::vec(pod(), 0..3), "[0-9]{1,6}").prop_map(|(pods, v)| list(
            "PodList",
            &v,
            &pods.iter().map(Message::encode_to_vec).collect::<Vec<_>>()
        )),
        (prop::collection::vec(node(), 0..3), "[0-9]{1,6}").prop_map(|(nodes, v)| list(
            "NodeList",
            &v,
            &nodes.iter().map(Message::encode_to_vec).collect::<Vec<_>>()
        )),
        prop::collection::vec(
            (
                prop::sample::select(&["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"][..]),
                pod()
            ),
            1..3
        )
        .prop_map(|events| events
            .iter()
            .flat_map(|(k, p)| frame(k, &p.encode_to_vec()))
            .collect()),
        pod().prop_map(|p| envelope("Pod", &p.encode_to_vec())),
    ]
}

proptest! {
    #[test]
    fn fuzz_protobuf_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512), magic in any::<bool>()) {
        let bytes = if magic { [MAGIC, &bytes].concat() } else { bytes };
        read_everything(&bytes);
    }

    #[test]
    fn fuzz_protobuf_mutated_encodings(
        mut bytes in encoding(),
        mutations in prop::collection::vec(byte_mutation(), 1..6),
    ) {
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        read_everything(&bytes);
    }

    #[test]
    fn fuzz_protobuf_lists_read_back_what_was_written(
        pods in prop::collection::vec(pod(), 0..4),
        nodes in prop::collection::vec(node(), 0..4),
        version in "[0-9]{1,9}",
    ) {
        let body = list("PodList", &version, &pods.iter().map(Message::encode_to_vec).collect::<Vec<_>>());
        let mut read = Vec::new();
        let listed = for_each_item(&body, |item| {
            read.push(Pod::decode(item)?);
            Ok(())
        });
        prop_assert_eq!(listed.ok(), Some(version.clone()));
        prop_assert_eq!(&read, &pods);
        let body = list("NodeList", &version, &nodes.iter().map(Message::encode_to_vec).collect::<Vec<_>>());
        let mut read = Vec::new();
        for_each_item(&body, |item| {
            read.push(Node::decode(item)?);
            Ok(())
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&read, &nodes);
        for n in nodes {
            let _ = NodeModel::from_api(&api::Node::from(n));
        }
    }

    #[test]
    fn fuzz_protobuf_watch_frames_survive_any_chunking(
        events in prop::collection::vec((prop::sample::select(&["ADDED", "MODIFIED", "DELETED"][..]), pod()), 1..4),
        cuts in prop::collection::vec(any::<Index>(), 0..6),
    ) {
        let stream: Vec<u8> = events.iter().flat_map(|(k, p)| frame(k, &p.encode_to_vec())).collect();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        cuts.push(0);
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut frames = Frames::default();
        let mut read = Vec::new();
        for pair in cuts.windows(2) {
            frames.push(&stream[pair[0]..pair[1]]);
            while let Some(frame) = frames.pop() {
                let frame = frame.map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (kind, object) = watch_event(frame).map_err(|e| TestCaseError::fail(e.to_string()))?;
                read.push((kind, Pod::decode(object).map_err(|e| TestCaseError::fail(e.to_string()))?));
            }
        }
        prop_assert!(!frames.is_partial());
        let kinds = |k: &str| match k {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            _ => EventType::Deleted,
        };
        let written: Vec<_> = events.into_iter().map(|(k, p)| (kinds(k), p)).collect();
        prop_assert_eq!(read, written);
    }
}
