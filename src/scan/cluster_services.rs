//! Every Service of the cluster, for the cluster-wide views: from a cluster state file
//! (the bundle's `cluster.json` form) or listed from the API server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;

use crate::decode::cluster::{ClusterFileError, read_services};
use crate::heart::views::claims::{Claim, ClaimProblem, claims_of};
use crate::sources::kube_client::{self, KubeTarget, WatchError};

/// Where the Services come from.
#[derive(Debug, Clone)]
pub enum ServiceSource {
    /// A `kubectl get services -A -o json` List (the bundle's `cluster.json` form).
    File(PathBuf),
    /// The API server: this kubeconfig and context, or KUBECONFIG, ~/.kube/config,
    /// in-cluster.
    Api { api: KubeTarget, timeout: Duration },
}

/// Why the Services could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ServicesError {
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: ClusterFileError,
    },
    #[error("cannot start the API client: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Api(#[from] WatchError),
}

/// The Services, and what could not be read of them.
#[derive(Debug, Default)]
pub struct ClusterServices {
    pub services: Vec<Service>,
    pub problems: Vec<ClaimProblem>,
}

impl ClusterServices {
    /// Every claim of every Service; values that cannot be claims join `problems`.
    pub fn claims(&self) -> (Vec<Claim>, Vec<ClaimProblem>) {
        let mut problems = self.problems.clone();
        let claims = self
            .services
            .iter()
            .flat_map(|s| claims_of(s, &mut problems))
            .collect();
        (claims, problems)
    }
}

/// Reads every Service from `source`.
pub fn load_services(source: &ServiceSource) -> Result<ClusterServices, ServicesError> {
    match source {
        ServiceSource::File(path) => read_file(path),
        ServiceSource::Api { api, timeout } => list_from_api(api, *timeout),
    }
}

fn read_file(path: &Path) -> Result<ClusterServices, ServicesError> {
    let file = std::fs::File::open(path).map_err(|source| ServicesError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let list = read_services(std::io::BufReader::new(file)).map_err(|source| ServicesError::File {
        path: path.to_path_buf(),
        source,
    })?;
    let problems = list
        .problems
        .into_iter()
        .map(|p| ClaimProblem {
            service: p.object.trim_start_matches("Service ").to_string(),
            problem: p.problem,
        })
        .collect();
    Ok(ClusterServices {
        services: list.services,
        problems,
    })
}

fn list_from_api(api: &KubeTarget, timeout: Duration) -> Result<ClusterServices, ServicesError> {
    let services = crate::sources::block_on(async {
        let config = api.config().await?;
        kube_client::list_every_service(kube_client::kube_client(config)?, timeout).await
    })
    .map_err(ServicesError::Runtime)??;
    Ok(ClusterServices {
        services,
        problems: Vec::new(),
    })
}
