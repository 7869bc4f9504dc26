//! Writes and reads gRPC-framed RLS messages for load tools that send raw
//! HTTP/2 (bench/run.sh drives floodgate with h2load).
//!
//! ```text
//! grpc_body encode DOMAIN KEY=VALUE[,KEY=VALUE…] [DESCRIPTOR…] > request.bin
//! grpc_body decode < response.bin
//! ```
//!
//! `encode` writes one `RateLimitRequest` (one descriptor per argument after
//! the domain) behind the 5-byte gRPC prefix (compressed flag 0, big-endian
//! length). `decode` reads a framed `RateLimitResponse` and prints its codes,
//! exiting non-zero if the bytes are not one.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool

use floodgate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use floodgate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use floodgate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message as _;
use std::io::{Read as _, Write as _};
use std::process::ExitCode;

/// Length of the gRPC message prefix: 1 flag byte + 4 length bytes.
const PREFIX_LEN: usize = 5;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((mode, rest)) if mode == "encode" && rest.len() >= 2 => encode(&rest[0], &rest[1..]),
        Some((mode, rest)) if mode == "decode" && rest.is_empty() => decode(),
        _ => {
            Err("usage: grpc_body encode DOMAIN KEY=VALUE[,KEY=VALUE…]… | grpc_body decode".into())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn encode(domain: &str, descriptors: &[String]) -> Result<(), String> {
    let descriptors = descriptors
        .iter()
        .map(|arg| {
            let entries = arg
                .split(',')
                .map(|pair| {
                    let (key, value) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("'{pair}' is not KEY=VALUE"))?;
                    Ok(Entry {
                        key: key.to_owned(),
                        value: value.to_owned(),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(RateLimitDescriptor {
                entries,
                ..RateLimitDescriptor::default()
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let message = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
    .encode_to_vec();
    let len = u32::try_from(message.len()).map_err(|_| "message too large".to_owned())?;
    let mut framed = Vec::with_capacity(PREFIX_LEN + message.len());
    framed.push(0);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(&message);
    std::io::stdout()
        .write_all(&framed)
        .map_err(|err| format!("cannot write: {err}"))
}

fn decode() -> Result<(), String> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .map_err(|err| format!("cannot read: {err}"))?;
    let (prefix, message) = bytes
        .split_at_checked(PREFIX_LEN)
        .ok_or("shorter than a gRPC prefix")?;
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    if prefix[0] != 0 || usize::try_from(len).ok() != Some(message.len()) {
        return Err(format!(
            "bad gRPC prefix: flag {}, length {len}, {} bytes follow",
            prefix[0],
            message.len()
        ));
    }
    let response = RateLimitResponse::decode(message)
        .map_err(|err| format!("not a RateLimitResponse: {err}"))?;
    let name = |code: i32| Code::try_from(code).map_or("INVALID", |c| c.as_str_name());
    let statuses: Vec<String> = response
        .statuses
        .iter()
        .map(|s| {
            let limit = s
                .current_limit
                .as_ref()
                .map_or_else(|| "none".to_owned(), |l| l.requests_per_unit.to_string());
            format!(
                "{}(limit {limit}, remaining {})",
                name(s.code),
                s.limit_remaining
            )
        })
        .collect();
    println!(
        "overall_code={} statuses=[{}]",
        name(response.overall_code),
        statuses.join(", ")
    );
    Ok(())
}
