//! A session's standalone stream (the agent's GET) with Palisade's own events in it: a
//! server's notifications that belong to no call, written as the server's text
//! (`UpstreamLink::raw_out`), and a server's requests that no call carries, as Palisade's
//! questions (`UpstreamLink::standalone_asker`), beside the events rmcp writes on the same
//! response (its replay, list changes, requests of its session).
//!
//! Why: through rmcp's session a notification is re-encoded from its typed message, and a
//! number not spelt as serde writes it (`1e3`, `1.50`, an integer past 2^64) arrives
//! re-spelt, as it does not over stdio or on a call's own stream.
//!
//! Palisade's events carry no `id:`: rmcp reads a reconnecting agent's `Last-Event-ID` as an
//! index into its own cache, which an id of Palisade's would misdirect. So they are not
//! replayed after a reconnection: while no GET is open, notifications go through rmcp's
//! session, which keeps them for the next one. The two sources interleave only between whole
//! events, rmcp's first when both have one ready; the response ends when rmcp's does (the
//! session deleted, the principal stopped). A GET that resumes a request's own stream is
//! left as rmcp answers it (that stream ends with its request). A GET sent before the
//! session's `notifications/initialized` was handled (the Python SDK opens its GET beside
//! that POST) gets a stream the session takes when it registers (`SessionPeers`).

use axum::body::{Body, Bytes};
use futures::{Stream, StreamExt};

use crate::gateway::agent::request_stream::Lines;

use super::fast::answer::one_event;

/// rmcp's standalone response body with `lines` added as SSE events.
pub(super) fn merged(rmcp: Body, lines: Lines) -> Body {
    Body::from_stream(merge(rmcp.into_data_stream(), lines.map(|l| one_event(&l))))
}

/// `theirs` and `ours` as one stream, `theirs` first when both are ready, ending when
/// `theirs` ends (`ours` may never end: its senders live as long as the session).
fn merge<E>(
    theirs: impl Stream<Item = Result<Bytes, E>> + Unpin,
    ours: impl Stream<Item = Vec<u8>> + Unpin,
) -> impl Stream<Item = Result<Bytes, E>> {
    futures::stream::unfold((theirs, Some(ours)), |(mut theirs, mut ours)| async move {
        let item = match ours.as_mut() {
            None => theirs.next().await,
            Some(own) => tokio::select! {
                biased;
                item = theirs.next() => item,
                line = own.next() => match line {
                    Some(event) => Some(Ok(Bytes::from(event))),
                    None => {
                        ours = None;
                        theirs.next().await
                    }
                },
            },
        };
        item.map(|item| (item, (theirs, ours)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    fn texts(items: Vec<Result<Bytes, ()>>) -> Vec<String> {
        items
            .into_iter()
            .map(|i| String::from_utf8(i.unwrap().to_vec()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn rmcps_events_go_first_ours_between_them_and_the_stream_ends_with_rmcps() {
        // rmcp's second event is not ready at once: ours goes out meanwhile.
        let theirs = stream::iter(vec![Ok(Bytes::from("a"))]).chain(stream::once(async {
            tokio::task::yield_now().await;
            Ok(Bytes::from("b"))
        }));
        let ours = stream::iter(vec![b"x".to_vec()]).chain(stream::pending());
        let got: Vec<_> = merge(Box::pin(theirs), Box::pin(ours)).collect().await;
        assert_eq!(texts(got), ["a", "x", "b"]);
    }

    #[tokio::test]
    async fn rmcps_stream_goes_on_after_ours_has_ended() {
        let theirs = stream::iter(vec![Ok(Bytes::from("a"))]).chain(stream::once(async {
            tokio::task::yield_now().await;
            Ok(Bytes::from("b"))
        }));
        let got: Vec<_> = merge(Box::pin(theirs), stream::empty()).collect().await;
        assert_eq!(texts(got), ["a", "b"]);
    }
}
