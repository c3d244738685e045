//! Feeds the index from the API: one kube-rs watcher each on Services, EndpointSlices and
//! Namespaces in every namespace, as CoreDNS's informers do. Every event is applied to the index
//! as it arrives, under a short write lock, so an answer changes as soon as the API says so.
//!
//! A (re)list is applied object by object; when it is complete (`InitDone`) whatever the index
//! holds that the list did not mention is removed, so deletions missed while disconnected go.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::records::Index;

/// (namespace, name); the namespace is empty for a Namespace.
type Key = (String, String);

/// A kind the index is fed with.
trait Feed:
    kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    fn key(&self) -> Option<Key>;
    fn apply(&self, index: &mut Index);
    fn remove(key: &Key, index: &mut Index);
    fn keys(index: &Index) -> Vec<Key>;
}

fn namespaced_key<K: kube::Resource>(object: &K) -> Option<Key> {
    let meta = object.meta();
    Some((meta.namespace.clone()?, meta.name.clone()?))
}

impl Feed for Service {
    fn key(&self) -> Option<Key> {
        namespaced_key(self)
    }
    fn apply(&self, index: &mut Index) {
        index.upsert_service(self);
    }
    fn remove((ns, name): &Key, index: &mut Index) {
        index.remove_service(ns, name);
    }
    fn keys(index: &Index) -> Vec<Key> {
        index.service_keys()
    }
}

impl Feed for EndpointSlice {
    fn key(&self) -> Option<Key> {
        namespaced_key(self)
    }
    fn apply(&self, index: &mut Index) {
        index.upsert_endpoint_slice(self);
    }
    fn remove((ns, name): &Key, index: &mut Index) {
        index.remove_endpoint_slice(ns, name);
    }
    fn keys(index: &Index) -> Vec<Key> {
        index.endpoint_slice_keys()
    }
}

impl Feed for Namespace {
    fn key(&self) -> Option<Key> {
        Some((String::new(), self.metadata.name.clone()?))
    }
    fn apply(&self, index: &mut Index) {
        if let Some(name) = &self.metadata.name {
            index.upsert_namespace(name);
        }
    }
    fn remove((_, name): &Key, index: &mut Index) {
        index.remove_namespace(name);
    }
    fn keys(index: &Index) -> Vec<Key> {
        index
            .namespace_keys()
            .into_iter()
            .map(|n| (String::new(), n))
            .collect()
    }
}

/// Where one watcher is: between `Init` and `InitDone` it collects the keys listed.
#[derive(Debug, Default)]
struct FeedState {
    listing: Option<HashSet<Key>>,
    listed_once: bool,
}

/// Applies one watcher event; true the first time a list completes.
fn apply_event<K: Feed>(
    state: &mut FeedState,
    index: &RwLock<Index>,
    event: watcher::Event<K>,
) -> bool {
    let write = || index.write().unwrap_or_else(PoisonError::into_inner);
    match event {
        watcher::Event::Init => {
            state.listing = Some(HashSet::new());
            false
        }
        watcher::Event::InitApply(object) => {
            if let (Some(listing), Some(key)) = (state.listing.as_mut(), object.key()) {
                listing.insert(key);
            }
            object.apply(&mut write());
            false
        }
        watcher::Event::InitDone => {
            if let Some(listed) = state.listing.take() {
                let mut index = write();
                for key in K::keys(&index) {
                    if !listed.contains(&key) {
                        K::remove(&key, &mut index);
                    }
                }
            }
            !std::mem::replace(&mut state.listed_once, true)
        }
        watcher::Event::Apply(object) => {
            object.apply(&mut write());
            false
        }
        watcher::Event::Delete(object) => {
            if let Some(key) = object.key() {
                K::remove(&key, &mut write());
            }
            false
        }
    }
}

/// Counts the kinds still to list once; the last marks the index synced.
struct SyncGate {
    pending: AtomicUsize,
    index: Arc<RwLock<Index>>,
    done: tokio::sync::watch::Sender<bool>,
}

impl SyncGate {
    fn listed(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.index
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .set_synced(true);
            self.done.send_replace(true);
        }
    }
}

/// Starts the three watchers; the receiver turns true once each has listed once.
pub(crate) fn spawn(
    client: kube::Client,
    index: Arc<RwLock<Index>>,
) -> (Vec<JoinHandle<()>>, tokio::sync::watch::Receiver<bool>) {
    let (done, synced) = tokio::sync::watch::channel(false);
    let gate = Arc::new(SyncGate {
        pending: AtomicUsize::new(3),
        index: index.clone(),
        done,
    });
    let tasks = vec![
        tokio::spawn(follow::<Service>(
            Api::all(client.clone()),
            index.clone(),
            gate.clone(),
        )),
        tokio::spawn(follow::<EndpointSlice>(
            Api::all(client.clone()),
            index.clone(),
            gate.clone(),
        )),
        tokio::spawn(follow::<Namespace>(Api::all(client), index, gate)),
    ];
    (tasks, synced)
}

async fn follow<K: Feed>(api: Api<K>, index: Arc<RwLock<Index>>, gate: Arc<SyncGate>) {
    // The watcher re-lists and re-watches on its own; errors are reported and backed off.
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut state = FeedState::default();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                if apply_event(&mut state, &index, event) {
                    gate.listed();
                }
            }
            Err(e) => {
                tracing::debug!(kind = %K::kind(&()), error = %e, "DNS watch failed; retrying")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::{Name, RecordType};
    use serde_json::json;

    use super::*;

    fn svc(name: &str, ip: &str) -> Service {
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": "default" },
            "spec": { "clusterIP": ip, "ports": [{ "port": 80 }] }
        }))
        .unwrap()
    }

    fn rcode(index: &RwLock<Index>, name: &str) -> ResponseCode {
        let name = Name::from_ascii(format!("{name}.default.svc.cluster.local.")).unwrap();
        index
            .read()
            .unwrap()
            .lookup(&name, RecordType::A)
            .unwrap()
            .rcode
    }

    #[test]
    fn relist_removes_what_it_no_longer_mentions() {
        let index = RwLock::new(Index::new("cluster.local", 30).unwrap());
        let mut state = FeedState::default();
        assert!(!apply_event(
            &mut state,
            &index,
            watcher::Event::<Service>::Init
        ));
        apply_event(
            &mut state,
            &index,
            watcher::Event::InitApply(svc("a", "10.96.0.5")),
        );
        apply_event(
            &mut state,
            &index,
            watcher::Event::InitApply(svc("b", "10.96.0.6")),
        );
        assert!(apply_event(
            &mut state,
            &index,
            watcher::Event::<Service>::InitDone
        ));
        assert_eq!(rcode(&index, "a"), ResponseCode::NoError);
        // Disconnected while `a` was deleted; the relist no longer has it.
        apply_event(&mut state, &index, watcher::Event::<Service>::Init);
        apply_event(
            &mut state,
            &index,
            watcher::Event::InitApply(svc("b", "10.96.0.6")),
        );
        // During the relist the old state still answers.
        assert_eq!(rcode(&index, "a"), ResponseCode::NoError);
        assert!(!apply_event(
            &mut state,
            &index,
            watcher::Event::<Service>::InitDone
        ));
        assert_eq!(rcode(&index, "a"), ResponseCode::NXDomain);
        assert_eq!(rcode(&index, "b"), ResponseCode::NoError);
    }

    #[test]
    fn apply_and_delete_events_change_answers_at_once() {
        let index = RwLock::new(Index::new("cluster.local", 30).unwrap());
        let mut state = FeedState::default();
        apply_event(
            &mut state,
            &index,
            watcher::Event::Apply(svc("c", "10.96.0.7")),
        );
        assert_eq!(rcode(&index, "c"), ResponseCode::NoError);
        apply_event(
            &mut state,
            &index,
            watcher::Event::Delete(svc("c", "10.96.0.7")),
        );
        assert_eq!(rcode(&index, "c"), ResponseCode::NXDomain);
    }

    #[test]
    fn namespaces_are_fed_by_name() {
        let index = RwLock::new(Index::new("cluster.local", 30).unwrap());
        let mut state = FeedState::default();
        let ns: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": "quiet" } })).unwrap();
        apply_event(&mut state, &index, watcher::Event::Apply(ns.clone()));
        let name = Name::from_ascii("quiet.svc.cluster.local.").unwrap();
        let answer = |index: &RwLock<Index>| {
            index
                .read()
                .unwrap()
                .lookup(&name, RecordType::A)
                .unwrap()
                .rcode
        };
        assert_eq!(answer(&index), ResponseCode::NoError);
        apply_event(&mut state, &index, watcher::Event::Delete(ns));
        assert_eq!(answer(&index), ResponseCode::NXDomain);
    }
}
