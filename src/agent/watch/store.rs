//! The reflector stores behind the view, and the desired state computed from them.
//!
//! Not kube-runtime's `reflector::store()`: that deep-copies every object of a relist,
//! holding the cluster twice at every `410 Gone`. This store has the same semantics
//! (a relist lands atomically at `InitDone`) but keeps the object it holds when the
//! relist brings the same resourceVersion, so a relist costs only what changed.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::runtime::watcher;

use crate::heart::desired::model::DesiredState;
use crate::heart::desired::slices::LABEL_SERVICE_NAME;
use crate::heart::desired::trim::{desired_from_objects, node_labels};
use crate::sources::kube_client::WatchedResource;

/// `(namespace, name)`; namespace empty for cluster-scoped objects.
pub(super) type ObjectKey = (String, String);

fn object_key<K: Resource>(object: &K) -> ObjectKey {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The objects of one watch, as of its last complete list plus the events since.
pub(super) struct ObjectStore<K> {
    objects: RwLock<HashMap<ObjectKey, Arc<K>>>,
}

impl<K> Default for ObjectStore<K> {
    fn default() -> Self {
        ObjectStore {
            objects: RwLock::new(HashMap::new()),
        }
    }
}

impl<K> ObjectStore<K> {
    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ObjectKey, Arc<K>>> {
        // A map of Arcs is whole whatever a panicking writer did.
        self.objects.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ObjectKey, Arc<K>>> {
        self.objects.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every object, sorted by namespace and name so that the same objects always give
    /// the same desired state, problems included (a hash map has no stable order).
    pub(super) fn sorted(&self) -> Vec<Arc<K>> {
        let objects = self.read();
        let mut entries: Vec<(&ObjectKey, &Arc<K>)> = objects.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries.into_iter().map(|(_, o)| o.clone()).collect()
    }

    pub(super) fn len(&self) -> usize {
        self.read().len()
    }
}

/// Whether a change from `old` to `new` (None: absent) can move this node's NodePorts.
pub(super) type Relevance<K> = Arc<dyn Fn(Option<&K>, Option<&K>) -> bool + Send + Sync>;

/// How one watch's objects are kept: trimmed, and which changes count.
pub(super) struct Reflect<K> {
    pub(super) trim: fn(&mut K),
    pub(super) resource: WatchedResource,
    pub(super) relevant: Relevance<K>,
}

/// The Service has a NodePort (or a healthCheckNodePort): its changes can move this
/// node's NodePort rules.
fn has_node_ports(service: &Service) -> bool {
    service.spec.as_ref().is_some_and(|spec| {
        spec.health_check_node_port.is_some()
            || spec
                .ports
                .iter()
                .flatten()
                .any(|p| p.node_port.is_some_and(|n| n != 0))
    })
}

/// Services count when they have NodePorts, before or after the change.
pub(super) fn service_relevance() -> Relevance<Service> {
    Arc::new(|old: Option<&Service>, new: Option<&Service>| {
        old.is_some_and(has_node_ports) || new.is_some_and(has_node_ports)
    })
}

/// A slice matters when its Service (as `services` holds it) has NodePorts: most of a
/// cluster's endpoint churn is ClusterIP-only and changes nothing on this node's
/// NodePorts. (A slice of a Service not yet seen changes nothing either: the Service's
/// own arrival is a change.)
pub(super) fn slice_relevance(services: Arc<ObjectStore<Service>>) -> Relevance<EndpointSlice> {
    Arc::new(move |old: Option<&EndpointSlice>, new: Option<&EndpointSlice>| {
        let owner = new.or(old).and_then(|slice| {
            let meta = slice.meta();
            let name = meta.labels.as_ref()?.get(LABEL_SERVICE_NAME)?;
            let key = (meta.namespace.clone().unwrap_or_default(), name.clone());
            services.read().get(&key).cloned()
        });
        owner.is_some_and(|service| has_node_ports(&service))
    })
}

/// Only the Node's labels are kept and read (its zone for topology, all of them for
/// acceptances' node selectors); its frequent status updates are not changes here.
pub(super) fn node_relevance() -> Relevance<Node> {
    Arc::new(|old: Option<&Node>, new: Option<&Node>| {
        old.is_none()
            || new.is_none()
            || old.and_then(|n| n.metadata.labels.as_ref()) != new.and_then(|n| n.metadata.labels.as_ref())
    })
}

/// The desired state of `node` from the stores' current contents, sorted so that the
/// same objects always give the same state.
pub(super) fn desired_from_stores(
    node: Option<&str>,
    services: &ObjectStore<Service>,
    slices: &ObjectStore<EndpointSlice>,
    nodes: Option<&ObjectStore<Node>>,
) -> DesiredState {
    let services = services.sorted();
    let slices = slices.sorted();
    let labels = match (nodes, node) {
        (Some(nodes), Some(name)) => node_labels(nodes.sorted().into_iter(), name),
        _ => None,
    };
    desired_from_objects(node, &services, &slices, labels.as_ref())
}

/// Applies a watcher's events to an [`ObjectStore`].
pub(super) struct StoreWriter<K> {
    store: Arc<ObjectStore<K>>,
    /// The list under way, from `Init` to `InitDone`.
    relist: Option<HashMap<ObjectKey, Arc<K>>>,
    relevant: Relevance<K>,
}

impl<K: Resource + Clone> StoreWriter<K> {
    pub(super) fn new(store: Arc<ObjectStore<K>>, relevant: Relevance<K>) -> Self {
        StoreWriter {
            store,
            relist: None,
            relevant,
        }
    }

    /// Applies `event`; true when it changed something relevant (a completed relist
    /// always counts: what it replaced is not compared).
    pub(super) fn apply(&mut self, event: watcher::Event<K>) -> bool {
        match event {
            watcher::Event::Apply(mut object) => {
                // A change seen on the watch: the grace window runs from now, when
                // portdrift saw it, not from what the API recorded (creation and
                // managedFields times were folded into creationTimestamp by the trim).
                object.meta_mut().creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
                let old = self.store.write().insert(object_key(&object), compact(&object));
                (self.relevant)(old.as_deref(), Some(&object))
            }
            watcher::Event::Delete(object) => {
                let old = self.store.write().remove(&object_key(&object));
                (self.relevant)(Some(old.as_deref().unwrap_or(&object)), None)
            }
            // A list (re)starts; an unfinished one is abandoned.
            watcher::Event::Init => {
                self.relist = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(object) => {
                let key = object_key(&object);
                let held = self.store.read().get(&key).cloned();
                let object = match held {
                    Some(held) if same_version(held.as_ref(), &object) => held,
                    _ => compact(&object),
                };
                self.relist.get_or_insert_default().insert(key, object);
                false
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                // The old map is dropped outside the lock.
                let _old = std::mem::replace(&mut *self.store.write(), listed);
                true
            }
        }
    }
}

/// A fresh copy of a trimmed object for the store. The original's remaining pieces
/// sit among the freed pieces of the full object it was trimmed from (managedFields and
/// all), and holding them pins those partly-freed pages; a copy is allocated compactly.
fn compact<K: Clone>(object: &K) -> Arc<K> {
    Arc::new(object.clone())
}

/// The same object at the same resourceVersion: unchanged.
fn same_version<K: Resource>(a: &K, b: &K) -> bool {
    let version = |o: &K| o.meta().resource_version.clone().filter(|v| !v.is_empty());
    version(a).is_some() && version(a) == version(b)
}

#[cfg(test)]
mod tests;
