//! The reflector stores behind the view, and the desired state computed from them.
//!
//! Not kube-runtime's `kube::runtime::reflector::store()`: that deep-copies every object
//! of a relist, holding the cluster twice at every `410 Gone`. This store has the same
//! semantics (a relist lands atomically at `InitDone`) but keeps the record it holds when
//! the relist brings the same resourceVersion, so a relist costs only what changed.
//!
//! Services and EndpointSlices are kept as the desired-state builder's records of them
//! ([`ServiceRecord`], [`SliceRecord`]), not as API objects: what the builder reads,
//! a fraction of the objects' size
//! (docs/performance.md#sizing-for-large-clusters-memory-per-service-and-the-api-servers-load).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::runtime::watcher;

use crate::heart::desired::DesiredBuilder;
use crate::heart::desired::model::DesiredState;
use crate::heart::desired::record::{ServiceRecord, SliceRecord, resource_version};
use crate::heart::desired::slices::ZoneTable;
use crate::heart::desired::trim::node_labels;
use crate::sources::kube_client::WatchedResource;

/// `namespace/name` (namespace empty for cluster-scoped objects), one string: a store
/// holds tens of thousands of keys. Neither part can hold a `/` in the API.
pub(super) type ObjectKey = Box<str>;

fn object_key<K: Resource>(object: &K) -> ObjectKey {
    let meta = object.meta();
    key_of(
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn key_of(namespace: &str, name: &str) -> ObjectKey {
    format!("{namespace}/{name}").into()
}

/// `(namespace, name)` of a key, to sort by.
fn key_parts(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or((key, ""))
}

/// What a store keeps of each object: its resourceVersion says whether a relist
/// brought the same object again.
pub(super) trait Record {
    fn version(&self) -> Option<&str>;
}

impl Record for ServiceRecord {
    fn version(&self) -> Option<&str> {
        ServiceRecord::version(self)
    }
}

impl Record for SliceRecord {
    fn version(&self) -> Option<&str> {
        SliceRecord::version(self)
    }
}

/// The Node is kept whole (one object, its labels all that is left of it).
impl Record for Node {
    fn version(&self) -> Option<&str> {
        resource_version(&self.metadata)
    }
}

/// The records of one watch, as of its last complete list plus the events since.
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
        entries.sort_unstable_by(|a, b| key_parts(a.0).cmp(&key_parts(b.0)));
        entries.into_iter().map(|(_, o)| o.clone()).collect()
    }

    pub(super) fn len(&self) -> usize {
        self.read().len()
    }
}

/// Whether a change from `old` to `new` (None: absent) can move this node's NodePorts.
pub(super) type Relevance<R> = Arc<dyn Fn(Option<&R>, Option<&R>) -> bool + Send + Sync>;

/// How an object becomes what its store keeps.
pub(super) type Reduce<K, R> = Arc<dyn Fn(&K) -> R + Send + Sync>;

/// How one watch's objects are kept: trimmed, reduced, and which changes count.
pub(super) struct Reflect<K, R> {
    pub(super) trim: fn(&mut K),
    pub(super) resource: WatchedResource,
    pub(super) reduce: Reduce<K, R>,
    pub(super) relevant: Relevance<R>,
}

/// Services count when they have NodePorts, before or after the change.
pub(super) fn service_relevance() -> Relevance<ServiceRecord> {
    Arc::new(|old: Option<&ServiceRecord>, new: Option<&ServiceRecord>| {
        old.is_some_and(ServiceRecord::has_node_ports) || new.is_some_and(ServiceRecord::has_node_ports)
    })
}

/// A Service's record.
pub(super) fn service_reduce() -> Reduce<Service, ServiceRecord> {
    Arc::new(ServiceRecord::of)
}

/// A slice's record as the builder for `node` reads it, its zone hints named in
/// `zones` (shared with every build from the store).
pub(super) fn slice_reduce(
    node: Option<String>,
    zones: Arc<Mutex<ZoneTable>>,
) -> Reduce<EndpointSlice, SliceRecord> {
    Arc::new(move |slice: &EndpointSlice| {
        let mut zones = zones.lock().unwrap_or_else(PoisonError::into_inner);
        SliceRecord::of(slice, node.as_deref(), &mut zones)
    })
}

/// The Node as trimmed.
pub(super) fn node_reduce() -> Reduce<Node, Node> {
    Arc::new(Node::clone)
}

/// A slice matters when its Service (as `services` holds it) has NodePorts: most of a
/// cluster's endpoint churn is ClusterIP-only and changes nothing on this node's
/// NodePorts. (A slice of a Service not yet seen changes nothing either: the Service's
/// own arrival is a change.)
pub(super) fn slice_relevance(services: Arc<ObjectStore<ServiceRecord>>) -> Relevance<SliceRecord> {
    Arc::new(move |old: Option<&SliceRecord>, new: Option<&SliceRecord>| {
        let owner = new
            .or(old)
            .and_then(SliceRecord::owner)
            .and_then(|(namespace, name)| services.read().get(&key_of(namespace, name)).cloned());
        owner.is_some_and(|service| service.has_node_ports())
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
    services: &ObjectStore<ServiceRecord>,
    slices: &ObjectStore<SliceRecord>,
    zones: &Mutex<ZoneTable>,
    nodes: Option<&ObjectStore<Node>>,
) -> DesiredState {
    let services = services.sorted();
    let slices = slices.sorted();
    // After the slices: every zone their records name is in the table by now.
    let zones = zones.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let labels = match (nodes, node) {
        (Some(nodes), Some(name)) => node_labels(nodes.sorted().into_iter(), name),
        _ => None,
    };
    let mut builder = DesiredBuilder::with_zones(node, zones);
    for service in &services {
        builder.add_service_record(service);
    }
    for slice in &slices {
        builder.add_slice_record(slice);
    }
    builder.finish(labels)
}

/// Applies a watcher's events to an [`ObjectStore`].
pub(super) struct StoreWriter<K, R> {
    store: Arc<ObjectStore<R>>,
    /// The list under way, from `Init` to `InitDone`.
    relist: Option<HashMap<ObjectKey, Arc<R>>>,
    reduce: Reduce<K, R>,
    relevant: Relevance<R>,
}

impl<K: Resource, R: Record> StoreWriter<K, R> {
    pub(super) fn new(store: Arc<ObjectStore<R>>, reduce: Reduce<K, R>, relevant: Relevance<R>) -> Self {
        StoreWriter {
            store,
            relist: None,
            reduce,
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
                let record = Arc::new((self.reduce)(&object));
                let old = self.store.write().insert(object_key(&object), record.clone());
                (self.relevant)(old.as_deref(), Some(&record))
            }
            watcher::Event::Delete(object) => {
                let old = self.store.write().remove(&object_key(&object));
                let gone = old.unwrap_or_else(|| Arc::new((self.reduce)(&object)));
                (self.relevant)(Some(&gone), None)
            }
            // A list (re)starts; an unfinished one is abandoned.
            watcher::Event::Init => {
                self.relist = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(object) => {
                let key = object_key(&object);
                let held = self.store.read().get(&key).cloned();
                let record = match held {
                    Some(held) if same_version(held.as_ref(), &object) => held,
                    _ => Arc::new((self.reduce)(&object)),
                };
                self.relist.get_or_insert_default().insert(key, record);
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

/// The record of the same object at the same resourceVersion: unchanged.
fn same_version<K: Resource, R: Record>(held: &R, object: &K) -> bool {
    held.version().is_some() && held.version() == resource_version(object.meta())
}

#[cfg(test)]
mod tests;
