//! An open-loop gRPC load generator for `bench/overload.sh`: requests are
//! sent on a schedule whatever the answers (as traffic arrives at a
//! limiter in front of a busy service), each with `grpc-timeout` as
//! Envoy's rate-limit filter sends it, and every answer is sorted by what
//! it is worth to its caller:
//!
//! - goodput: a decision (grpc-status 0) within the deadline;
//! - shed: a `RESOURCE_EXHAUSTED` answer (floodgate's shed under
//!   `FAILURE_MODE=error`) within the deadline;
//! - late: any answer after the deadline, or none within it and a second;
//! - errors: anything else (a refused stream, another status).
//!
//! Lateness counts from the request's scheduled time, so waiting for a
//! free stream on the client is the caller's wait too.
//!
//! ```text
//! overload ADDR BODY_FILE RATE SECS [CONNS] [DEADLINE_MS]
//! ```
//!
//! `BODY_FILE` is a framed gRPC request (`grpc_body encode`). Prints one
//! line per second and a total line:
//! `total sent=N goodput=N shed=N late=N errors=N seconds=S`.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Per scheduled second: sent, goodput, shed, late, errors.
type Tally = Vec<[AtomicU64; 5]>;

#[derive(Clone, Copy)]
enum Fate {
    Goodput = 1,
    Shed = 2,
    Late = 3,
    Error = 4,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: overload ADDR BODY_FILE RATE SECS [CONNS] [DEADLINE_MS]");
        std::process::exit(2);
    }
    let addr = args[1].clone();
    let body = Bytes::from(std::fs::read(&args[2]).unwrap());
    let rate: u64 = args[3].parse().unwrap();
    let secs: u64 = args[4].parse().unwrap();
    let conns: usize = args.get(5).map_or(64, |c| c.parse().unwrap());
    let deadline = Duration::from_millis(args.get(6).map_or(20, |d| d.parse().unwrap()));

    let mut senders = Vec::with_capacity(conns);
    for _ in 0..conns {
        let tcp = TcpStream::connect(&addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (sender, connection) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
        });
        senders.push(sender);
    }
    let tally: Arc<Tally> = Arc::new(
        (0..secs)
            .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
            .collect(),
    );
    let timeout = format!("{}m", deadline.as_millis());
    let start = Instant::now();
    let total = rate * secs;
    // One tick a millisecond: the requests scheduled in it, each timed from
    // its own scheduled instant.
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0u64;
    while sent < total {
        tick.tick().await;
        let elapsed = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let due = elapsed.saturating_mul(rate) / 1_000_000_000;
        while sent < due.min(total) {
            let scheduled = start + Duration::from_nanos(sent * 1_000_000_000 / rate);
            let second = usize::try_from(sent / rate).unwrap();
            let sender = senders[usize::try_from(sent).unwrap() % conns].clone();
            let (body, timeout, tally) = (body.clone(), timeout.clone(), tally.clone());
            tally[second][0].fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let fate = one(sender, body, &timeout, scheduled, deadline).await;
                tally[second][fate as usize].fetch_add(1, Ordering::Relaxed);
            });
            sent += 1;
        }
    }
    // Every answer is in, or late, a second after the last deadline.
    tokio::time::sleep(deadline + Duration::from_secs(1)).await;
    let mut sum = [0u64; 5];
    println!("second\tsent\tgoodput\tshed\tlate\terrors");
    for (s, row) in tally.iter().enumerate() {
        let row: Vec<u64> = row.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        for (total, n) in sum.iter_mut().zip(&row) {
            *total += n;
        }
        println!(
            "{s}\t{}\t{}\t{}\t{}\t{}",
            row[0], row[1], row[2], row[3], row[4]
        );
    }
    println!(
        "total sent={} goodput={} shed={} late={} errors={} seconds={secs}",
        sum[0], sum[1], sum[2], sum[3], sum[4]
    );
}

/// Sends one request and says what its answer was worth.
async fn one(
    sender: h2::client::SendRequest<Bytes>,
    body: Bytes,
    timeout: &str,
    scheduled: Instant,
    deadline: Duration,
) -> Fate {
    let call = async {
        let mut sender = sender.ready().await.ok()?;
        let request = http::Request::post(PATH)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", timeout)
            .body(())
            .ok()?;
        let (response, mut stream) = sender.send_request(request, false).ok()?;
        stream.send_data(body, true).ok()?;
        let response = response.await.ok()?;
        let status = |headers: &http::HeaderMap| {
            headers
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        if let Some(status) = status(response.headers()) {
            return Some(status);
        }
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.ok()?;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let trailers = body.trailers().await.ok()??;
        status(&trailers)
    };
    let answer = tokio::time::timeout_at(scheduled + deadline + Duration::from_secs(1), call).await;
    let late = scheduled.elapsed() > deadline;
    match answer {
        Err(_) => Fate::Late,
        Ok(_) if late => Fate::Late,
        Ok(Some(status)) if status == "0" => Fate::Goodput,
        Ok(Some(status)) if status == "8" => Fate::Shed,
        Ok(_) => Fate::Error,
    }
}
