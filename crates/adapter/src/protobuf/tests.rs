use std::collections::BTreeMap;

use prost::Message;

use super::meta::{ObjectMeta, Quantity};
use super::pod::{Container, Pod, PodSpec, ResourceRequirements};
use super::*;

/// A length-delimited field.
pub(super) fn field(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_varint((number << 3) | u64::from(LENGTH_DELIMITED), &mut out);
    prost::encoding::encode_varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

/// `k8s\0` and a `runtime.Unknown` around `raw`, as the API server sends an object.
pub(super) fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = field(1, b"v1");
    type_meta.extend(field(2, kind.as_bytes()));
    let mut out = MAGIC.to_vec();
    out.extend(field(1, &type_meta));
    out.extend(field(2, raw));
    out
}

fn pod(name: &str, cpu: &str) -> Pod {
    Pod {
        metadata: Some(ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("shop".to_string()),
            resource_version: Some("41".to_string()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: Some("app".to_string()),
                resources: Some(ResourceRequirements {
                    requests: BTreeMap::from([(
                        "cpu".to_string(),
                        Quantity {
                            string: Some(cpu.to_string()),
                        },
                    )]),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn pod_list(version: &str, pods: &[Pod]) -> Vec<u8> {
    let mut list = field(1, &field(2, version.as_bytes()));
    for p in pods {
        list.extend(field(2, &p.encode_to_vec()));
    }
    envelope("PodList", &list)
}

fn watch_frame(kind: &str, object: &[u8]) -> Vec<u8> {
    let mut event = field(1, kind.as_bytes());
    event.extend(field(2, &field(1, object)));
    let mut out = (event.len() as u32).to_be_bytes().to_vec();
    out.extend(event);
    out
}

#[test]
fn a_list_hands_out_its_items_in_order_with_its_version() {
    let body = pod_list("17", &[pod("a", "100m"), pod("b", "2")]);
    let mut seen = Vec::new();
    let version = for_each_item(&body, |item| {
        seen.push(Pod::decode(item)?);
        Ok(())
    })
    .unwrap();
    assert_eq!(version, "17");
    assert_eq!(seen, [pod("a", "100m"), pod("b", "2")]);
}

#[test]
fn an_empty_list_still_has_a_version_and_a_list_without_one_is_an_error() {
    let mut count = 0;
    assert_eq!(
        for_each_item(&pod_list("3", &[]), |_| {
            count += 1;
            Ok(())
        })
        .unwrap(),
        "3"
    );
    assert_eq!(count, 0);
    let no_version = envelope("PodList", &field(2, &pod("a", "1").encode_to_vec()));
    assert!(matches!(
        for_each_item(&no_version, |_| Ok(())),
        Err(ProtoError::NoVersion)
    ));
}

#[test]
fn json_or_cut_bytes_are_errors_not_panics() {
    assert!(matches!(
        for_each_item(br#"{"kind":"PodList"}"#, |_| Ok(())),
        Err(ProtoError::NoMagic)
    ));
    let body = pod_list("17", &[pod("a", "100m")]);
    for cut in MAGIC.len()..body.len() {
        let _ = for_each_item(&body[..cut], |item| {
            Pod::decode(item)?;
            Ok(())
        });
    }
    let mut long_varint = MAGIC.to_vec();
    long_varint.extend([0xff; 11]);
    assert!(for_each_item(&long_varint, |_| Ok(())).is_err());
}

#[test]
fn fields_the_scheduler_does_not_read_are_skipped() {
    let mut raw = pod("a", "1").encode_to_vec();
    // managedFields (ObjectMeta field 17) inside the metadata, and unknown fields of every
    // wire type on the pod itself.
    let mut meta = ObjectMeta {
        name: Some("a".to_string()),
        ..Default::default()
    }
    .encode_to_vec();
    meta.extend(field(17, b"\x0a\x05apply"));
    raw.extend(field(1, &meta));
    raw.extend([(12 << 3) | VARINT, 0x96, 0x01]);
    raw.extend([(13 << 3) | FIXED64, 1, 2, 3, 4, 5, 6, 7, 8]);
    raw.extend([(14 << 3) | FIXED32, 1, 2, 3, 4]);
    raw.extend(field(15, b"status"));
    let decoded = Pod::decode(raw.as_slice()).unwrap();
    assert_eq!(decoded.spec, pod("a", "1").spec);
    assert_eq!(decoded.metadata.and_then(|m| m.name).as_deref(), Some("a"));
    let fields: Vec<u64> = super::fields(&raw).map(|f| f.unwrap().0).collect();
    assert_eq!(fields, [1, 2, 1, 15]);
}

#[test]
fn watch_frames_are_found_whatever_the_chunks() {
    let mut body = watch_frame("ADDED", &envelope("Pod", &pod("a", "1").encode_to_vec()));
    body.extend(watch_frame(
        "MODIFIED",
        &envelope("Pod", &pod("a", "2").encode_to_vec()),
    ));
    for chunk in [1, 3, 7, body.len()] {
        let mut frames = Frames::default();
        let mut events = Vec::new();
        for piece in body.chunks(chunk) {
            frames.push(piece);
            while let Some(frame) = frames.pop() {
                let (kind, object) = watch_event(frame.unwrap()).unwrap();
                events.push((kind, Pod::decode(object).unwrap()));
            }
        }
        assert!(!frames.is_partial());
        assert_eq!(
            events,
            [
                (EventType::Added, pod("a", "1")),
                (EventType::Modified, pod("a", "2"))
            ],
            "chunks of {chunk}"
        );
    }
}

#[test]
fn a_cut_frame_waits_and_an_absurd_length_is_refused() {
    let body = watch_frame("DELETED", &envelope("Pod", &pod("a", "1").encode_to_vec()));
    let mut frames = Frames::default();
    frames.push(&body[..body.len() - 1]);
    assert!(frames.pop().is_none());
    assert!(frames.is_partial());
    let mut frames = Frames::default();
    frames.push(&u32::MAX.to_be_bytes());
    assert!(matches!(
        frames.pop(),
        Some(Err(ProtoError::FrameTooLarge(_)))
    ));
}

#[test]
fn bookmarks_errors_and_unknown_event_types() {
    let bookmark = ObjectMeta {
        resource_version: Some("99".to_string()),
        ..Default::default()
    };
    let frame = watch_frame(
        "BOOKMARK",
        &envelope("Pod", &field(1, &bookmark.encode_to_vec())),
    );
    let (kind, object) = watch_event(&frame[4..]).unwrap();
    assert_eq!(kind, EventType::Bookmark);
    assert_eq!(resource_version(object).unwrap().as_deref(), Some("99"));

    let gone = meta::Status {
        message: Some("too old resource version: 1 (40)".to_string()),
        reason: Some("Expired".to_string()),
        code: Some(410),
    };
    let frame = watch_frame("ERROR", &envelope("Status", &gone.encode_to_vec()));
    let (kind, object) = watch_event(&frame[4..]).unwrap();
    assert_eq!(kind, EventType::Error);
    assert_eq!(
        status(object).unwrap(),
        (410, "too old resource version: 1 (40)".to_string())
    );

    let frame = watch_frame("RESIZED", &envelope("Pod", b""));
    assert!(matches!(
        watch_event(&frame[4..]),
        Err(ProtoError::EventType(t)) if t == "RESIZED"
    ));
}

#[test]
fn decoded_objects_become_the_apis_types() {
    use k8s_openapi::api::core::v1 as api;
    let p: api::Pod = pod("a", "250m").into();
    assert_eq!(p.metadata.name.as_deref(), Some("a"));
    assert_eq!(
        p.metadata.labels, None,
        "no labels is an absent map, as in JSON"
    );
    let spec = p.spec.unwrap();
    assert_eq!(spec.init_containers, None);
    let requests = spec.containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .unwrap();
    assert_eq!(requests["cpu"].0, "250m");

    // Go's plain strings arrive even when empty; JSON leaves them out.
    let mut unbound = pod("b", "1");
    if let Some(spec) = unbound.spec.as_mut() {
        spec.node_name = Some(String::new());
        spec.scheduler_name = Some(String::new());
    }
    let spec = api::Pod::from(unbound).spec.unwrap();
    assert_eq!((spec.node_name, spec.scheduler_name), (None, None));

    let time = meta::Time {
        seconds: Some(1_700_000_000),
        nanos: Some(5),
    };
    assert_eq!(
        time.into_api().map(|t| t.0.as_second()),
        Some(1_700_000_000)
    );
    let never = meta::Time {
        seconds: Some(i64::MAX),
        nanos: None,
    };
    assert_eq!(never.into_api(), None);
}

#[test]
fn tags_match_kubernetes_generated_proto() {
    // Written by hand from core/v1's generated.proto, not with the structs under test: a
    // pod with metadata (1) { name (1), namespace (3) } and spec (2) { containers (2) {
    // name (1), restartPolicy (24) }, nodeName (10), schedulerName (19), schedulingGates (38)
    // { name (1) }, resources (40) { requests (2) { key (1), value (2) { string (1) } } } }.
    let mut meta = field(1, b"web");
    meta.extend(field(3, b"shop"));
    let mut container = field(1, b"app");
    container.extend(field(24, b"Always"));
    let mut spec = field(2, &container);
    spec.extend(field(10, b"n1"));
    spec.extend(field(19, b"gantry"));
    spec.extend(field(38, &field(1, b"wait")));
    let mut cpu = field(1, b"cpu");
    cpu.extend(field(2, &field(1, b"12")));
    spec.extend(field(40, &field(2, &cpu)));
    let mut raw = field(1, &meta);
    raw.extend(field(2, &spec));
    let p: k8s_openapi::api::core::v1::Pod = Pod::decode(raw.as_slice()).unwrap().into();
    assert_eq!(p.metadata.name.as_deref(), Some("web"));
    assert_eq!(p.metadata.namespace.as_deref(), Some("shop"));
    let spec = p.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("n1"));
    assert_eq!(spec.scheduler_name.as_deref(), Some("gantry"));
    assert_eq!(spec.containers[0].restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.scheduling_gates.unwrap()[0].name, "wait");
    let pod_level = spec.resources.and_then(|r| r.requests).unwrap_or_default();
    assert_eq!(pod_level.get("cpu").map(|q| q.0.as_str()), Some("12"));
    assert_eq!(object_key(&raw), "shop/web");
}

#[test]
fn an_object_that_cannot_be_decoded_is_still_named() {
    // A label value that is not UTF-8 (Go's protobuf lets it through).
    let mut meta = field(1, b"web");
    meta.extend(field(3, b"shop"));
    let mut label = field(1, b"app");
    label.extend(field(2, b"\xff\xfe"));
    meta.extend(field(11, &label));
    let raw = field(1, &meta);
    assert!(Pod::decode(raw.as_slice()).is_err());
    assert_eq!(object_key(&raw), "shop/web");
    assert_eq!(object_key(b"\xff"), "?");
}

#[test]
fn go_zero_time_is_no_time() {
    let zero = meta::Time {
        seconds: None,
        nanos: None,
    };
    assert_eq!(zero.into_api(), None);
}

/// A varint field holding a boolean, as Go writes its plain `bool`s (false included).
fn flag(number: u64, value: bool) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_varint((number << 3) | u64::from(VARINT), &mut out);
    out.push(u8::from(value));
    out
}

#[test]
fn volumes_read_as_protobuf_equal_what_json_gives() {
    // Written by hand from core/v1's generated.proto, as Go writes them (empty strings and
    // false flags included): PodSpec.volumes (1), each a Volume { name (1), volumeSource (2)
    // }, with one VolumeSource field each, and fields the model does not read around those
    // it reads.
    let source = |tag: u64, fields: &[Vec<u8>]| field(tag, &fields.concat());
    let sources = [
        (
            "data",
            source(10, &[field(1, b"data-claim"), flag(2, false)]),
        ),
        (
            "scratch",
            // ephemeral (29) { volumeClaimTemplate (1) { spec (2) { accessModes (1) } } }
            source(29, &[field(1, &field(2, &field(1, b"ReadWriteOnce")))]),
        ),
        (
            "pd",
            source(3, &[field(1, b"disk-1"), field(2, b"ext4"), flag(4, true)]),
        ),
        (
            "ebs",
            source(4, &[field(1, b"aws://us-east-1a/vol-1"), flag(4, false)]),
        ),
        (
            "ceph",
            source(
                11,
                &[
                    field(1, b"m1:6789"),
                    field(1, b"m2:6789"),
                    field(2, b"img"),
                    field(4, b""),
                    field(5, b"admin"),
                    flag(8, false),
                ],
            ),
        ),
        (
            "target",
            source(
                8,
                &[
                    field(1, b"10.0.0.1:3260"),
                    field(2, b"iqn.2001-04.com.example:storage"),
                    flag(6, true),
                ],
            ),
        ),
        (
            "azure",
            source(
                22,
                &[field(1, b"d1"), field(2, b"/subscriptions/s/disks/d1")],
            ),
        ),
        ("cinder", source(13, &[field(1, b"c-1"), flag(3, false)])),
        ("vsphere", source(20, &[field(1, b"[ds] vols/v.vmdk")])),
        ("px", source(24, &[field(1, b"px-1"), flag(3, false)])),
        // configMap (19) { localObjectReference (1) { name (1) } }: not read, still a volume.
        ("config", source(19, &[field(1, &field(1, b"settings"))])),
    ];
    let mut meta = field(1, b"web");
    meta.extend(field(3, b"shop"));
    let mut spec = Vec::new();
    for (name, source) in &sources {
        let mut volume = field(1, name.as_bytes());
        volume.extend(field(2, source));
        spec.extend(field(1, &volume));
    }
    spec.extend(field(2, &field(1, b"app")));
    let mut raw = field(1, &meta);
    raw.extend(field(2, &spec));
    let proto = gantry_core::model::PodInfo::from_api(&Pod::decode(raw.as_slice()).unwrap().into())
        .unwrap()
        .volumes;

    let json: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                    "spec": {"accessModes": ["ReadWriteOnce"]}}}},
                {"name": "pd", "gcePersistentDisk": {"pdName": "disk-1", "fsType": "ext4",
                    "readOnly": true}},
                {"name": "ebs", "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}},
                {"name": "ceph", "rbd": {"monitors": ["m1:6789", "m2:6789"], "image": "img",
                    "user": "admin"}},
                {"name": "target", "iscsi": {"targetPortal": "10.0.0.1:3260",
                    "iqn": "iqn.2001-04.com.example:storage", "lun": 0, "readOnly": true}},
                {"name": "azure", "azureDisk": {"diskName": "d1",
                    "diskURI": "/subscriptions/s/disks/d1"}},
                {"name": "cinder", "cinder": {"volumeID": "c-1"}},
                {"name": "vsphere", "vsphereVolume": {"volumePath": "[ds] vols/v.vmdk"}},
                {"name": "px", "portworxVolume": {"volumeID": "px-1"}},
                {"name": "config", "configMap": {"name": "settings"}}
            ],
            "containers": [{"name": "app"}]
        }
    }))
    .unwrap();
    let from_json = gantry_core::model::PodInfo::from_api(&json)
        .unwrap()
        .volumes;
    assert_eq!(proto, from_json);
    assert_eq!(
        (
            proto.count,
            proto.claims.len(),
            proto.disks.len(),
            proto.inline.len()
        ),
        (11, 2, 4, 6),
        "{proto:#?}"
    );
    assert_eq!(proto.claims[1].name, "web-scratch");
}

#[test]
fn what_preemption_reads_of_a_pod_is_decoded() {
    use super::meta::Time;
    use super::pod::{ContainerStatus, PodCondition, PodStatus};
    let mut p = pod("a", "1");
    if let Some(spec) = p.spec.as_mut() {
        spec.preemption_policy = Some("Never".to_string());
    }
    p.status = Some(PodStatus {
        conditions: vec![PodCondition {
            type_: Some("DisruptionTarget".to_string()),
            status: Some("True".to_string()),
            reason: Some("PreemptionByScheduler".to_string()),
        }],
        start_time: Some(Time {
            seconds: Some(1_700_000_000),
            nanos: Some(5),
        }),
        nominated_node_name: Some("n1".to_string()),
        container_statuses: vec![ContainerStatus {
            name: Some("app".to_string()),
            allocated_resources: BTreeMap::from([(
                "cpu".to_string(),
                Quantity {
                    string: Some("3".to_string()),
                },
            )]),
            resources: None,
        }],
        ..Default::default()
    });
    let api: k8s_openapi::api::core::v1::Pod =
        Pod::decode(p.encode_to_vec().as_slice()).unwrap().into();
    let info = gantry_core::model::PodInfo::from_api(&api).unwrap();
    assert!(info.never_preempts && info.preempted_by_scheduler);
    assert_eq!(
        info.requests.milli_cpu, 3000,
        "the resize's allocation counts"
    );
    assert_eq!(info.start_time, Some((1_700_000_000, 5)));
    assert_eq!(info.nominated_node.as_deref(), Some("n1"));
}
