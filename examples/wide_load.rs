//! The load of the wide key-space profile of `bench/compare.sh`: every
//! request names a descriptor value the server has not seen for a long
//! while, so the stores create and look up fresh counters all the time (no
//! hot key). h2load sends one body per process, hence this small HTTP/2
//! client: bodies pre-encoded, raw `h2` streams, nothing decoded but the
//! gRPC status.
//!
//! ```text
//! wide_load ADDR CONNS STREAMS SECONDS KEYS PREFIX [KEY]
//! ```
//!
//! Sends `ShouldRateLimit(bench, [<KEY>=<PREFIX><i>])` (KEY `client` by
//! default) for i cycling over KEYS values, STREAMS at a time on each of CONNS connections, for SECONDS.
//! Prints one line: `req/s p99_ms requests errors`.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool

use bytes::Bytes;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message as _;
use std::error::Error;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

type BoxError = Box<dyn Error + Send + Sync>;

struct Args {
    addr: String,
    conns: usize,
    streams: usize,
    seconds: u64,
    keys: usize,
    prefix: String,
    /// The descriptor's key.
    key: String,
}

fn args() -> Result<Args, BoxError> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let (addr, conns, streams, seconds, keys, prefix, key) = match a.as_slice() {
        [addr, conns, streams, seconds, keys, prefix] => {
            (addr, conns, streams, seconds, keys, prefix, "client")
        }
        [addr, conns, streams, seconds, keys, prefix, key] => {
            (addr, conns, streams, seconds, keys, prefix, key.as_str())
        }
        _ => return Err("usage: wide_load ADDR CONNS STREAMS SECONDS KEYS PREFIX [KEY]".into()),
    };
    Ok(Args {
        addr: addr.clone(),
        conns: conns.parse()?,
        streams: streams.parse()?,
        seconds: seconds.parse()?,
        keys: keys.parse::<usize>()?.max(1),
        prefix: prefix.clone(),
        key: key.to_owned(),
    })
}

/// One framed request (gRPC prefix + message) for `value`.
fn body(key: &str, value: String) -> Bytes {
    let message = RateLimitRequest {
        domain: "bench".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value,
            }],
            ..RateLimitDescriptor::default()
        }],
        ..RateLimitRequest::default()
    }
    .encode_to_vec();
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(&message);
    Bytes::from(framed)
}

/// One stream's loop: requests one after the other until `until`; returns
/// latencies (µs) and errors.
async fn stream_loop(
    mut client: h2::client::SendRequest<Bytes>,
    uri: http::Uri,
    bodies: Rc<Vec<Bytes>>,
    next: Rc<AtomicUsize>,
    until: Instant,
) -> (Vec<u32>, u64) {
    let (mut latencies, mut errors) = (Vec::new(), 0u64);
    while Instant::now() < until {
        let i = next.fetch_add(1, Ordering::Relaxed) % bodies.len().max(1);
        let Some(body) = bodies.get(i).cloned() else {
            break;
        };
        let started = Instant::now();
        match one_call(&mut client, &uri, body).await {
            Ok(true) => {
                latencies.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX))
            }
            Ok(false) => errors += 1,
            Err(_) => {
                errors += 1;
                break;
            }
        }
    }
    (latencies, errors)
}

/// One call; `Ok(true)` when it ended with `grpc-status: 0`.
async fn one_call(
    client: &mut h2::client::SendRequest<Bytes>,
    uri: &http::Uri,
    body: Bytes,
) -> Result<bool, BoxError> {
    let request = http::Request::post(uri.clone())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let mut ready = client.clone().ready().await?;
    let (response, mut send) = ready.send_request(request, false)?;
    send.send_data(body, true)?;
    let response = response.await?;
    let ok_in_headers = response.headers().get("grpc-status").map(|v| v == "0");
    let mut received = response.into_body();
    while let Some(chunk) = received.data().await {
        let chunk = chunk?;
        let _ = received.flow_control().release_capacity(chunk.len());
    }
    let trailers = received.trailers().await?;
    Ok(trailers
        .and_then(|t| t.get("grpc-status").map(|v| v == "0"))
        .or(ok_in_headers)
        .unwrap_or(false))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let bodies: Rc<Vec<Bytes>> = Rc::new(
        (0..args.keys)
            .map(|i| body(&args.key, format!("{}{i}", args.prefix)))
            .collect(),
    );
    let next = Rc::new(AtomicUsize::new(0));
    let uri: http::Uri = format!("http://{}{PATH}", args.addr).parse()?;
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::new();
    for _ in 0..args.conns {
        let tcp = tokio::net::TcpStream::connect(&args.addr).await?;
        tcp.set_nodelay(true)?;
        let (client, connection) = h2::client::handshake(tcp).await?;
        local.spawn_local(async move {
            let _ = connection.await;
        });
        for _ in 0..args.streams {
            tasks.push(local.spawn_local(stream_loop(
                client.clone(),
                uri.clone(),
                bodies.clone(),
                next.clone(),
                until,
            )));
        }
    }
    let (mut latencies, mut errors) = (Vec::new(), 0);
    local
        .run_until(async {
            for task in tasks {
                if let Ok((l, e)) = task.await {
                    latencies.extend(l);
                    errors += e;
                }
            }
        })
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let p99 = latencies
        .get((latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0);
    #[allow(clippy::cast_precision_loss)] // display values
    let rate = latencies.len() as f64 / elapsed;
    println!(
        "{rate:.0} {:.2} {} {errors}",
        f64::from(p99) / 1000.0,
        latencies.len()
    );
    Ok(())
}

fn main() -> ExitCode {
    let result = args().and_then(|args| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(run(args))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
