//! Client-side rate limiting of API requests, as `clientConnection.qps` and `burst` configure
//! it: a token bucket in front of the kube client's transport, shared by every request the
//! process makes (watches, bindings, events, the lease).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tower::{Layer, Service};

/// The longest wait [`TokenBucket::take`] asks for: a request waits at most this long at a
/// time before the bucket is asked again (the configuration refuses rates slow enough to
/// need longer waits, but the bucket accepts any rate without failing).
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// A token bucket: `burst` tokens at most, refilled at `qps` tokens per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Tokens per second; `None` for an unlimited rate (every token is granted).
    qps: Option<f64>,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A burst below one still lets one request through at a time. Any
    /// `qps` is accepted: one that is not a positive finite number means no limit.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: (qps > 0.0 && qps.is_finite()).then_some(qps),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token at `now`, or says how long until one is available (at most
    /// [`MAX_WAIT`]; a token may still be missing then, and the caller asks again).
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let Some(qps) = self.qps else {
            return Ok(());
        };
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        // Non-negative terms (the product may be infinite), the sum capped at `burst`.
        self.tokens = (self.tokens + elapsed * qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            // Positive, but it may be too small for a Duration (a huge rate) or too large.
            let wait = (1.0 - self.tokens) / qps;
            Err(Duration::try_from_secs_f64(wait)
                .unwrap_or(MAX_WAIT)
                .clamp(Duration::from_nanos(1), MAX_WAIT))
        }
    }
}

/// A tower layer that makes every request wait for a token of one shared bucket.
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl ThrottleLayer {
    /// A layer allowing `qps` requests per second with bursts of `burst`; `None` when `qps`
    /// is 0 (no throttling), or not a positive finite number at all.
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        (qps > 0.0 && qps.is_finite()).then(|| ThrottleLayer {
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst, Instant::now()))),
        })
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            permitted: false,
        }
    }
}

/// The service [`ThrottleLayer`] builds: ready only once it holds a token.
pub struct Throttle<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    permitted: bool,
}

impl<S, Req> Service<Req> for Throttle<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.permitted {
            if let Some(sleep) = &mut self.sleep {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take(Instant::now());
            match taken {
                Ok(()) => self.permitted = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.permitted = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_refills_at_qps() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 3, t0);
        assert!(b.take(t0).is_ok());
        assert!(b.take(t0).is_ok());
        assert!(b.take(t0).is_ok());
        let wait = b.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert!(b.take(t0 + Duration::from_millis(100)).is_ok());
        assert!(b.take(t0 + Duration::from_millis(100)).is_err());
    }

    #[test]
    fn refill_never_exceeds_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, 2, t0);
        let later = t0 + Duration::from_secs(60);
        assert!(b.take(later).is_ok());
        assert!(b.take(later).is_ok());
        assert!(b.take(later).is_err());
    }

    #[test]
    fn zero_qps_means_no_throttling() {
        assert!(ThrottleLayer::new(0.0, 10).is_none());
        assert!(ThrottleLayer::new(5.0, 0).is_some());
        for qps in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(ThrottleLayer::new(qps, 10).is_none(), "{qps}");
        }
    }

    #[test]
    fn no_rate_or_burst_makes_the_bucket_fail() {
        let t0 = Instant::now();
        for qps in [
            1e-300,
            f64::MIN_POSITIVE,
            5e-324,
            1e-9,
            0.0,
            -0.0,
            -5.0,
            f64::NAN,
            f64::INFINITY,
            1e300,
            f64::MAX,
        ] {
            for burst in [0, 1, u32::MAX] {
                let mut b = TokenBucket::new(qps, burst, t0);
                for step in [0, 1, 1_000_000_000] {
                    let now = t0 + Duration::from_secs(step);
                    if let Err(wait) = b.take(now) {
                        assert!(wait <= MAX_WAIT, "{qps} {burst}: {wait:?}");
                        assert!(!wait.is_zero(), "{qps} {burst}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_tiny_rate_waits_at_most_the_longest_wait() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1e-300, 1, t0);
        assert!(b.take(t0).is_ok());
        assert_eq!(b.take(t0), Err(MAX_WAIT));
        // Time going backwards (an earlier `now`) refills nothing.
        let mut b = TokenBucket::new(1.0, 1, t0 + Duration::from_secs(10));
        assert!(b.take(t0).is_ok());
        assert!(b.take(t0).is_err());
    }

    #[test]
    fn an_unlimited_rate_grants_every_token() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(f64::INFINITY, 1, t0);
        for _ in 0..1000 {
            assert!(b.take(t0).is_ok());
        }
    }

    #[tokio::test]
    async fn the_service_waits_for_tokens() {
        use std::convert::Infallible;
        let layer = ThrottleLayer::new(20.0, 1).expect("throttled");
        let mut svc = layer.layer(tower::service_fn(
            |x: u32| async move { Ok::<_, Infallible>(x) },
        ));
        let start = Instant::now();
        for i in 0..3 {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            assert_eq!(svc.call(i).await.unwrap(), i);
        }
        // One from the burst, then two at 20 per second.
        assert!(
            start.elapsed() >= Duration::from_millis(95),
            "{:?}",
            start.elapsed()
        );
    }
}
