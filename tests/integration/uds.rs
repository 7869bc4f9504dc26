//! `GRPC_UDS` served to every gRPC stack: a client that sends the
//! `:authority` the gRPC core library (grpcio, C++, Ruby, PHP) sends for
//! `unix:/path` (the path, `/` written `%2F`), and one that sends an empty
//! one, are answered. The client here writes HTTP/2 frames itself, since
//! neither the `http` crate nor h2's client can build that authority.

use crate::support::floodgate::Floodgate;
use crate::support::grpc::request;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use prost::Message as _;
use std::collections::HashMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A gRPC call's HEADERS and DATA frames on `stream`.
fn call(stream: u32, path: &str, authority: &str, message: &[u8]) -> Vec<u8> {
    let mut encoder = loona_hpack::Encoder::new();
    let headers = [
        (&b":method"[..], &b"POST"[..]),
        (b":scheme", b"http"),
        (b":path", path.as_bytes()),
        (b":authority", authority.as_bytes()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ];
    let block = encoder.encode(headers);
    let mut out = frame(HEADERS, END_HEADERS, stream, &block);
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(message);
    out.extend(frame(0x0, END_STREAM, stream, &body));
    out
}

/// What came back on one stream: its header blocks' headers and its
/// DATA bytes.
#[derive(Default, Debug)]
struct Answer {
    headers: Vec<(String, String)>,
    data: Vec<u8>,
    ended: bool,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The gRPC message the stream carried.
    fn message(&self) -> &[u8] {
        &self.data[5..]
    }
}

/// Sends `calls` (each a stream's frames) on a new connection to `socket`
/// and reads until every stream has ended (10 s at most).
async fn exchange(
    socket: &std::path::Path,
    streams: &[u32],
    calls: Vec<u8>,
) -> HashMap<u32, Answer> {
    let mut conn = UnixStream::connect(socket).await.unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(calls);
    conn.write_all(&out).await.unwrap();
    let mut answers: HashMap<u32, Answer> = HashMap::new();
    let mut decoder = loona_hpack::Decoder::new();
    let read = async {
        while !streams
            .iter()
            .all(|s| answers.get(s).is_some_and(|a| a.ended))
        {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.unwrap();
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.unwrap();
            match kind {
                // SETTINGS from the server: acknowledged.
                0x4 if flags & 0x1 == 0 => conn.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
                // RST_STREAM: the stream refused, as it was before.
                0x3 => panic!("stream {stream} reset (error {payload:?})"),
                HEADERS => {
                    assert_ne!(flags & END_HEADERS, 0, "a header block in pieces");
                    let answer = answers.entry(stream).or_default();
                    for (n, v) in decoder.decode(&payload).unwrap() {
                        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
                        answer.headers.push((text(n), text(v)));
                    }
                    answer.ended |= flags & END_STREAM != 0;
                }
                0x0 => {
                    let answer = answers.entry(stream).or_default();
                    answer.data.extend_from_slice(&payload);
                    answer.ended |= flags & END_STREAM != 0;
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("every stream answered within 10 s");
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_authority_a_grpc_client_sends_on_a_unix_socket_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rls.sock");
    let server = Floodgate::start(&[("GRPC_UDS", socket.display().to_string())]).await;
    // As grpcio 1.85 writes `unix:/tmp/x/rls.sock`: the path without its
    // first `/`, each other `/` as `%2F`.
    let core = socket
        .display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "%2F");
    // A sliding log of 10,000 a minute: no window turns under the test.
    let limited = request("edge", &[&[("log", "uds")]]).encode_to_vec();
    let rls = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let mut calls = Vec::new();
    for (stream, authority) in [(1, core.as_str()), (3, ""), (5, "localhost")] {
        calls.extend(call(stream, rls, authority, &limited));
    }
    // Health, with the core library's authority (an empty request).
    calls.extend(call(7, "/grpc.health.v1.Health/Check", &core, &[]));
    let answers = exchange(&socket, &[1, 3, 5, 7], calls).await;
    let mut remaining = Vec::new();
    for stream in [1, 3, 5] {
        let answer = &answers[&stream];
        assert_eq!(
            answer.header("grpc-status"),
            Some("0"),
            "stream {stream}: {answer:?}"
        );
        let response = RateLimitResponse::decode(answer.message()).unwrap();
        assert_eq!(response.overall_code, 1, "stream {stream}: {response:?}");
        remaining.push(response.statuses[0].limit_remaining);
    }
    remaining.sort_unstable();
    assert_eq!(remaining, [9_997, 9_998, 9_999]);
    // grpc.health.v1.HealthCheckResponse { status: SERVING (1) }.
    let health = &answers[&7];
    assert_eq!(health.header("grpc-status"), Some("0"), "{health:?}");
    assert_eq!(health.message(), [0x08, 0x01]);
    server.stop().await;
}
