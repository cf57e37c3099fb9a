//! The HTTP client of every upstream leg: hyper's pooled HTTP/1 client called directly.
//!
//! A general-purpose client (reqwest) parsed the URL again inside every call, for its
//! redirect policy and its request future, and wrapped each call in layers a proxy does not
//! use; here a leg is one `http::Request` on a pooled connection. What the legs rely on:
//! a connect timeout, a read timeout on the response head and on each body frame (a worker
//! that goes silent mid-stream fails the leg), at most 64 idle connections per worker, and
//! errors that tell a connection that was never made ([`UpstreamError::is_connect`]: the
//! request may go elsewhere) from one that broke. Redirects are not followed: a 3xx is the
//! worker's answer.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use futures::stream::{self, BoxStream, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Idle connections kept per worker.
const MAX_IDLE_PER_WORKER: usize = 64;

/// Why a leg failed on its way to or from the worker.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection: refused, unreachable, or not made within the connect timeout. The
    /// request never reached the worker.
    #[error("error sending request: connection failed: {0}")]
    Connect(String),
    /// The connection was made but the request or its answer's head failed.
    #[error("error sending request: {0}")]
    Send(String),
    /// The answer's body broke off.
    #[error("error decoding response body: {0}")]
    Body(String),
    /// Nothing arrived for the read timeout.
    #[error("no data from the worker for {0:?}")]
    ReadTimeout(Duration),
    /// This node could not open a connection: it is out of file descriptors (`EMFILE`,
    /// `ENFILE`). Not the worker's failure: it is never ejected for it.
    #[error("this node is out of file descriptors: {0}")]
    OutOfFiles(String),
}

impl UpstreamError {
    /// The request never reached the worker (it may be placed elsewhere).
    pub fn is_connect(&self) -> bool {
        matches!(self, Self::Connect(_))
    }
}

/// A worker's streamed answer, chunk by chunk.
pub(crate) type Upstream = BoxStream<'static, Result<Bytes, UpstreamError>>;

/// The pooled client. Cheap to clone (the pool is shared).
#[derive(Clone, Debug)]
pub struct UpstreamClient {
    client: Client<HttpConnector, Full<Bytes>>,
    read_timeout: Duration,
}

impl UpstreamClient {
    pub fn new(connect_timeout: Duration, read_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(MAX_IDLE_PER_WORKER)
            .build(connector);
        Self {
            client,
            read_timeout,
        }
    }

    /// A POST of `body` (JSON) to `uri`, accepting `accept`, with `headers` added.
    pub(crate) fn post(
        &self,
        uri: Uri,
        accept: &'static str,
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> UpstreamCall {
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let all = request.headers_mut();
        *all = headers;
        all.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        all.insert(header::ACCEPT, HeaderValue::from_static(accept));
        UpstreamCall {
            client: self.clone(),
            request,
        }
    }
}

/// One leg's request, ready to send.
#[derive(Debug)]
pub(crate) struct UpstreamCall {
    client: UpstreamClient,
    request: Request<Full<Bytes>>,
}

impl UpstreamCall {
    /// Sends the request; the answer's head within the read timeout.
    pub(crate) async fn send(self) -> Result<UpstreamResponse, UpstreamError> {
        let read_timeout = self.client.read_timeout;
        let sent = self.client.client.request(self.request);
        match tokio::time::timeout(read_timeout, sent).await {
            Ok(Ok(response)) => Ok(UpstreamResponse {
                response,
                read_timeout,
            }),
            Ok(Err(e)) if out_of_files(&e) => Err(UpstreamError::OutOfFiles(error_chain(&e))),
            Ok(Err(e)) if e.is_connect() => Err(UpstreamError::Connect(error_chain(&e))),
            Ok(Err(e)) => Err(UpstreamError::Send(error_chain(&e))),
            Err(_) => Err(UpstreamError::ReadTimeout(read_timeout)),
        }
    }
}

/// A worker's answer: its status, then its body as a stream.
#[derive(Debug)]
pub(crate) struct UpstreamResponse {
    response: Response<Incoming>,
    read_timeout: Duration,
}

impl UpstreamResponse {
    pub(crate) fn status(&self) -> StatusCode {
        self.response.status()
    }

    /// The body's data, each frame within the read timeout; the stream ends after an error.
    pub(crate) fn bytes_stream(self) -> Upstream {
        let read_timeout = self.read_timeout;
        let body = Some(self.response.into_body());
        stream::unfold(body, move |body| async move {
            let mut body = body?;
            loop {
                let frame = match tokio::time::timeout(read_timeout, body.frame()).await {
                    Err(_) => return Some((Err(UpstreamError::ReadTimeout(read_timeout)), None)),
                    Ok(None) => return None,
                    Ok(Some(Err(e))) => {
                        return Some((Err(UpstreamError::Body(error_chain(&e))), None));
                    }
                    Ok(Some(Ok(frame))) => frame,
                };
                // Trailers carry no data: read on.
                if let Ok(data) = frame.into_data() {
                    return Some((Ok(data), Some(body)));
                }
            }
        })
        .boxed()
    }
}

/// An error and its sources, as one line.
/// Whether an error, or any error it was caused by, is this process running out of file
/// descriptors (a socket that could not be opened), not a worker refusing.
pub(crate) fn out_of_files(error: &(dyn std::error::Error + 'static)) -> bool {
    /// `EMFILE` (this process's limit) and `ENFILE` (the system's), the same on Linux and
    /// the BSDs.
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(EMFILE | ENFILE))
        {
            return true;
        }
        next = e.source();
    }
    false
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that wraps another, as hyper's client wraps the connector's.
    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Wrapped(#[source] std::io::Error);

    #[test]
    fn running_out_of_file_descriptors_is_told_apart_from_a_refusal() {
        for code in [23, 24] {
            let e = Wrapped(std::io::Error::from_raw_os_error(code));
            assert!(out_of_files(&e), "errno {code}");
        }
        let refused = Wrapped(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!out_of_files(&refused));
        assert!(!out_of_files(&std::io::Error::from_raw_os_error(111)));
    }
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn one_answer(answer: &'static [u8]) -> Uri {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            if let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(answer).await;
                // Keep the connection open: the body's end is up to the answer.
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        });
        format!("http://{addr}/v1/completions")
            .parse()
            .expect("a URI")
    }

    fn client() -> UpstreamClient {
        UpstreamClient::new(Duration::from_secs(1), Duration::from_millis(300))
    }

    #[tokio::test]
    async fn a_chunked_answer_streams_its_data_and_ends() {
        let uri = one_answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .await;
        let response = client()
            .post(uri, "text/event-stream", HeaderMap::new(), b"{}".to_vec())
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), StatusCode::OK);
        let chunks: Vec<_> = response.bytes_stream().collect().await;
        let data: Vec<u8> = chunks
            .into_iter()
            .flat_map(|c| c.expect("data").to_vec())
            .collect();
        assert_eq!(data, b"abcde");
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        // Bound but never listening: refused, and no other test can take the port meanwhile.
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("binds");
        let addr = socket.local_addr().expect("an address");
        let uri: Uri = format!("http://{addr}/v1/completions")
            .parse()
            .expect("a URI");
        let err = client()
            .post(uri, "application/json", HeaderMap::new(), Vec::new())
            .send()
            .await
            .expect_err("nobody listens");
        assert!(err.is_connect(), "{err}");
    }

    #[tokio::test]
    async fn a_worker_silent_past_the_read_timeout_fails_the_body() {
        let uri =
            one_answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n").await;
        let response = client()
            .post(uri, "text/event-stream", HeaderMap::new(), Vec::new())
            .send()
            .await
            .expect("an answer");
        let mut body = response.bytes_stream();
        assert_eq!(
            body.next().await.and_then(Result::ok).as_deref(),
            Some(&b"abc"[..])
        );
        match body.next().await {
            Some(Err(UpstreamError::ReadTimeout(_))) => {}
            other => panic!("expected a read timeout, got {other:?}"),
        }
        assert!(
            body.next().await.is_none(),
            "the stream ends after its error"
        );
    }
}
