//! Signs of life of the watches, seen on the wire.
//!
//! kube-runtime's watcher swallows bookmarks and watch renewals: its stream is silent
//! while a quiet cluster's watch is perfectly healthy, and equally silent while a list
//! hangs. This tower layer, wrapped around the watch's client, sees every response and
//! every chunk of every body, and tells them to a [`WatchActivity`] as signs of life of
//! the watch whose collection the request was for.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::sources::kube_client::WatchedResource;

/// The resources whose requests the layer can tell apart, in the order it looks.
const WATCHABLE: [WatchedResource; 3] = [
    WatchedResource::Services,
    WatchedResource::EndpointSlices,
    WatchedResource::Node,
];

/// Where the watch's client reports what it sees of each watched collection.
pub trait WatchActivity: Send + Sync + 'static {
    /// Whether `resource` is watched: requests for others go unrecorded.
    fn watches(&self, resource: WatchedResource) -> bool;
    /// A response for `resource`'s collection arrived, with `status`.
    fn on_response(&self, resource: WatchedResource, status: http::StatusCode);
    /// A chunk of a list or watch response body for `resource` arrived.
    fn on_data(&self, resource: WatchedResource);
}

/// The tower layer that reports a client's responses to a [`WatchActivity`].
#[derive(Clone)]
pub(crate) struct ActivityLayer {
    activity: Arc<dyn WatchActivity>,
}

impl ActivityLayer {
    pub(crate) fn new(activity: Arc<dyn WatchActivity>) -> Self {
        ActivityLayer { activity }
    }
}

impl<S> tower::Layer<S> for ActivityLayer {
    type Service = ActivityService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ActivityService {
            inner,
            activity: self.activity.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct ActivityService<S> {
    inner: S,
    activity: Arc<dyn WatchActivity>,
}

/// The watched resource a request is for, when it is one.
type Watched = Option<(Arc<dyn WatchActivity>, WatchedResource)>;

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for ActivityService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<ActivityBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let path = request.uri().path();
        let watched: Watched = WATCHABLE
            .into_iter()
            .find(|r| self.activity.watches(*r) && r.path() == path)
            .map(|r| (self.activity.clone(), r));
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            if let Some((activity, resource)) = &watched {
                activity.on_response(*resource, response.status());
            }
            Ok(response.map(|inner| ActivityBody { inner, watched }))
        })
    }
}

/// A response body that reports each chunk as a sign of life of its watch.
pub(crate) struct ActivityBody<B> {
    inner: B,
    watched: Watched,
}

impl<B> http_body::Body for ActivityBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &frame
            && let Some((activity, resource)) = &self.watched
        {
            activity.on_data(*resource);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
