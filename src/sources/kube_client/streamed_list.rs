//! A list read as its body arrives: each object is decoded from the bytes that hold it,
//! handed over, and dropped before the next, so that neither the whole response nor
//! every object of it is ever held at once. For the agent's reads from the API server's
//! watch cache where it has no streaming lists (`resourceVersion=0`, which that cache
//! answers whole, however large): kube-client's `Api::list` collects the body, then
//! decodes every object, before the first can be trimmed.
//!
//! No thread and no channel: the body's chunks are pulled only as the caller asks for
//! objects ([`ListReader::next`]), and pushed into the decoder of
//! `decode/cluster/list_chunks.rs`, which cuts each object's JSON out for serde_json to
//! parse from a slice (faster than its reader-based parser, which would also need a
//! blocking thread fed by the network).

use std::marker::PhantomData;
use std::pin::Pin;

use futures::{AsyncBufRead, AsyncBufReadExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

use crate::decode::cluster::list_chunks::{ListBodyError, ListChunks, ListPart};

/// A list under way: its objects one at a time, then its metadata.
pub struct ListReader<K> {
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    chunks: ListChunks,
    metadata: ListMeta,
    ended: bool,
    kind: PhantomData<fn() -> K>,
}

/// Sends the list request of `params` for `api`'s collection. An answer other than
/// 2xx is kube's [`kube::Error::Api`] with the API server's `Status` (or one made up
/// from the status code when the body is not one), as `Api::list` gives it.
pub async fn stream_list<K>(api: &Api<K>, params: &ListParams) -> Result<ListReader<K>, kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned,
{
    let mut request = kube::core::Request::new(api.resource_url())
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("list");
    let client = api.clone().into_client();
    let body = client.request_stream(request).await?;
    Ok(ListReader {
        body: Box::pin(body),
        chunks: ListChunks::new(),
        metadata: ListMeta::default(),
        ended: false,
        kind: PhantomData,
    })
}

impl<K: DeserializeOwned> ListReader<K> {
    /// The list's next object; None once the body has ended with the list complete.
    /// A body that breaks off, or that is not a List, is an error
    /// ([`kube::Error::ReadEvents`], [`kube::Error::SerdeError`]), as is an object that
    /// does not decode.
    pub async fn next(&mut self) -> Result<Option<K>, kube::Error> {
        loop {
            match self.chunks.next_part().map_err(body_error)? {
                Some(ListPart::Item(text)) => {
                    return serde_json::from_slice(text)
                        .map(Some)
                        .map_err(kube::Error::SerdeError);
                }
                Some(ListPart::Metadata(text)) => {
                    self.metadata = serde_json::from_slice(text).map_err(kube::Error::SerdeError)?;
                    continue;
                }
                None => {}
            }
            if self.ended {
                return Ok(None);
            }
            let chunk = self.body.fill_buf().await.map_err(kube::Error::ReadEvents)?;
            if chunk.is_empty() {
                self.chunks.finish().map_err(body_error)?;
                self.ended = true;
                continue;
            }
            let length = chunk.len();
            self.chunks.push(chunk);
            self.body.consume_unpin(length);
        }
    }

    /// The list's metadata (`resourceVersion`, `continue`): complete once
    /// [`next`](Self::next) has given None.
    pub fn metadata(&self) -> &ListMeta {
        &self.metadata
    }
}

/// A body that is not a List, as kube says of a body it cannot decode.
fn body_error(error: ListBodyError) -> kube::Error {
    kube::Error::SerdeError(<serde_json::Error as serde::de::Error>::custom(error))
}

#[cfg(test)]
mod tests;
