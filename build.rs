//! Compiles `proto/` into Rust with protox (pure Rust, no system `protoc`) and
//! tonic-prost-build, and writes the encoded descriptor set that gRPC server
//! reflection serves.

use prost::Message as _;
use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/envoy/service/ratelimit/v3/rls.proto",
    "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
    "proto/envoy/service/discovery/v3/ads.proto",
    "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
];

/// Files floodgate only uses as a client (the xDS rule source): compiled,
/// but left out of the reflection descriptor set so reflection lists only
/// the services floodgate serves.
const CLIENT_ONLY: &[&str] = &[
    "envoy/service/discovery/v3/ads.proto",
    "envoy/service/discovery/v3/discovery.proto",
    "google/rpc/status.proto",
    "ratelimit/config/ratelimit/v3/rls_conf.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // .cargo/config.toml sets it; a RUSTFLAGS variable replaces that list.
    if std::env::var_os("CARGO_CFG_TOKIO_UNSTABLE").is_none() {
        println!(
            "cargo:warning=built without --cfg tokio_unstable: the runtime keeps tokio's LIFO \
             slot and answers under load share fewer writes (see .cargo/config.toml)"
        );
    }
    let fds = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut served = fds.clone();
    served
        .file
        .retain(|file| !CLIENT_ONLY.contains(&file.name()));
    std::fs::write(
        out_dir.join("floodgate_descriptor.bin"),
        served.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
