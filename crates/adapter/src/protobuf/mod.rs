//! Kubernetes' protobuf encoding, for the lists and watches of pods and nodes.
//!
//! kube-scheduler asks for protobuf by default (`clientConnection.contentType`): the API
//! server encodes an object several times faster than as JSON, and the client decodes it
//! faster too. With thousands of pods bound per second, every bound pod comes back on the
//! scheduler's watch, so this is work taken off the API server on the critical path.
//!
//! The messages (what scheduling reads of each kind, in [`meta`], [`pod`], [`volume`],
//! [`node`]) are declared with their kinds in the core; this module reads the envelope
//! and the watch framing around them.
//!
//! On the wire (`k8s.io/apimachinery/pkg/runtime/serializer/protobuf`):
//! - an object or a list is the four bytes `k8s\0`, then a `runtime.Unknown` whose `raw`
//!   field (2) holds the message;
//! - a watch is a stream of frames, each a four-byte big-endian length and a
//!   `metav1.WatchEvent` (no envelope) whose `object.raw` holds the object in its envelope.

pub use gantry_core::kinds::protobuf::{meta, node, pod, volume};

use prost::Message;

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What precedes every object the API server encodes as protobuf.
const MAGIC: &[u8] = b"k8s\0";

/// Largest watch frame accepted: far above any object the API server can store (etcd's
/// default request limit is 1.5 MiB), low enough that a corrupt length cannot make the
/// reader wait for, or allocate, gigabytes.
const MAX_FRAME: usize = 64 << 20;

/// Why protobuf from the API server could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The bytes do not start with `k8s\0`.
    #[error("not Kubernetes protobuf: the k8s\\0 prefix is missing")]
    NoMagic,
    /// A message is cut short or malformed.
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    /// A message did not decode.
    #[error("malformed protobuf: {0}")]
    Decode(prost::DecodeError),
    /// The list's metadata has no version to watch from.
    #[error("the list has no metadata.resourceVersion")]
    NoVersion,
    /// A watch event with a type this client does not know.
    #[error("unknown watch event type {0:?}")]
    EventType(String),
    /// A watch frame claims to be larger than [`MAX_FRAME`].
    #[error("a watch frame of {0} bytes is larger than the {MAX_FRAME} accepted")]
    FrameTooLarge(usize),
}

impl From<prost::DecodeError> for ProtoError {
    fn from(e: prost::DecodeError) -> Self {
        ProtoError::Decode(e)
    }
}

/// The protobuf wire types this reader meets (groups, long deprecated, are refused).
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const FIXED32: u8 = 5;

/// Reads a base-128 varint from the front of `buf`.
fn varint(buf: &mut &[u8]) -> Result<u64, ProtoError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf
            .split_first()
            .ok_or(ProtoError::Malformed("varint cut short"))?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(ProtoError::Malformed("varint longer than ten bytes"))
}

/// Splits `n` bytes off the front of `buf`.
fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], ProtoError> {
    if buf.len() < n {
        return Err(ProtoError::Malformed("field cut short"));
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// The length-delimited fields at the top level of a message, as (field number, payload),
/// in order, borrowed from `buf`; fields of other wire types are skipped.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = Result<(u64, &[u8]), ProtoError>> {
    std::iter::from_fn(move || {
        while !buf.is_empty() {
            let step = (|| {
                let key = varint(&mut buf)?;
                let (number, wire_type) = (key >> 3, (key & 7) as u8);
                match wire_type {
                    VARINT => varint(&mut buf).map(|_| None),
                    FIXED64 => take(&mut buf, 8).map(|_| None),
                    FIXED32 => take(&mut buf, 4).map(|_| None),
                    LENGTH_DELIMITED => {
                        let len = usize::try_from(varint(&mut buf)?)
                            .map_err(|_| ProtoError::Malformed("length out of range"))?;
                        take(&mut buf, len).map(|payload| Some((number, payload)))
                    }
                    _ => Err(ProtoError::Malformed("unsupported wire type")),
                }
            })();
            match step {
                Ok(None) => continue,
                Ok(Some(field)) => return Some(Ok(field)),
                Err(e) => {
                    buf = &[];
                    return Some(Err(e));
                }
            }
        }
        None
    })
}

/// The message inside an envelope (`k8s\0` and a `runtime.Unknown`).
pub fn unwrap(envelope: &[u8]) -> Result<&[u8], ProtoError> {
    let unknown = envelope.strip_prefix(MAGIC).ok_or(ProtoError::NoMagic)?;
    let mut raw: &[u8] = &[];
    for field in fields(unknown) {
        let (number, payload) = field?;
        if number == 2 {
            raw = payload;
        }
    }
    Ok(raw)
}

/// Reads a list response (`PodList`, `NodeList`, ...), handing the encoding of each item to
/// `each` in order; returns the list's resource version.
pub fn for_each_item(
    body: &[u8],
    mut each: impl FnMut(&[u8]) -> Result<(), ProtoError>,
) -> Result<String, ProtoError> {
    let mut version = None;
    for field in fields(unwrap(body)?) {
        match field? {
            (1, payload) => version = meta::ListMeta::decode(payload)?.resource_version,
            (2, item) => each(item)?,
            _ => {}
        }
    }
    version
        .filter(|v| !v.is_empty())
        .ok_or(ProtoError::NoVersion)
}

/// A watch event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`: only the object's resource version means anything.
    Bookmark,
    /// `ERROR`: the object is a `Status`.
    Error,
}

/// Reads one watch frame: the event's type and its object's encoding.
pub fn watch_event(frame: &[u8]) -> Result<(EventType, &[u8]), ProtoError> {
    let mut kind = None;
    let mut object: &[u8] = &[];
    for field in fields(frame) {
        match field? {
            (1, name) => {
                kind = Some(match name {
                    b"ADDED" => EventType::Added,
                    b"MODIFIED" => EventType::Modified,
                    b"DELETED" => EventType::Deleted,
                    b"BOOKMARK" => EventType::Bookmark,
                    b"ERROR" => EventType::Error,
                    other => {
                        return Err(ProtoError::EventType(
                            String::from_utf8_lossy(other).into_owned(),
                        ));
                    }
                });
            }
            (2, raw_extension) => {
                for inner in fields(raw_extension) {
                    if let (1, envelope) = inner? {
                        object = unwrap(envelope)?;
                    }
                }
            }
            _ => {}
        }
    }
    let kind = kind.ok_or(ProtoError::Malformed("watch event without a type"))?;
    Ok((kind, object))
}

/// The resource version of any object (a bookmark's).
pub fn resource_version(object: &[u8]) -> Result<Option<String>, ProtoError> {
    Ok(meta::MetadataOnly::decode(object)?
        .metadata
        .and_then(|m| meta::text(m.resource_version)))
}

/// `namespace/name` of an object, read field by field and leniently (for messages about an
/// object that cannot be decoded as a whole); `?` for what cannot be read.
pub fn object_key(object: &[u8]) -> String {
    let (namespace, name) = object_names(object);
    let name = name.unwrap_or_else(|| "?".to_string());
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name,
    }
}

/// The namespace and name of an object, read field by field and leniently (for an object
/// that cannot be decoded as a whole); none for what cannot be read.
pub fn object_names(object: &[u8]) -> (Option<String>, Option<String>) {
    let (mut namespace, mut name) = (None, None);
    let metadata = fields(object)
        .map_while(Result::ok)
        .find(|(number, _)| *number == 1);
    if let Some((_, metadata)) = metadata {
        for field in fields(metadata).map_while(Result::ok) {
            match field {
                (1, n) => name = Some(String::from_utf8_lossy(n).into_owned()),
                (3, ns) => namespace = Some(String::from_utf8_lossy(ns).into_owned()),
                _ => {}
            }
        }
    }
    (namespace, name)
}

/// An error `Status`: its code (zero when unset) and message.
pub fn status(object: &[u8]) -> Result<(u16, String), ProtoError> {
    let s = meta::Status::decode(object)?;
    let code = s
        .code
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or_default();
    let message = match (s.message, s.reason) {
        (Some(m), _) if !m.is_empty() => m,
        (_, Some(r)) => r,
        _ => String::new(),
    };
    Ok((code, message))
}

/// Splits a watch response body into frames as its chunks arrive.
#[derive(Debug, Default)]
pub struct Frames {
    buf: Vec<u8>,
    start: usize,
}

impl Frames {
    /// Adds a chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole frame, if one has arrived.
    pub fn pop(&mut self) -> Option<Result<&[u8], ProtoError>> {
        let rest = &self.buf[self.start..];
        let header: [u8; 4] = rest.get(..4)?.try_into().ok()?;
        let len = u32::from_be_bytes(header) as usize;
        if len > MAX_FRAME {
            return Some(Err(ProtoError::FrameTooLarge(len)));
        }
        if rest.len() < 4 + len {
            return None;
        }
        let begin = self.start + 4;
        self.start = begin + len;
        Some(Ok(&self.buf[begin..begin + len]))
    }

    /// Whether part of a frame is still waiting for the rest.
    pub fn is_partial(&self) -> bool {
        self.start < self.buf.len()
    }
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
