//! Delegated authentication, as kube-scheduler's: a bearer token is checked by the API
//! server (a TokenReview), and the answer is kept for a while; a request without a token is
//! the anonymous user, for the authorizer to judge (so `/healthz` stays open, and an
//! anonymous request it denies is asked for credentials with a 401); a token the API
//! server refuses is a 401.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};

use super::cache::TtlCache;

/// How long an answer of the API server about a token is kept: kube-scheduler's
/// `--authentication-token-webhook-cache-ttl` default.
pub const DEFAULT_TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);

/// The user of a request without credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of a request without credentials.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The user's uid, if the API server gave one.
    pub uid: Option<String>,
    /// The groups.
    pub groups: Vec<String>,
    /// Extra attributes, sorted by key.
    pub extra: Vec<(String, Vec<String>)>,
}

impl User {
    /// The anonymous user.
    pub fn anonymous() -> User {
        User {
            name: ANONYMOUS_USER.to_string(),
            uid: None,
            groups: vec![UNAUTHENTICATED_GROUP.to_string()],
            extra: Vec::new(),
        }
    }
}

/// A request whose credentials are refused (answered 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unauthorized(pub String);

/// Checks bearer tokens with the API server.
pub struct Authenticator {
    /// The client for TokenReviews; none when no authentication kubeconfig was given and
    /// none is in the cluster (every request is then anonymous, as for kube-scheduler).
    client: Option<Client>,
    ttl: Duration,
    /// Answers by the token's salted digest: the tokens themselves are not kept.
    cache: TtlCache<[u8; 32], Result<User, Unauthorized>>,
    salt: [u8; 32],
}

impl Authenticator {
    /// Checks tokens through `client`, keeping each answer for `ttl`.
    pub fn new(client: Option<Client>, ttl: Duration) -> Arc<Authenticator> {
        Arc::new(Authenticator {
            client,
            ttl,
            cache: TtlCache::new(),
            salt: rand::random(),
        })
    }

    /// Who sent a request with `headers`.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<User, Unauthorized> {
        let (Some(token), Some(client)) = (bearer_token(headers), &self.client) else {
            return Ok(User::anonymous());
        };
        let key = self.digest(token);
        let now = Instant::now();
        if let Some(answer) = self.cache.get(&key, now) {
            return answer;
        }
        let answer = review(client, token).await?;
        self.cache.put(key, answer.clone(), self.ttl, now);
        answer
    }

    fn digest(&self, token: &str) -> [u8; 32] {
        let mut context = ring::digest::Context::new(&ring::digest::SHA256);
        context.update(&self.salt);
        context.update(token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(context.finish().as_ref());
        key
    }
}

/// The token of an `Authorization: Bearer <token>` header, if the request has one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The API server's answer about `token`: Ok(Ok) authenticated, Ok(Err) refused (both
/// cached); Err when the review could not be made (not cached: the next request asks again).
async fn review(client: &Client, token: &str) -> Result<Result<User, Unauthorized>, Unauthorized> {
    let api: Api<TokenReview> = Api::all(client.clone());
    let request = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences: None,
        },
        ..Default::default()
    };
    let answer = api
        .create(&PostParams::default(), &request)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "cannot review a token with the API server");
            Unauthorized(format!("cannot review the token: {e}"))
        })?;
    let status = answer.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        let reason = status
            .error
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "token not authenticated".to_string());
        return Ok(Err(Unauthorized(reason)));
    }
    let user = status.user.unwrap_or_default();
    let mut extra: Vec<(String, Vec<String>)> =
        user.extra.unwrap_or_default().into_iter().collect();
    extra.sort();
    Ok(Ok(User {
        name: user.username.unwrap_or_default(),
        uid: user.uid.filter(|u| !u.is_empty()),
        groups: user.groups.unwrap_or_default(),
        extra,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn bearer_tokens_as_kube_reads_them() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn without_a_client_everyone_is_anonymous() {
        let authn = Authenticator::new(None, DEFAULT_TOKEN_CACHE_TTL);
        assert_eq!(
            authn.authenticate(&headers("Bearer abc")).await,
            Ok(User::anonymous())
        );
        assert_eq!(
            authn.authenticate(&HeaderMap::new()).await,
            Ok(User::anonymous())
        );
    }

    #[test]
    fn tokens_are_kept_as_salted_digests() {
        let a = Authenticator::new(None, DEFAULT_TOKEN_CACHE_TTL);
        let b = Authenticator::new(None, DEFAULT_TOKEN_CACHE_TTL);
        assert_eq!(a.digest("t"), a.digest("t"));
        assert_ne!(a.digest("t"), a.digest("u"));
        assert_ne!(a.digest("t"), b.digest("t"));
    }
}
