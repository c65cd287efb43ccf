//! List, then watch from the list's version, as client-go's reflector does; relist when the
//! version is too old (410 Gone); resume after errors, with backoff.
//!
//! kube-runtime's watcher does the same, but its lists cannot come from the API server's
//! watch cache without holding three copies of the response at once: kube-core leaves
//! `resourceVersion=0` out of a list that has a page size (so paged lists are quorum reads of
//! etcd, 20 requests for 10,000 pods), and an unpaged list is read by kube-client into one
//! buffer, copied into a second and a third before it is decoded, and decoded into a vector
//! of every object. Here the response is gathered into one buffer and its items are handed
//! out as they are decoded: with 10,000 pods, tens of MiB less at the peak.
//!
//! Lists and watches are JSON or, for the kinds that have a reader for it ([`Format`]),
//! Kubernetes' protobuf ([`super::protobuf`]). Every object is read on its own
//! ([`super::lenient`]): one that does not decode is delivered as
//! [`Read::Unreadable`], and the list or watch goes on.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::BodyExt;
use kube::api::{Api, ListParams, VersionMatch, WatchParams};
use kube::runtime::watcher::Event;
use kube::{Client, Resource, ResourceExt};
use serde::Deserialize;
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::lenient::{Read, read_json, read_protobuf};
use super::protobuf::{self, EventType};
use super::readiness::Watchers;

/// Implements `kube::Resource` as `Pod`'s for a partial view of pods (a struct with a
/// `metadata: ObjectMeta` field that reads only what its watcher needs).
macro_rules! pod_view {
    ($view:ty) => {
        impl kube::Resource for $view {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::version(dt)
            }
            fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use pod_view;

/// How long a watch request runs before the server ends it (kube-runtime's and client-go's
/// choice: below the API server's own limit, so that the client decides).
const WATCH_TIMEOUT_SECONDS: u32 = 290;
/// Longest silence on a watch before it is given up as dead: the server's own end of the
/// request, plus a margin.
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECONDS as u64 + 5);
/// A watch that ends sooner than this with no event in it counts as failed.
const SHORTEST_WATCH: Duration = Duration::from_secs(1);
/// A watch that lasted this long was healthy, even with nothing in it.
const HEALTHY_WATCH: Duration = Duration::from_secs(10);
/// Longest a list may take to arrive.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);
/// First wait after an error; doubled up to [`MAX_RETRY`] while errors continue.
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// Longest wait between retries.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Why a list or a watch failed.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// The request could not be made or its response read.
    #[error("{0}")]
    Client(kube::Error),
    /// The API server answered with an error status.
    #[error("HTTP {code}: {message}")]
    Status {
        /// The HTTP status code.
        code: u16,
        /// The API server's message (its `Status`), or the body.
        message: String,
    },
    /// The list or a watch event could not be decoded (its objects are read apart: this is
    /// the envelope around them).
    #[error("cannot decode the response: {0}")]
    Decode(serde_json::Error),
    /// Protobuf from the API server could not be read.
    #[error("cannot read the API server's protobuf: {0}")]
    Proto(protobuf::ProtoError),
    /// A watch asked for protobuf came in another encoding (its list had come as protobuf).
    #[error("a protobuf watch came as {0:?}")]
    ContentType(String),
    /// A JSON watch sent a line longer than [`MAX_WATCH_LINE`] bytes.
    #[error("a watch line of over {0} bytes (more than any object can be)")]
    LineTooLong(usize),
    /// Nothing arrived for this long.
    #[error("no answer in {0:?}")]
    TimedOut(Duration),
    /// The server closed the watch at once, with no event in it.
    #[error("the watch ended at once, with no event")]
    ShortWatch,
    /// The watch ended with an error event.
    #[error("watch error {code}: {message}")]
    Watch {
        /// The code in the error event.
        code: u16,
        /// Its message.
        message: String,
    },
}

impl From<kube::Error> for ReflectorError {
    fn from(e: kube::Error) -> Self {
        ReflectorError::Client(e)
    }
}

impl From<serde_json::Error> for ReflectorError {
    fn from(e: serde_json::Error) -> Self {
        ReflectorError::Decode(e)
    }
}

impl From<protobuf::ProtoError> for ReflectorError {
    fn from(e: protobuf::ProtoError) -> Self {
        ReflectorError::Proto(e)
    }
}

impl ReflectorError {
    /// The version asked for is too old: only a fresh list can continue.
    fn is_gone(&self) -> bool {
        match self {
            ReflectorError::Client(kube::Error::Api(s)) => s.code == 410,
            ReflectorError::Status { code, .. } | ReflectorError::Watch { code, .. } => {
                *code == 410
            }
            _ => false,
        }
    }
}

/// Which version a list asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ListFrom {
    /// Any (`resourceVersion=0`): whatever the watch cache holds; the first list.
    Any,
    /// At least this version (what the watcher has seen), from the watch cache: a relist
    /// must not go back in time.
    NotOlderThan(String),
    /// The latest, read from etcd: after a watch failed, or the version seen was refused as
    /// too old or too new.
    Latest,
}

/// What the reflector does next: the states of its machine, each carried out by [`run`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Tell the receiver a list starts (`Init`: what it holds may be out of date), wait
    /// `after` if set, then list.
    List {
        /// The version asked for.
        from: ListFrom,
        /// The backoff to wait out first.
        after: Option<Duration>,
    },
    /// Watch from `version`.
    Watch {
        /// The version to watch from.
        version: String,
    },
}

/// How a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchEnd {
    /// The server ended the request (its timeout).
    Closed,
    /// The version asked for is too old (410 Gone).
    Gone,
    /// Anything else: the connection broke, nothing arrived for too long, an error event.
    Failed,
}

/// The transitions of the reflector, apart from its I/O: given how a step went, the next
/// step, with the backoff between failures.
#[derive(Debug)]
struct Machine {
    /// The wait before the next retry; doubled by each failure up to [`MAX_RETRY`].
    retry: Duration,
}

impl Machine {
    fn new() -> Self {
        Machine { retry: FIRST_RETRY }
    }

    /// The first step: list whatever the watch cache holds.
    fn first() -> Step {
        Step::List {
            from: ListFrom::Any,
            after: None,
        }
    }

    /// The backoff to wait now, doubling the next one.
    fn backoff(&mut self) -> Duration {
        let wait = self.retry;
        self.retry = (self.retry * 2).min(MAX_RETRY);
        wait
    }

    /// The list at `version` is read: watch from there.
    fn listed(&mut self, version: String) -> Step {
        Step::Watch { version }
    }

    /// A list from `from` failed. The version seen may be refused as expired (410) or, by an
    /// API server whose cache is behind, as too new (504 after a wait): either way the next
    /// try reads the latest from etcd, as client-go's reflector does.
    fn list_failed(&mut self, from: ListFrom) -> Step {
        let from = match from {
            ListFrom::NotOlderThan(_) => ListFrom::Latest,
            other => other,
        };
        Step::List {
            from,
            after: Some(self.backoff()),
        }
    }

    /// A watch in which `version` was the last version seen ended as `end`, after `events`
    /// events and `lasted`.
    fn watch_ended(
        &mut self,
        version: String,
        end: WatchEnd,
        events: usize,
        lasted: Duration,
    ) -> Step {
        // A watch that delivered something, or lived long, was healthy: the next failure
        // starts the backoff afresh. One that failed at once keeps doubling it, so that a
        // server failing every watch is not relisted from in a tight loop.
        if events > 0 || lasted >= HEALTHY_WATCH {
            self.retry = FIRST_RETRY;
        }
        // A watch the server closes at once, with nothing in it, is a failure (client-go's
        // "very short watch").
        let end = match end {
            WatchEnd::Closed if events == 0 && lasted < SHORTEST_WATCH => WatchEnd::Failed,
            other => other,
        };
        match end {
            // Watch on from where it stopped.
            WatchEnd::Closed => Step::Watch { version },
            WatchEnd::Gone => Step::List {
                from: ListFrom::NotOlderThan(version),
                after: Some(self.backoff()),
            },
            // The connection broke, or the API server failed the watch: whatever changed
            // meanwhile (bindings whose answers were lost among them) is read from etcd, not
            // from a watch cache that may still be catching up, before the objects are
            // trusted again.
            WatchEnd::Failed => Step::List {
                from: ListFrom::Latest,
                after: Some(self.backoff()),
            },
        }
    }
}

/// The selectors of a list and its watches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selectors<'a> {
    /// The field selector, if any.
    pub fields: Option<&'a str>,
    /// The label selector, if any.
    pub labels: Option<&'a str>,
}

impl<'a> Selectors<'a> {
    /// Only a field selector (or none).
    pub fn fields(fields: Option<&'a str>) -> Self {
        Selectors {
            fields,
            labels: None,
        }
    }
}

/// Lists and watches `api` (with `selectors`) in `format` for ever, handing
/// each event to `deliver`; stops when `deliver` returns false. A list is reported as `Init`,
/// one `InitApply` per object and `InitDone`, whether it is the first or a relist. A watch
/// that fails (other than by the server's regular end of the request) is followed by a
/// relist, whose `Init` comes at once: from then until its `InitDone` the objects delivered
/// before may be out of date. Objects that do not decode are delivered as
/// [`Read::Unreadable`]. How the watcher stands (listing, a list failed, watching) is told
/// to `watchers`, for the readiness check.
pub async fn run<K>(
    client: Client,
    api: Api<K>,
    selectors: Selectors<'_>,
    mut format: Format<K>,
    name: &'static str,
    watchers: &Watchers,
    mut deliver: impl FnMut(Event<Read<K>>) -> bool,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut machine = Machine::new();
    let mut step = Machine::first();
    loop {
        step = match step {
            Step::List { from, after } => {
                watchers.listing(name);
                if !deliver(Event::Init) {
                    return;
                }
                if let Some(wait) = after {
                    tokio::time::sleep(wait).await;
                }
                let mut open = true;
                let listed = tokio::time::timeout(
                    LIST_TIMEOUT,
                    list(&client, &api, selectors, &from, format, |obj| {
                        open = open && deliver(Event::InitApply(obj));
                    }),
                )
                .await
                .unwrap_or(Err(ReflectorError::TimedOut(LIST_TIMEOUT)));
                if !open {
                    return;
                }
                match listed {
                    Ok(Listed { version, encoding }) => {
                        if let Encoding::Other(other) = encoding
                            && format.is_protobuf()
                        {
                            // A server (or a proxy) that does not speak protobuf answers
                            // with JSON: so be it, from here on.
                            tracing::info!(watcher = name, content_type = %other, "the API server answers this kind as JSON; reading JSON");
                            format = Format::Json;
                        }
                        if !deliver(Event::InitDone) {
                            return;
                        }
                        watchers.watching(name);
                        machine.listed(version)
                    }
                    Err(e) => {
                        watchers.list_failed(name, &e.to_string());
                        let next = machine.list_failed(from);
                        tracing::warn!(watcher = name, error = %e, "list failed; retrying in {:?}", wait_of(&next));
                        next
                    }
                }
            }
            Step::Watch { mut version } => {
                let started = Instant::now();
                let mut events = 0usize;
                let Ok(error) = watch(
                    &client,
                    &api,
                    selectors,
                    format,
                    &mut version,
                    &mut events,
                    &mut deliver,
                )
                .await
                else {
                    return;
                };
                let end = match &error {
                    None => WatchEnd::Closed,
                    Some(e) if e.is_gone() => WatchEnd::Gone,
                    Some(_) => WatchEnd::Failed,
                };
                let next = machine.watch_ended(version, end, events, started.elapsed());
                if let Step::List { .. } = next {
                    let wait = wait_of(&next);
                    match error {
                        Some(e) if end == WatchEnd::Gone => {
                            tracing::info!(watcher = name, error = %e, "watch version too old; relisting in {wait:?}");
                        }
                        Some(e) => {
                            tracing::warn!(watcher = name, error = %e, "watch failed; relisting in {wait:?}");
                        }
                        None => {
                            tracing::warn!(
                                watcher = name,
                                "the watch ended at once, with no event; relisting in {wait:?}"
                            );
                        }
                    }
                }
                next
            }
        }
    }
}

/// The event of an object read, or none for one that was not (for a watcher to which an
/// object it cannot read is as good as absent).
pub fn readable<K>(event: Event<Read<K>>) -> Option<Event<K>> {
    let object = |read| match read {
        Read::Object(obj) => Some(obj),
        Read::Unreadable(_) => None,
    };
    Some(match event {
        Event::Init => Event::Init,
        Event::InitApply(read) => Event::InitApply(object(read)?),
        Event::InitDone => Event::InitDone,
        Event::Apply(read) => Event::Apply(object(read)?),
        Event::Delete(read) => Event::Delete(object(read)?),
    })
}

/// The backoff a step waits first.
fn wait_of(step: &Step) -> Duration {
    match step {
        Step::List {
            after: Some(wait), ..
        } => *wait,
        _ => Duration::ZERO,
    }
}

/// The receiver asked to stop.
struct Stopped;

/// One watch from `version`, delivering its events (and advancing `version` and `events`)
/// until it ends: with no error when the server ended it, else with why it failed.
async fn watch<K>(
    client: &Client,
    api: &Api<K>,
    selectors: Selectors<'_>,
    format: Format<K>,
    version: &mut String,
    events: &mut usize,
    deliver: &mut impl FnMut(Event<Read<K>>) -> bool,
) -> Result<Option<ReflectorError>, Stopped>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECONDS);
    if let Some(f) = selectors.fields {
        params = params.fields(f);
    }
    if let Some(l) = selectors.labels {
        params = params.labels(l);
    }
    let opened = tokio::time::timeout(
        LIST_TIMEOUT,
        open_watch(client, api, &params, version, format),
    )
    .await
    .unwrap_or(Err(ReflectorError::TimedOut(LIST_TIMEOUT)));
    let mut stream = match opened {
        Ok(stream) => stream,
        Err(e) => return Ok(Some(e)),
    };
    loop {
        // The server ends a watch after WATCH_TIMEOUT_SECONDS; silence for longer means the
        // connection is gone without a word (a vanished host or load balancer, over HTTP/1.1
        // where no ping would tell).
        let Ok(next) = tokio::time::timeout(WATCH_IDLE, stream.next()).await else {
            return Ok(Some(ReflectorError::TimedOut(WATCH_IDLE)));
        };
        let event = match next {
            None => return Ok(None),
            Some(Ok(Change::Applied(obj))) => {
                if let Some(v) = version_of(&obj) {
                    *version = v;
                }
                Some(Event::Apply(obj))
            }
            Some(Ok(Change::Deleted(obj))) => {
                if let Some(v) = version_of(&obj) {
                    *version = v;
                }
                Some(Event::Delete(obj))
            }
            Some(Ok(Change::Bookmark(v))) => {
                *version = v;
                None
            }
            Some(Ok(Change::Failed { code, message })) => {
                return Ok(Some(ReflectorError::Watch { code, message }));
            }
            Some(Err(e)) => return Ok(Some(e)),
        };
        *events += 1;
        if let Some(event) = event
            && !deliver(event)
        {
            return Err(Stopped);
        }
    }
}

/// The resource version of an object read, or of what is known of one that was not.
fn version_of<K: Resource>(read: &Read<K>) -> Option<String> {
    match read {
        Read::Object(obj) => obj.resource_version(),
        Read::Unreadable(u) => u.resource_version.clone(),
    }
}

/// The list request's parameters: not paged (the API server ignores limits when it serves
/// from its watch cache, and kube-core would then leave the version out); from the watch
/// cache unless `from` asks for the latest.
fn list_params(selectors: Selectors<'_>, from: &ListFrom) -> ListParams {
    let params = match from {
        ListFrom::Any => ListParams::default().match_any(),
        ListFrom::NotOlderThan(version) => ListParams::default()
            .matching(VersionMatch::NotOlderThan)
            .at(version),
        ListFrom::Latest => ListParams::default(),
    };
    let params = match selectors.fields {
        Some(f) => params.fields(f),
        None => params,
    };
    match selectors.labels {
        Some(l) => params.labels(l),
        None => params,
    }
}

/// A list's resource version, and the encoding it came in.
struct Listed {
    version: String,
    encoding: Encoding,
}

/// Lists `api` in one response (see [`list_params`]), handing each object to `each` as it is
/// decoded (an object that cannot be read as [`Read::Unreadable`], so that one bad object
/// does not hold up all the others); returns the list's resource version. Asked for
/// protobuf, the server may still answer JSON, which is then read as such.
async fn list<K>(
    client: &Client,
    api: &Api<K>,
    selectors: Selectors<'_>,
    from: &ListFrom,
    format: Format<K>,
    mut each: impl FnMut(Read<K>),
) -> Result<Listed, ReflectorError>
where
    K: Resource + DeserializeOwned,
{
    let request = kube::core::Request::new(api.resource_url())
        .list(&list_params(selectors, from))
        .map_err(kube::Error::BuildRequest)?;
    let (encoding, body) = send(client, request, format).await?;
    let body = read_body(body).await?;
    let version = match (format, &encoding) {
        (Format::Protobuf(decode), Encoding::Protobuf) => protobuf::for_each_item(&body, |item| {
            each(read_protobuf(item, decode));
            Ok(())
        })?,
        _ => {
            let mut de = serde_json::Deserializer::from_slice(&body);
            let version = ListSeed {
                each,
                kind: PhantomData,
            }
            .deserialize(&mut de)?;
            de.end()?;
            version
        }
    };
    Ok(Listed { version, encoding })
}

/// Sends a list or watch request asking for `format`; an error status becomes an error with
/// the server's message. Yields the response's encoding and body.
async fn send<K>(
    client: &Client,
    mut request: http::Request<Vec<u8>>,
    format: Format<K>,
) -> Result<(Encoding, kube::client::Body), ReflectorError> {
    format.ask_for(&mut request);
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    let encoding = Encoding::of(&response);
    let body = response.into_body();
    if !status.is_success() {
        let text = read_body(body).await?;
        return Err(ReflectorError::Status {
            code: status.as_u16(),
            message: encoding.error_message(&text),
        });
    }
    Ok((encoding, body))
}

/// A whole response body in one buffer, each chunk dropped once copied (a list of 10,000
/// pods is held once, not twice).
async fn read_body(mut body: kube::client::Body) -> Result<Vec<u8>, kube::Error> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// What a watch reports, whatever its encoding.
enum Change<K> {
    /// An object was added or changed.
    Applied(Read<K>),
    /// An object was deleted (its last state).
    Deleted(Read<K>),
    /// Nothing changed up to this version.
    Bookmark(String),
    /// The watch ended with an error.
    Failed {
        /// The error's code.
        code: u16,
        /// Its message.
        message: String,
    },
}

/// A watch's events, decoded.
type Changes<K> = futures::stream::BoxStream<'static, Result<Change<K>, ReflectorError>>;

/// Starts a watch of `api` from `version` in `format`.
async fn open_watch<K>(
    client: &Client,
    api: &Api<K>,
    params: &WatchParams,
    version: &str,
    format: Format<K>,
) -> Result<Changes<K>, ReflectorError>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let Format::Protobuf(decode) = format else {
        return json_watch(client, api, params, version).await;
    };
    let request = kube::core::Request::new(api.resource_url())
        .watch(params, version)
        .map_err(kube::Error::BuildRequest)?;
    let (encoding, body) = send(client, request, format).await?;
    if let Encoding::Other(other) = encoding {
        return Err(ReflectorError::ContentType(other));
    }
    let frames = protobuf::Frames::default();
    Ok(
        futures::stream::try_unfold((body, frames), move |(mut body, mut frames)| async move {
            loop {
                if let Some(frame) = frames.pop() {
                    if let Some(change) = protobuf_change(frame?, decode)? {
                        return Ok(Some((change, (body, frames))));
                    }
                    continue;
                }
                match body.frame().await {
                    Some(frame) => {
                        if let Ok(data) = frame?.into_data() {
                            frames.push(&data);
                        }
                    }
                    None if frames.is_partial() => {
                        return Err(ReflectorError::Proto(protobuf::ProtoError::Malformed(
                            "the watch ended inside a frame",
                        )));
                    }
                    None => return Ok(None),
                }
            }
        })
        .boxed(),
    )
}

/// Starts a JSON watch of `api` from `version`: one event per line, each object read on its
/// own (kube-client's watch would fail the whole stream at the first object that does not
/// decode).
async fn json_watch<K>(
    client: &Client,
    api: &Api<K>,
    params: &WatchParams,
    version: &str,
) -> Result<Changes<K>, ReflectorError>
where
    K: Resource + DeserializeOwned + Send + 'static,
{
    let request = kube::core::Request::new(api.resource_url())
        .watch(params, version)
        .map_err(kube::Error::BuildRequest)?;
    let (_, body) = send(client, request, Format::<K>::Json).await?;
    let lines = Lines::default();
    Ok(
        futures::stream::try_unfold((body, lines), move |(mut body, mut lines)| async move {
            loop {
                if let Some(line) = lines.pop()? {
                    if let Some(change) = json_change(&line)? {
                        return Ok(Some((change, (body, lines))));
                    }
                    continue;
                }
                match body.frame().await {
                    Some(frame) => {
                        if let Ok(data) = frame?.into_data() {
                            lines.push(&data);
                        }
                    }
                    None => return Ok(None),
                }
            }
        })
        .boxed(),
    )
}

/// Longest line a JSON watch may send: far above any object the API server can store,
/// low enough that a server or proxy that never ends a line cannot make gantry hold
/// gigabytes.
const MAX_WATCH_LINE: usize = 64 << 20;

/// A JSON watch's bytes, cut into lines (one event each).
#[derive(Default)]
struct Lines {
    buffer: Vec<u8>,
    /// Where the next line starts in `buffer`.
    start: usize,
}

impl Lines {
    fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        self.buffer.extend_from_slice(chunk);
    }

    /// The next whole line, if one has arrived (blank lines skipped).
    fn pop(&mut self) -> Result<Option<Vec<u8>>, ReflectorError> {
        loop {
            let rest = &self.buffer[self.start..];
            let Some(end) = rest.iter().position(|b| *b == b'\n') else {
                if rest.len() > MAX_WATCH_LINE {
                    return Err(ReflectorError::LineTooLong(rest.len()));
                }
                return Ok(None);
            };
            let line = rest[..end].to_vec();
            self.start += end + 1;
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some(line));
            }
        }
    }
}

/// One JSON watch event, its object left unread.
#[derive(Deserialize)]
struct JsonEvent<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// A bookmark's or an error's object: the version, or the code and message.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct EventObject {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

/// Reads one JSON watch line.
fn json_change<K: DeserializeOwned>(line: &[u8]) -> Result<Option<Change<K>>, ReflectorError> {
    let event: JsonEvent<'_> = serde_json::from_slice(line)?;
    Ok(Some(match event.kind {
        "ADDED" | "MODIFIED" => Change::Applied(read_json(event.object)),
        "DELETED" => Change::Deleted(read_json(event.object)),
        "BOOKMARK" => {
            let object: EventObject = serde_json::from_str(event.object.get())?;
            match object.metadata.resource_version {
                Some(v) if !v.is_empty() => Change::Bookmark(v),
                _ => return Ok(None),
            }
        }
        "ERROR" => {
            let object: EventObject = serde_json::from_str(event.object.get())?;
            Change::Failed {
                code: object.code,
                message: object.message,
            }
        }
        other => {
            return Err(ReflectorError::Proto(protobuf::ProtoError::EventType(
                other.to_string(),
            )));
        }
    }))
}

/// Reads one protobuf watch frame, its object on its own.
fn protobuf_change<K>(
    frame: &[u8],
    decode: fn(&[u8]) -> Result<K, prost::DecodeError>,
) -> Result<Option<Change<K>>, protobuf::ProtoError> {
    let (kind, object) = protobuf::watch_event(frame)?;
    Ok(match kind {
        EventType::Added | EventType::Modified => {
            Some(Change::Applied(read_protobuf(object, decode)))
        }
        EventType::Deleted => Some(Change::Deleted(read_protobuf(object, decode))),
        EventType::Bookmark => Some(Change::Bookmark(
            protobuf::resource_version(object)?.ok_or(protobuf::ProtoError::NoVersion)?,
        )),
        EventType::Error => {
            let (code, message) = protobuf::status(object)?;
            Some(Change::Failed { code, message })
        }
    })
}

/// How one kind's lists and watches travel.
pub enum Format<K> {
    /// JSON, which every kind has.
    Json,
    /// Kubernetes' protobuf, read with this function (from an object's message, out of its
    /// envelope).
    Protobuf(fn(&[u8]) -> Result<K, prost::DecodeError>),
}

impl<K> Clone for Format<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Format<K> {}

impl<K> Format<K> {
    fn is_protobuf(&self) -> bool {
        matches!(self, Format::Protobuf(_))
    }

    /// Sets the request's `Accept` header for this format: protobuf first, JSON if the
    /// server has no protobuf for the kind (client-go offers the same fallback).
    fn ask_for(&self, request: &mut http::Request<Vec<u8>>) {
        if self.is_protobuf() {
            request.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(PROTOBUF_OR_JSON),
            );
        }
    }
}

/// What a request for protobuf accepts.
const PROTOBUF_OR_JSON: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The encoding of a response, from its `Content-Type`.
#[derive(Debug)]
enum Encoding {
    /// Kubernetes' protobuf (a watch's has `;stream=watch`).
    Protobuf,
    /// Anything else, named as the server named it (JSON, as a rule).
    Other(String),
}

impl Encoding {
    fn of<B>(response: &http::Response<B>) -> Encoding {
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let media_type = content_type.split(';').next().unwrap_or_default().trim();
        if media_type.eq_ignore_ascii_case(protobuf::MEDIA_TYPE) {
            Encoding::Protobuf
        } else {
            Encoding::Other(content_type.to_string())
        }
    }

    /// The message of an error response: its `Status`'s, or the body as text.
    fn error_message(&self, body: &[u8]) -> String {
        let status = match self {
            Encoding::Protobuf => protobuf::unwrap(body)
                .and_then(protobuf::status)
                .ok()
                .map(|(_, m)| m),
            Encoding::Other(_) => serde_json::from_slice::<kube::core::Status>(body)
                .ok()
                .map(|s| s.message),
        };
        status.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
    }
}

/// Decodes a list object, handing each item to `each`; yields `metadata.resourceVersion`.
struct ListSeed<F, K> {
    each: F,
    kind: PhantomData<K>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: Option<String>,
}

impl<'de, F: FnMut(Read<K>), K: DeserializeOwned> DeserializeSeed<'de> for ListSeed<F, K> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, F: FnMut(Read<K>), K: DeserializeOwned> Visitor<'de> for ListSeed<F, K> {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes list object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<String, A::Error> {
        let mut version = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "metadata" => version = map.next_value::<ListMeta>()?.resource_version,
                "items" => map.next_value_seed(Items {
                    each: &mut self.each,
                    kind: PhantomData,
                })?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        version
            .filter(|v| !v.is_empty())
            .ok_or_else(|| serde::de::Error::custom("the list has no metadata.resourceVersion"))
    }
}

/// Decodes the list `json`, handing each item to `each`; its resource version.
#[cfg(test)]
pub(crate) fn decode_list<K: DeserializeOwned>(
    json: &str,
    each: impl FnMut(Read<K>),
) -> Result<String, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(json);
    let version = ListSeed {
        each,
        kind: PhantomData,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(version)
}

/// The `items` array, each item handed out as soon as it is decoded, on its own: an item
/// that does not decode is handed out as [`Read::Unreadable`].
struct Items<'a, F, K> {
    each: &'a mut F,
    kind: PhantomData<K>,
}

impl<'de, F: FnMut(Read<K>), K: DeserializeOwned> DeserializeSeed<'de> for Items<'_, F, K> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, F: FnMut(Read<K>), K: DeserializeOwned> Visitor<'de> for Items<'_, F, K> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<&RawValue>()? {
            (self.each)(read_json(raw));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;

    fn decode(json: &str) -> Result<(String, Vec<String>), serde_json::Error> {
        let mut names = Vec::new();
        let version = decode_list(json, |ns: Read<Namespace>| match ns {
            Read::Object(ns) => names.push(ns.name_any()),
            Read::Unreadable(u) => names.push(format!("unreadable {}: {}", u.key(), u.error)),
        })?;
        Ok((version, names))
    }

    #[test]
    fn a_list_hands_out_its_items_in_order_with_its_version() {
        let json = r#"{"kind":"NamespaceList","apiVersion":"v1",
            "items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}],
            "metadata":{"resourceVersion":"17"}}"#;
        let (version, names) = decode(json).unwrap();
        assert_eq!(version, "17");
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn an_empty_list_may_have_null_items() {
        let json = r#"{"metadata":{"resourceVersion":"3"},"items":null}"#;
        assert_eq!(decode(json).unwrap(), ("3".to_string(), vec![]));
    }

    #[test]
    fn a_list_without_a_version_or_that_is_not_json_is_an_error() {
        assert!(decode(r#"{"items":[]}"#).is_err());
        assert!(decode(r#"{"metadata":{"resourceVersion":"3"},"items":[{"metadata":7]}"#).is_err());
        assert!(decode(r#"{"metadata":{"resourceVersion":"3"},"items":[]} trailing"#).is_err());
    }

    #[test]
    fn an_item_that_does_not_decode_is_handed_out_as_unreadable_between_the_others() {
        let json = r#"{"metadata":{"resourceVersion":"3"},"items":[
            {"metadata":{"name":"a"}},
            {"metadata":{"name":"b","labels":{"x":7}}},
            {"metadata":7},
            {"metadata":{"name":"c"}}]}"#;
        let (version, names) = decode(json).unwrap();
        assert_eq!(version, "3");
        assert_eq!(names.len(), 4, "{names:?}");
        assert_eq!((names[0].as_str(), names[3].as_str()), ("a", "c"));
        assert!(
            names[1].starts_with("unreadable b: metadata.labels.x: invalid type: integer"),
            "{names:?}"
        );
        assert!(
            names[2].starts_with("unreadable : metadata: invalid type"),
            "{names:?}"
        );
    }

    fn changes(lines: &[&str]) -> Vec<String> {
        lines
            .iter()
            .map(|line| match json_change::<Namespace>(line.as_bytes()) {
                Ok(Some(Change::Applied(Read::Object(ns)))) => format!("applied {}", ns.name_any()),
                Ok(Some(Change::Applied(Read::Unreadable(u)))) => format!("unreadable {}", u.key()),
                Ok(Some(Change::Deleted(Read::Object(ns)))) => format!("deleted {}", ns.name_any()),
                Ok(Some(Change::Deleted(Read::Unreadable(u)))) => {
                    format!("deleted unreadable {}", u.key())
                }
                Ok(Some(Change::Bookmark(v))) => format!("bookmark {v}"),
                Ok(Some(Change::Failed { code, message })) => format!("failed {code} {message}"),
                Ok(None) => "nothing".to_string(),
                Err(e) => format!("error {e}"),
            })
            .collect()
    }

    #[test]
    fn a_json_watch_reads_each_event_and_each_object_on_its_own() {
        let got = changes(&[
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"4"}}}"#,
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"b","labels":[]}}}"#,
            r#"{"type":"DELETED","object":{"metadata":{"name":"b","finalizers":7}}}"#,
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#,
            r#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}"#,
            r#"{"type":"SOMETHING","object":{}}"#,
            r#"{"type":"ADDED"}"#,
        ]);
        assert_eq!(
            got[..5],
            [
                "applied a",
                "unreadable b",
                "deleted unreadable b",
                "bookmark 9",
                "failed 410 too old"
            ]
        );
        assert!(got[5].starts_with("error"), "{got:?}");
        assert!(got[6].starts_with("error"), "{got:?}");
    }

    #[test]
    fn watch_lines_are_cut_where_they_end_whatever_the_chunks() {
        let mut lines = Lines::default();
        lines.push(b"{\"a\":1}\n\n{\"b\"");
        assert_eq!(lines.pop().unwrap(), Some(b"{\"a\":1}".to_vec()));
        assert_eq!(lines.pop().unwrap(), None);
        lines.push(b":2}\n");
        assert_eq!(lines.pop().unwrap(), Some(b"{\"b\":2}".to_vec()));
        assert_eq!(lines.pop().unwrap(), None);
    }

    #[test]
    fn lists_ask_for_the_watch_cache_in_one_response() {
        let request = kube::core::Request::new("/api/v1/pods")
            .list(&list_params(
                Selectors {
                    fields: Some("status.phase!=Failed"),
                    labels: Some("team"),
                },
                &ListFrom::Any,
            ))
            .expect("list request");
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(query.contains("resourceVersion=0"), "{query}");
        assert!(
            query.contains("resourceVersionMatch=NotOlderThan"),
            "{query}"
        );
        assert!(query.contains("fieldSelector="), "{query}");
        assert!(query.contains("labelSelector=team"), "{query}");
        assert!(!query.contains("limit="), "{query}");
    }

    #[test]
    fn a_relist_asks_for_at_least_what_was_seen_or_for_the_latest() {
        let query = |from: ListFrom| {
            kube::core::Request::new("/api/v1/nodes")
                .list(&list_params(Selectors::default(), &from))
                .expect("list request")
                .uri()
                .query()
                .unwrap_or_default()
                .to_string()
        };
        let seen = query(ListFrom::NotOlderThan("42".to_string()));
        assert!(seen.contains("resourceVersion=42"), "{seen}");
        assert!(seen.contains("resourceVersionMatch=NotOlderThan"), "{seen}");
        let latest = query(ListFrom::Latest);
        assert!(!latest.contains("resourceVersion"), "{latest}");
        assert!(!latest.contains("limit="), "{latest}");
    }

    fn relist(from: ListFrom, after: Duration) -> Step {
        Step::List {
            from,
            after: Some(after),
        }
    }

    #[test]
    fn the_machine_lists_then_watches_and_watches_on_after_a_regular_end() {
        let mut m = Machine::new();
        assert_eq!(
            Machine::first(),
            Step::List {
                from: ListFrom::Any,
                after: None
            }
        );
        let watch = |v: &str| Step::Watch {
            version: v.to_string(),
        };
        assert_eq!(m.listed("5".into()), watch("5"));
        let lasted = Duration::from_secs(290);
        assert_eq!(
            m.watch_ended("9".into(), WatchEnd::Closed, 3, lasted),
            watch("9")
        );
        // A quiet watch that ran its course is fine too.
        assert_eq!(
            m.watch_ended("9".into(), WatchEnd::Closed, 0, lasted),
            watch("9")
        );
    }

    #[test]
    fn a_failed_watch_relists_from_etcd_and_an_expired_one_from_the_cache() {
        let mut m = Machine::new();
        let short = Duration::from_millis(10);
        assert_eq!(
            m.watch_ended("9".into(), WatchEnd::Failed, 1, short),
            relist(ListFrom::Latest, FIRST_RETRY)
        );
        assert_eq!(
            m.watch_ended("12".into(), WatchEnd::Gone, 1, short),
            relist(ListFrom::NotOlderThan("12".into()), FIRST_RETRY)
        );
        // Closed at once with nothing in it: a failure, and the backoff grows.
        assert_eq!(
            m.watch_ended("12".into(), WatchEnd::Closed, 0, short),
            relist(ListFrom::Latest, FIRST_RETRY * 2)
        );
        assert_eq!(
            m.watch_ended("12".into(), WatchEnd::Failed, 0, short),
            relist(ListFrom::Latest, FIRST_RETRY * 4)
        );
    }

    #[test]
    fn failed_lists_back_off_up_to_the_most_and_give_up_the_version_seen() {
        let mut m = Machine::new();
        assert_eq!(
            m.list_failed(ListFrom::NotOlderThan("7".into())),
            relist(ListFrom::Latest, FIRST_RETRY)
        );
        assert_eq!(
            m.list_failed(ListFrom::Any),
            relist(ListFrom::Any, FIRST_RETRY * 2)
        );
        for _ in 0..10 {
            m.list_failed(ListFrom::Latest);
        }
        assert_eq!(
            m.list_failed(ListFrom::Latest),
            relist(ListFrom::Latest, MAX_RETRY)
        );
        // A list that works does not reset the backoff: a watch that then fails at once
        // waits as long as the lists did.
        assert_eq!(
            m.listed("8".into()),
            Step::Watch {
                version: "8".into()
            }
        );
        assert_eq!(
            m.watch_ended("8".into(), WatchEnd::Failed, 0, Duration::ZERO),
            relist(ListFrom::Latest, MAX_RETRY)
        );
        // A watch that delivered something was healthy: the backoff starts afresh.
        assert_eq!(
            m.watch_ended("9".into(), WatchEnd::Failed, 2, Duration::ZERO),
            relist(ListFrom::Latest, FIRST_RETRY)
        );
    }

    #[test]
    fn gone_means_relist() {
        let gone = ReflectorError::Watch {
            code: 410,
            message: "too old resource version".into(),
        };
        assert!(gone.is_gone());
        let other = ReflectorError::Status {
            code: 500,
            message: "boom".into(),
        };
        assert!(!other.is_gone());
    }
}
