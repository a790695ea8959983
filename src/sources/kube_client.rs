//! The API server's client: its configuration (a kubeconfig, or inferred as kubectl
//! does, in-cluster included), the plain client of one-shot lists and reports, and the
//! watch's client with its read timeout and [`activity`] layer; the one-shot [`list`]s
//! used by `scan`, `snapshot` and the cluster-wide views.

pub mod activity;
pub mod list;
pub mod streamed_list;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::client::ClientBuilder;

pub use activity::WatchActivity;
pub use list::{ClusterObjects, list_every_service, list_once, load_once, pods_on_node};
pub use streamed_list::{ListReader, stream_list};

/// The label selector of kube-proxy's Service and EndpointSlice informers
/// (cmd/kube-proxy/app/server.go): objects opted out of kube-proxy are never listed.
pub const KUBE_PROXY_LABEL_SELECTOR: &str =
    "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";

/// Page size of the one-shot consistent lists ([`list`]), so that a large cluster is
/// listed in bounded requests rather than one huge one. Half client-go's 500: a page is
/// decoded whole, `managedFields` and all, before it is trimmed, so a smaller page
/// lowers peak memory (`scripts/bench-watch.sh`). The agent's watch reads no pages: its
/// reads come from the API server's cache, which serves them whole or streams them.
pub const DEFAULT_PAGE_SIZE: u32 = 250;

/// Why the API side could not give a desired state. Every variant has a bounded
/// [`metric_label`](Self::metric_label) for error counters.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot read the kubeconfig {}: {}", path.display(), kubeconfig_cause(error, false))]
    Kubeconfig {
        path: PathBuf,
        /// Not a `#[source]`: its message is kube's, with the path in debug form.
        error: kube::config::KubeconfigError,
    },
    #[error("cannot find a cluster configuration (in-cluster, KUBECONFIG or ~/.kube/config): {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
    /// `--context` without `--kubeconfig`, and the inferred kubeconfig cannot be read.
    #[error(
        "cannot read the kubeconfig (KUBECONFIG or ~/.kube/config) for context {context:?}: {}",
        kubeconfig_cause(error, true)
    )]
    InferKubeconfig {
        context: String,
        error: kube::config::KubeconfigError,
    },
    #[error("context {context:?} is not in the kubeconfig {kubeconfig} (its contexts: {known})")]
    UnknownContext {
        context: String,
        /// The file, or `KUBECONFIG or ~/.kube/config`.
        kubeconfig: String,
        /// The contexts it has, comma-separated (`none` when it has none).
        known: String,
    },
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("cannot list {resource}: {source}")]
    List {
        resource: WatchedResource,
        #[source]
        source: kube::Error,
    },
    #[error("the API server did not give the cluster state within {0:?}")]
    Timeout(Duration),
    #[error("the initial lists of Services, EndpointSlices and the Node have not completed")]
    NotSynced,
}

impl WatchError {
    /// A short, bounded label for metrics (`portdrift_..._errors_total{error=...}`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            WatchError::Kubeconfig { .. } => "kubeconfig",
            WatchError::InferConfig(_) => "config",
            WatchError::InferKubeconfig { .. } => "kubeconfig",
            WatchError::UnknownContext { .. } => "context",
            WatchError::Client(_) => "client",
            WatchError::List { .. } => "list",
            WatchError::Timeout(_) => "timeout",
            WatchError::NotSynced => "not-synced",
        }
    }
}

/// The resources the API side lists and watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchedResource {
    Services,
    EndpointSlices,
    Node,
    /// The pods on this node (listed once, to name squatters; never watched).
    Pods,
}

impl WatchedResource {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchedResource::Services => "services",
            WatchedResource::EndpointSlices => "endpointslices",
            WatchedResource::Node => "node",
            WatchedResource::Pods => "pods",
        }
    }

    /// The collection's URL path, as kube-client writes it before the cluster URL is
    /// prepended: how the HTTP layer tells which watch a response belongs to.
    pub(crate) fn path(self) -> &'static str {
        match self {
            WatchedResource::Services => "/api/v1/services",
            WatchedResource::EndpointSlices => "/apis/discovery.k8s.io/v1/endpointslices",
            WatchedResource::Node => "/api/v1/nodes",
            WatchedResource::Pods => "/api/v1/pods",
        }
    }
}

impl fmt::Display for WatchedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The client configuration: from the kubeconfig at `path` when given; otherwise
/// inferred as kubectl does (`KUBECONFIG`, then `~/.kube/config`, then the in-cluster
/// service account).
pub async fn kube_config(path: Option<&Path>) -> Result<kube::Config, WatchError> {
    let target = KubeTarget {
        kubeconfig: path.map(Path::to_path_buf),
        context: None,
    };
    target.config().await
}

/// Which API server a command talks to, named as kubectl names it: `--kubeconfig`
/// (default: `KUBECONFIG`, `~/.kube/config`, then in-cluster) and `--context` (default:
/// the kubeconfig's current-context).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeTarget {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

impl KubeTarget {
    /// Whether the command line named a kubeconfig or a context (else the API server
    /// is only looked for, and its absence is no error for commands that can do without).
    pub fn is_named(&self) -> bool {
        self.kubeconfig.is_some() || self.context.is_some()
    }

    /// Checks a kubeconfig or context named on the command line before anything is
    /// read: one that cannot be used is the caller's mistake, said at once, never turned
    /// into a scan without cluster state. Nothing named: nothing to check.
    pub fn check_named(&self) -> Result<(), WatchError> {
        self.named_kubeconfig().map(|_| ())
    }

    /// The kubeconfig named (or, for a context alone, the inferred one), read, with
    /// the named context checked to be in it; None when neither is named.
    fn named_kubeconfig(&self) -> Result<Option<(kube::config::Kubeconfig, String)>, WatchError> {
        let (kubeconfig, source) = match (&self.kubeconfig, &self.context) {
            (None, None) => return Ok(None),
            (Some(path), _) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .map_err(|source| kubeconfig_error(path, source))?;
                (kubeconfig, path.display().to_string())
            }
            (None, Some(context)) => {
                let kubeconfig =
                    kube::config::Kubeconfig::read().map_err(|error| WatchError::InferKubeconfig {
                        context: context.clone(),
                        error,
                    })?;
                (kubeconfig, "KUBECONFIG or ~/.kube/config".to_string())
            }
        };
        if let Some(context) = &self.context
            && !kubeconfig.contexts.iter().any(|c| &c.name == context)
        {
            let known: Vec<&str> = kubeconfig.contexts.iter().map(|c| c.name.as_str()).collect();
            return Err(WatchError::UnknownContext {
                context: context.clone(),
                kubeconfig: source,
                known: if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                },
            });
        }
        Ok(Some((kubeconfig, source)))
    }

    /// The client configuration. A context applies to the named kubeconfig, else to the
    /// inferred one (never in-cluster: a service account has no contexts); a context
    /// the kubeconfig lacks is an error that names it.
    pub async fn config(&self) -> Result<kube::Config, WatchError> {
        let Some((kubeconfig, _)) = self.named_kubeconfig()? else {
            return kube::Config::infer().await.map_err(WatchError::InferConfig);
        };
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|source| match &self.kubeconfig {
                Some(path) => kubeconfig_error(path, source),
                None => WatchError::InferKubeconfig {
                    context: self.context.clone().unwrap_or_default(),
                    error: source,
                },
            })
    }
}

/// kube's message for an unreadable file prints its path in Rust's debug form
/// (`'"/root/.kube/config"'`); the file's own error, with the path plainly, reads better.
fn kubeconfig_cause(error: &kube::config::KubeconfigError, with_path: bool) -> String {
    match error {
        kube::config::KubeconfigError::ReadConfig(io, path) if with_path => {
            format!("{}: {io}", path.display())
        }
        kube::config::KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => other.to_string(),
    }
}

fn kubeconfig_error(path: &Path, source: kube::config::KubeconfigError) -> WatchError {
    WatchError::Kubeconfig {
        path: path.to_path_buf(),
        error: source,
    }
}

/// A plain client for `config`, e.g. for [`load_once`]. Must be called inside a Tokio
/// runtime (the client spawns its request buffer).
pub fn kube_client(config: kube::Config) -> Result<Client, WatchError> {
    Client::try_from(config).map_err(WatchError::Client)
}

/// The watch's client for `config`: every read gets up to one watch period plus slack,
/// and every response and body chunk of a watched collection is told to `activity`.
/// Must be called inside a Tokio runtime.
pub fn watch_client(
    config: kube::Config,
    watch_timeout: Duration,
    activity: Arc<dyn WatchActivity>,
) -> Result<Client, WatchError> {
    let mut config = config;
    // kube-client sets no read timeout by default, so a list whose server stops
    // answering would hang for ever. Any read now gets up to one watch period plus
    // slack (watches are renewed within `watch_timeout` anyway), counted from the
    // request rather than from when a pooled connection went idle.
    if config.read_timeout.is_none() {
        config.read_timeout = Some(watch_timeout + Duration::from_secs(30));
        config.reset_reader_on_write = true;
    }
    Ok(ClientBuilder::try_from(config)
        .map_err(WatchError::Client)?
        .with_layer(&activity::ActivityLayer::new(activity))
        .build())
}
