//! Delegated authorization, as kube-scheduler's: the always-allowed paths pass, the group
//! `system:masters` passes, and every other request is asked of the API server (a
//! SubjectAccessReview for the non-resource path and the request's verb), the answer kept
//! for a while (allowed and denied answers each for their own TTL).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::authn::User;
use super::cache::TtlCache;

/// kube-scheduler's `--authorization-always-allow-paths` default, as the flag takes it: the
/// health endpoints, for probes that carry no credentials.
pub const DEFAULT_ALWAYS_ALLOW_PATHS: &str = "/healthz,/readyz,/livez";

/// The rules of a comma-separated list of paths (the flag's syntax); the error names the
/// path that is not one.
pub fn parse_paths(list: &str) -> Result<Vec<PathRule>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(PathRule::parse)
        .collect()
}
/// kube-scheduler's `--authorization-webhook-cache-authorized-ttl` default.
pub const DEFAULT_AUTHORIZED_TTL: Duration = Duration::from_secs(10);
/// kube-scheduler's `--authorization-webhook-cache-unauthorized-ttl` default.
pub const DEFAULT_UNAUTHORIZED_TTL: Duration = Duration::from_secs(10);
/// The group allowed everything without asking (kube-scheduler's
/// `--authorization-always-allow-groups` is not a flag; this is its fixed value).
pub const PRIVILEGED_GROUP: &str = "system:masters";

/// A path of `--authorization-always-allow-paths`: exact, or a prefix when it ends in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRule {
    /// This path only.
    Exact(String),
    /// Every path starting with this.
    Prefix(String),
}

impl PathRule {
    /// Reads one path as kube's path authorizer does; a `*` elsewhere than at the end is an
    /// error.
    pub fn parse(path: &str) -> Result<PathRule, String> {
        let (body, prefix) = match path.strip_suffix('*') {
            Some(body) => (body, true),
            None => (path, false),
        };
        if body.contains('*') {
            return Err(format!(
                "{path:?}: only a trailing '*' is allowed, as a prefix match"
            ));
        }
        if !prefix && !body.starts_with('/') {
            return Err(format!("{path:?}: a path starts with '/'"));
        }
        Ok(if prefix {
            PathRule::Prefix(body.to_string())
        } else {
            PathRule::Exact(body.to_string())
        })
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            PathRule::Exact(p) => p == path,
            PathRule::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

/// The authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let it through.
    Allow,
    /// Refuse it (403), with the reason the API server gave, if any.
    Deny(String),
}

/// The review could not be made (answered 500: neither allowed nor denied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot review the request with the API server: {0}")]
pub struct ReviewFailed(pub String);

/// What the cache keys on: who asks for what.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Question {
    user: User,
    verb: String,
    path: String,
}

/// Decides who may read what.
pub struct Authorizer {
    /// The client for SubjectAccessReviews; none when no authorization kubeconfig was given
    /// and none is in the cluster (then only the always-allowed paths and `system:masters`
    /// pass).
    client: Option<Client>,
    always_allow: Vec<PathRule>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    cache: TtlCache<Question, Decision>,
}

impl Authorizer {
    /// An authorizer asking through `client`.
    pub fn new(
        client: Option<Client>,
        always_allow: Vec<PathRule>,
        allowed_ttl: Duration,
        denied_ttl: Duration,
    ) -> Arc<Authorizer> {
        Arc::new(Authorizer {
            client,
            always_allow,
            allowed_ttl,
            denied_ttl,
            cache: TtlCache::new(),
        })
    }

    /// Whether `user` may `verb` the non-resource `path`.
    pub async fn authorize(
        &self,
        user: &User,
        verb: &str,
        path: &str,
    ) -> Result<Decision, ReviewFailed> {
        if self.always_allow.iter().any(|r| r.matches(path))
            || user.groups.iter().any(|g| g == PRIVILEGED_GROUP)
        {
            return Ok(Decision::Allow);
        }
        let Some(client) = &self.client else {
            return Ok(Decision::Deny(
                "no authorization kubeconfig: only the always-allowed paths are served".to_string(),
            ));
        };
        let question = Question {
            user: user.clone(),
            verb: verb.to_string(),
            path: path.to_string(),
        };
        let now = Instant::now();
        if let Some(decision) = self.cache.get(&question, now) {
            return Ok(decision);
        }
        let decision = review(client, &question).await?;
        let ttl = match decision {
            Decision::Allow => self.allowed_ttl,
            Decision::Deny(_) => self.denied_ttl,
        };
        self.cache.put(question, decision.clone(), ttl, now);
        Ok(decision)
    }
}

async fn review(client: &Client, q: &Question) -> Result<Decision, ReviewFailed> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let request = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(q.user.name.clone()),
            uid: q.user.uid.clone(),
            groups: Some(q.user.groups.clone()),
            extra: (!q.user.extra.is_empty()).then(|| q.user.extra.iter().cloned().collect()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(q.path.clone()),
                verb: Some(q.verb.clone()),
            }),
            resource_attributes: None,
        },
        ..Default::default()
    };
    let answer = api
        .create(&PostParams::default(), &request)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "cannot review a request with the API server");
            ReviewFailed(e.to_string())
        })?;
    let status = answer.status.unwrap_or_default();
    if status.allowed && status.denied != Some(true) {
        Ok(Decision::Allow)
    } else {
        Ok(Decision::Deny(status.reason.unwrap_or_default()))
    }
}

/// The verb kube gives a request to a non-resource path, from its method.
pub fn verb(method: &http::Method) -> String {
    match *method {
        http::Method::GET | http::Method::HEAD => "get".to_string(),
        http::Method::POST => "create".to_string(),
        http::Method::PUT => "update".to_string(),
        http::Method::PATCH => "patch".to_string(),
        http::Method::DELETE => "delete".to_string(),
        ref other => other.as_str().to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_rules_are_exact_or_trailing_star_prefixes() {
        assert_eq!(
            PathRule::parse("/healthz"),
            Ok(PathRule::Exact("/healthz".into()))
        );
        assert_eq!(
            PathRule::parse("/debug/*"),
            Ok(PathRule::Prefix("/debug/".into()))
        );
        assert!(PathRule::parse("/a*b").is_err());
        assert!(PathRule::parse("healthz").is_err());
        let prefix = PathRule::parse("/debug/*").unwrap();
        assert!(prefix.matches("/debug/decisions/a/b"));
        assert!(!prefix.matches("/metrics"));
        assert!(!PathRule::parse("/healthz").unwrap().matches("/healthz/x"));
    }

    #[tokio::test]
    async fn without_a_client_only_the_open_paths_and_masters_pass() {
        let authz = Authorizer::new(
            None,
            parse_paths(DEFAULT_ALWAYS_ALLOW_PATHS).unwrap(),
            DEFAULT_AUTHORIZED_TTL,
            DEFAULT_UNAUTHORIZED_TTL,
        );
        let anonymous = User::anonymous();
        for path in ["/healthz", "/readyz", "/livez"] {
            assert_eq!(
                authz.authorize(&anonymous, "get", path).await,
                Ok(Decision::Allow)
            );
        }
        assert!(matches!(
            authz.authorize(&anonymous, "get", "/metrics").await,
            Ok(Decision::Deny(_))
        ));
        let admin = User {
            name: "admin".into(),
            uid: None,
            groups: vec![PRIVILEGED_GROUP.into()],
            extra: Vec::new(),
        };
        assert_eq!(
            authz.authorize(&admin, "get", "/metrics").await,
            Ok(Decision::Allow)
        );
    }

    #[test]
    fn verbs_follow_the_method() {
        assert_eq!(verb(&http::Method::GET), "get");
        assert_eq!(verb(&http::Method::HEAD), "get");
        assert_eq!(verb(&http::Method::POST), "create");
    }
}
