//! Leader election with a `coordination.k8s.io/v1` Lease, by client-go's rules (which
//! kube-scheduler uses): a candidate takes the lease when its holder has not renewed it for
//! `leaseDuration` as observed on the candidate's own clock; the leader renews it every
//! `retryPeriod` and gives up leadership when it cannot renew within `renewDeadline`. Since
//! `renewDeadline < leaseDuration`, a leader stops before anyone else may start. Updates use
//! the lease's resourceVersion, so two candidates can never both win the same round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};

use super::metrics::Metrics;
use gantry_core::config::LeaderElection;

/// An error talking to the API server about the lease.
#[derive(Debug, thiserror::Error)]
#[error("lease {namespace}/{name}: {error}")]
pub struct LeaseError {
    namespace: String,
    name: String,
    error: kube::Error,
}

/// What a candidate last saw of the lease, and when (on its own clock).
#[derive(Debug, Clone)]
struct Observed {
    holder: String,
    renew_time: Option<Timestamp>,
    transitions: i32,
    duration: Duration,
    at: Instant,
}

/// One candidate for leadership.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaderElection,
    identity: String,
    observed: Option<Observed>,
    /// Where `leader_election_master_status` says whether this candidate leads.
    metrics: Arc<Metrics>,
}

/// This replica's identity as kube-scheduler builds it: the host name and a random suffix,
/// so that replicas on one host (or restarts) are told apart.
pub fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "gantry".to_string());
    format!("{host}_{:032x}", rand::random::<u128>())
}

impl Elector {
    /// A candidate named `identity` for the lease `settings` names; until it leads,
    /// `leader_election_master_status` is 0 for the lease, as client-go's elector sets it.
    pub fn new(
        client: Client,
        settings: LeaderElection,
        identity: String,
        metrics: Arc<Metrics>,
    ) -> Self {
        let api = Api::namespaced(client, &settings.resource_namespace);
        metrics.set_leader(&settings.resource_name, false);
        Elector {
            api,
            settings,
            identity,
            observed: None,
            metrics,
        }
    }

    /// The candidate's identity (the lease's holder while it leads).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn error(&self, error: kube::Error) -> LeaseError {
        LeaseError {
            namespace: self.settings.resource_namespace.clone(),
            name: self.settings.resource_name.clone(),
            error,
        }
    }

    /// Waits until this candidate holds the lease.
    pub async fn acquire(&mut self) {
        let mut logged_holder = String::new();
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(
                        lease = %format!("{}/{}", self.settings.resource_namespace, self.settings.resource_name),
                        identity = %self.identity,
                        "acquired lease: leading"
                    );
                    self.metrics.set_leader(&self.settings.resource_name, true);
                    return;
                }
                Ok(false) => {
                    if let Some(o) = &self.observed
                        && o.holder != logged_holder
                    {
                        tracing::info!(holder = %o.holder, "lease held by another replica; waiting");
                        logged_holder = o.holder.clone();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot acquire lease"),
            }
            tokio::time::sleep(jittered(self.settings.retry_period)).await;
        }
    }

    /// Renews the lease every retry period; returns when it could not be renewed within the
    /// renew deadline (leadership is lost).
    pub async fn keep_renewing(&mut self) {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            let deadline = last_renewal + self.settings.renew_deadline;
            let attempt = tokio::time::timeout_at(deadline.into(), self.try_acquire_or_renew());
            match attempt.await {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::error!("lease taken by another replica");
                    self.metrics.set_leader(&self.settings.resource_name, false);
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew lease"),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                tracing::error!(
                    renew_deadline = ?self.settings.renew_deadline,
                    "lease not renewed within the renew deadline"
                );
                self.metrics.set_leader(&self.settings.resource_name, false);
                return;
            }
        }
    }

    /// Gives the lease up (when shutting down), so that another replica takes over at once
    /// rather than after the lease expires.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(lease) = self
            .api
            .get_opt(&self.settings.resource_name)
            .await
            .map_err(|e| self.error(e))?
        else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let now = Timestamp::now();
        let released = Lease {
            metadata: lease.metadata.clone(),
            spec: Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: spec.lease_transitions,
                ..Default::default()
            }),
        };
        self.api
            .replace(
                &self.settings.resource_name,
                &PostParams::default(),
                &released,
            )
            .await
            .map_err(|e| self.error(e))?;
        self.metrics.set_leader(&self.settings.resource_name, false);
        tracing::info!("lease released");
        Ok(())
    }

    /// One round: takes the lease if it is free or expired, renews it if held. Ok(false)
    /// when another replica holds it (or won the race).
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let now = Timestamp::now();
        let duration_secs =
            i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let name = self.settings.resource_name.clone();
        let current = self.api.get_opt(&name).await.map_err(|e| self.error(e))?;
        let Some(lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.settings.resource_namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.error(e)),
            };
        };
        self.observe(&lease);
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !holder.is_empty()
            && !ours
            && self
                .observed
                .as_ref()
                .is_some_and(|o| o.at.elapsed() < o.duration)
        {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let renewed = Lease {
            metadata: lease.metadata.clone(),
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: if ours {
                    spec.acquire_time.clone()
                } else {
                    Some(MicroTime(now))
                },
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(if ours {
                    transitions
                } else {
                    transitions.saturating_add(1)
                }),
                ..Default::default()
            }),
        };
        match self
            .api
            .replace(&name, &PostParams::default(), &renewed)
            .await
        {
            Ok(updated) => {
                self.observe(&updated);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Records what the lease says, restarting the local expiry clock when it changed.
    fn observe(&mut self, lease: &Lease) {
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.unwrap_or_default();
        let renew_time = spec.renew_time.map(|t| t.0);
        let transitions = spec.lease_transitions.unwrap_or(0);
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.settings.lease_duration, Duration::from_secs);
        let changed = self.observed.as_ref().is_none_or(|o| {
            o.holder != holder || o.renew_time != renew_time || o.transitions != transitions
        });
        if changed {
            self.observed = Some(Observed {
                holder,
                renew_time,
                transitions,
                duration,
                at: Instant::now(),
            });
        }
    }
}

/// `d` stretched by up to 20%, as client-go does, so that candidates spread their retries.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + rand::random::<f64>() * 0.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_host_and_unique_suffix() {
        let a = identity();
        let b = identity();
        assert_ne!(a, b);
        let (host, suffix) = a.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 32);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        for _ in 0..100 {
            let d = jittered(Duration::from_secs(2));
            assert!(d >= Duration::from_secs(2) && d <= Duration::from_millis(2400));
        }
    }
}
