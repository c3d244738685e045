//! Single-use session tokens, like the kubelet streaming server's `requestCache`
//! (`pkg/kubelet/cri/streaming/request_cache.go`): each prepared session gets a random token
//! that the first request consumes; unused tokens expire after a minute. Time is tokio's, so
//! tests can pause and advance it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How long a prepared session waits for its client (upstream `CacheTTL`).
pub(crate) const TOKEN_TTL: Duration = Duration::from_secs(60);

/// Prepared sessions by token.
pub(crate) struct RequestCache<T> {
    entries: Mutex<HashMap<String, (Instant, T)>>,
}

impl<T> Default for RequestCache<T> {
    fn default() -> Self {
        RequestCache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> RequestCache<T> {
    /// Stores `value` under a fresh random token and returns the token. Expired entries are
    /// dropped on the way.
    pub(crate) fn insert(&self, value: T) -> String {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, (expires, _)| *expires > now);
        entries.insert(token.clone(), (now + TOKEN_TTL, value));
        token
    }

    /// Takes the entry for `token` if it exists and has not expired; it is gone afterwards
    /// either way.
    pub(crate) fn consume(&self, token: &str) -> Option<T> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (expires, value) = entries.remove(token)?;
        (expires > Instant::now()).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokens_are_single_use_and_expire_after_a_minute() {
        let cache = RequestCache::default();
        let once = cache.insert(1);
        assert_eq!(cache.consume(&once), Some(1));
        assert_eq!(cache.consume(&once), None);

        let late = cache.insert(2);
        let in_time = cache.insert(3);
        assert_ne!(late, in_time);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(cache.consume(&in_time), Some(3));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(cache.consume(&late), None);
        assert_eq!(cache.consume("no-such-token"), None);
    }
}
