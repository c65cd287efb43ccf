//! kube-scheduler's profiling endpoints (`enableProfiling`, on by default), as far as a Rust
//! process has them: `/debug/pprof/profile?seconds=N` samples the process's CPU for N
//! seconds (30 when not given, as Go's net/http/pprof) and answers a profile in pprof's
//! protobuf format, which `go tool pprof` and other pprof viewers read; `/debug/pprof/`
//! lists what is served. Go's other profiles (heap, goroutine, block, mutex, trace) have no
//! counterpart here and are answered 404 saying so. The endpoints sit behind the same
//! authentication and authorization as `/metrics`.

use std::sync::Mutex;
use std::time::Duration;

use axum::Router;
use axum::extract::RawQuery;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pprof::protos::Message;

/// How long a profile samples when `seconds` is not given (Go's default).
pub const DEFAULT_SECONDS: u64 = 30;
/// The longest profile asked for in one request.
pub const MAX_SECONDS: u64 = 600;
/// Samples per second (Go's rate).
const FREQUENCY: i32 = 100;
/// Libraries the sampler does not unwind through: unwinding from a signal inside them can
/// deadlock (pprof-rs's advice).
const BLOCKLIST: [&str; 4] = ["libc", "libgcc", "pthread", "vdso"];

/// One CPU profile at a time: the sampling timer is the process's.
static RUNNING: Mutex<()> = Mutex::new(());

/// The profiling routes.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/debug/pprof/", get(index))
        .route("/debug/pprof/profile", get(profile))
        .route("/debug/pprof/{name}", get(unknown))
}

const INDEX: &str = "/debug/pprof/\n\n\
profile: CPU profile; ?seconds=N (default 30) sets how long it samples.\n\n\
Only the CPU profile is served: heap, goroutine, block, mutex, threadcreate and trace \
profiles are Go runtime's and have no counterpart in gantry.\n";

async fn index() -> &'static str {
    INDEX
}

async fn unknown(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    text(
        StatusCode::NOT_FOUND,
        format!(
            "unknown profile {name:?}: gantry serves only the CPU profile, /debug/pprof/profile\n"
        ),
    )
}

fn text(code: StatusCode, body: String) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// The `seconds` parameter of `query`: [`DEFAULT_SECONDS`] when absent, an error naming it
/// when it is not a whole number from 1 to [`MAX_SECONDS`].
fn seconds(query: Option<&str>) -> Result<Duration, String> {
    let mut seconds = DEFAULT_SECONDS;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if key == "seconds" {
            seconds = value
                .parse::<u64>()
                .ok()
                .filter(|s| (1..=MAX_SECONDS).contains(s))
                .ok_or_else(|| {
                    format!("seconds must be a whole number from 1 to {MAX_SECONDS}, got {value:?}")
                })?;
        }
    }
    Ok(Duration::from_secs(seconds))
}

async fn profile(RawQuery(query): RawQuery) -> Response {
    let duration = match seconds(query.as_deref()) {
        Ok(d) => d,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    // Sampling waits and symbolizing computes: both off the async threads.
    match tokio::task::spawn_blocking(move || sample(duration)).await {
        Ok(Ok(body)) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"profile\"",
                ),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            body,
        )
            .into_response(),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the profile was not taken: {e}\n"),
        ),
    }
}

/// Samples the process for `duration`; the encoded profile.
fn sample(duration: Duration) -> Result<Vec<u8>, String> {
    let _running = RUNNING
        .try_lock()
        .map_err(|_| "Could not enable CPU profiling: cpu profiling already in use".to_string())?;
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        .blocklist(&BLOCKLIST)
        .build()
        .map_err(|e| format!("Could not enable CPU profiling: {e}"))?;
    std::thread::sleep(duration);
    let report = guard
        .report()
        .build()
        .map_err(|e| format!("cannot build the profile: {e}"))?;
    drop(guard);
    let profile = report
        .pprof()
        .map_err(|e| format!("cannot encode the profile: {e}"))?;
    Ok(profile.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn get(uri: &str) -> (StatusCode, Vec<u8>) {
        let response = router::<()>()
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body.to_vec())
    }

    /// Burns CPU in a function of its own until `stop`, so the profile has something to show.
    #[inline(never)]
    fn spin_until(stop: &AtomicBool) -> u64 {
        let mut x = 0u64;
        while !stop.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        x
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cpu_profile_shows_where_the_process_spent_its_time() {
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            std::thread::spawn(move || spin_until(&stop))
        };
        let (code, body) = get("/debug/pprof/profile?seconds=1").await;
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        assert_eq!(code, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let profile = pprof::protos::Profile::decode(body.as_slice()).unwrap();
        let name = |i: i64| profile.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = profile
            .sample_type
            .iter()
            .map(|t| (name(t.ty), name(t.unit)))
            .collect();
        assert!(types.contains(&("cpu", "nanoseconds")), "{types:?}");
        assert!(!profile.sample.is_empty());
        assert!(
            profile
                .string_table
                .iter()
                .any(|s| s.contains("spin_until")),
            "the spinning function is not in the profile"
        );
    }

    #[tokio::test]
    async fn bad_durations_and_other_profiles_are_answered_with_what_is_wrong() {
        for query in ["seconds=0", "seconds=x", "seconds=601"] {
            let (code, body) = get(&format!("/debug/pprof/profile?{query}")).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{query}");
            assert!(
                String::from_utf8_lossy(&body).starts_with("seconds must be a whole number"),
                "{query}"
            );
        }
        let (code, body) = get("/debug/pprof/heap").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(String::from_utf8_lossy(&body).contains("only the CPU profile"));
        let (code, body) = get("/debug/pprof/").await;
        assert_eq!(code, StatusCode::OK);
        assert!(String::from_utf8_lossy(&body).contains("profile: CPU profile"));
    }

    #[test]
    fn seconds_default_to_go_s() {
        assert_eq!(seconds(None), Ok(Duration::from_secs(DEFAULT_SECONDS)));
        assert_eq!(seconds(Some("seconds=5")), Ok(Duration::from_secs(5)));
    }
}
