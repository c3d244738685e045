//! Claiming objects for a controller: upstream's `BaseControllerRefManager.ClaimObject` and its
//! `AdoptPod`/`ReleasePod` patches (`pkg/controller/controller_ref_manager.go`), shared by the
//! ReplicaSet/ReplicationController controller (pods) and the Deployment controller
//! (ReplicaSets).

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::controller_utils::{self as cu, Error, controller_of, controller_ref};

/// Bounds of the namespaced typed objects a [`ControllerRefManager`] reads and patches.
pub trait Namespaced:
    Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug
{
}

impl<T> Namespaced for T where
    T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
{
}

/// Claims objects for one owner, as upstream's `ControllerRefManager`: it keeps the owner's
/// identity and remembers, for the whole claim, whether the owner may adopt (upstream's
/// `CanAdopt`, a fresh read of the owner done once, on the first orphan).
pub struct ControllerRefManager<'a, O> {
    client: kube::Client,
    owner: &'a O,
    uid: String,
    can_adopt: Option<bool>,
}

impl<'a, O> ControllerRefManager<'a, O>
where
    O: Namespaced + k8s_openapi::Resource,
{
    /// A manager claiming for `owner`, whose controller reference is
    /// `O::API_VERSION`/`O::KIND`/name/uid.
    pub fn new(client: kube::Client, owner: &'a O) -> Self {
        ControllerRefManager {
            client,
            owner,
            uid: owner.uid().unwrap_or_default(),
            can_adopt: None,
        }
    }

    /// Upstream's `ClaimObject` over `objects` (of the owner's namespace):
    /// - controlled by this owner and matching: kept;
    /// - controlled by this owner but no longer matching: released (the owner's reference
    ///   patched away), unless the owner is being deleted;
    /// - controlled by another owner: ignored;
    /// - orphans that match: adopted (the controller reference patched in) unless the owner or
    ///   the orphan is being deleted or the fresh owner is gone, replaced or being deleted.
    ///
    /// The controller reference is checked before `matches`, so objects of other owners are
    /// never matched. Returns the kept and adopted objects in the order seen; an object that
    /// disappears while being patched is skipped.
    pub async fn claim<T: Namespaced>(
        &mut self,
        objects: impl IntoIterator<Item = Arc<T>>,
        matches: impl Fn(&T) -> bool,
    ) -> Result<Vec<Arc<T>>, Error> {
        let ns = self.owner.namespace().unwrap_or_default();
        let api: Api<T> = Api::namespaced(self.client.clone(), &ns);
        let deleting = self.owner.meta().deletion_timestamp.is_some();
        let mut owned = Vec::new();
        for obj in objects {
            match controller_of(obj.meta()) {
                Some(r) if r.uid == self.uid => {
                    if matches(&obj) {
                        owned.push(obj);
                    } else if !deleting {
                        let refs: Vec<&OwnerReference> = obj
                            .meta()
                            .owner_references
                            .iter()
                            .flatten()
                            .filter(|o| o.uid != self.uid)
                            .collect();
                        patch_owner_references(&api, obj.as_ref(), &refs).await?;
                    }
                }
                Some(_) => {}
                None => {
                    if deleting || obj.meta().deletion_timestamp.is_some() || !matches(&obj) {
                        continue;
                    }
                    if !self.can_adopt(&ns).await? {
                        continue;
                    }
                    let mut refs = obj.meta().owner_references.clone().unwrap_or_default();
                    refs.push(controller_ref(
                        O::API_VERSION,
                        O::KIND,
                        &self.owner.name_any(),
                        &self.uid,
                    ));
                    if let Some(adopted) = patch_owner_references(&api, obj.as_ref(), &refs).await?
                    {
                        owned.push(Arc::new(adopted));
                    }
                }
            }
        }
        Ok(owned)
    }

    /// Whether a fresh read of the owner (made to adopt an orphan) found it gone, replaced or
    /// being deleted: the cached owner the caller holds is stale, and upstream's `ClaimObject`
    /// fails the sync there (`RecheckDeletionTimestamp`'s error) rather than let it manage
    /// replicas for an owner on its way out.
    pub fn owner_is_going(&self) -> bool {
        self.can_adopt == Some(false)
    }

    /// Upstream's `RecheckDeletionTimestamp`: the owner as stored now still has our uid and
    /// is not being deleted. Read once per manager.
    async fn can_adopt(&mut self, ns: &str) -> Result<bool, Error> {
        if let Some(ok) = self.can_adopt {
            return Ok(ok);
        }
        let fresh = Api::<O>::namespaced(self.client.clone(), ns)
            .get(&self.owner.name_any())
            .await;
        let ok = match fresh {
            Ok(f) => f.uid().as_deref() == Some(&self.uid) && f.meta().deletion_timestamp.is_none(),
            Err(e) if cu::is_not_found(&e) => false,
            Err(e) => return Err(e.into()),
        };
        self.can_adopt = Some(ok);
        Ok(ok)
    }
}

/// Sets `obj`'s owner references to `refs` with a merge patch that carries the object's uid as
/// a precondition (upstream's adopt/release patches). `None` when the object is gone.
async fn patch_owner_references<T: Namespaced, R: serde::Serialize>(
    api: &Api<T>,
    obj: &T,
    refs: &[R],
) -> Result<Option<T>, Error> {
    let patch = json!({ "metadata": { "ownerReferences": refs, "uid": obj.uid() } });
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(patched) => Ok(Some(patched)),
        Err(e) if cu::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
