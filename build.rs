//! Compiles `proto/` into Rust with protox (pure Rust, no system `protoc`) and
//! tonic-prost-build, and writes the encoded descriptor set that gRPC server
//! reflection serves.

use prost::Message as _;
use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/envoy/service/ratelimit/v3/rls.proto",
    "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("floodgate_descriptor.bin"),
        fds.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
