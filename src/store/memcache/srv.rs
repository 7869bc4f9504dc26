//! memcached servers from a DNS SRV record (`MEMCACHE_SRV`), as the
//! reference finds them: `_service._proto.name`, every answer written
//! `target:port` (the target with its final dot, as Go writes it) and the
//! list sorted, so that every instance, floodgate or the reference, puts
//! each key on the same server.

use super::StoreError;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use std::net::SocketAddr;

/// Asks DNS for the servers of one SRV name.
#[derive(Clone)]
pub(super) struct SrvLookup {
    name: String,
    resolver: TokioResolver,
}

impl std::fmt::Debug for SrvLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrvLookup")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SrvLookup {
    /// A lookup of `name` through `dns` (host:port of a DNS server), or
    /// through the system's resolver configuration (`/etc/resolv.conf`).
    ///
    /// # Errors
    ///
    /// [`StoreError::Config`] when `name` is not `_service._proto.name` or
    /// the system's resolver configuration cannot be read.
    pub(super) fn new(name: &str, dns: Option<SocketAddr>) -> Result<Self, StoreError> {
        if !is_srv_name(name) {
            return Err(StoreError::Config {
                reason: "memcached SRV name is not of the form _service._proto.name",
            });
        }
        let resolver = match dns {
            Some(addr) => {
                let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                for connection in &mut server.connections {
                    connection.port = addr.port();
                }
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![server]),
                    TokioRuntimeProvider::default(),
                )
                .build()
            }
            None => TokioResolver::builder_tokio().and_then(|builder| builder.build()),
        }
        .map_err(|_| StoreError::Config {
            reason: "cannot set up the DNS resolver for the memcached SRV record",
        })?;
        Ok(Self {
            name: name.to_owned(),
            resolver,
        })
    }

    /// The servers the record names now, sorted.
    ///
    /// # Errors
    ///
    /// [`StoreError::Srv`] when DNS does not answer or names no server.
    pub(super) async fn servers(&self) -> Result<Vec<String>, StoreError> {
        let lookup = self
            .resolver
            .srv_lookup(self.name.as_str())
            .await
            .map_err(|err| StoreError::Srv {
                name: self.name.clone(),
                detail: err.to_string(),
            })?;
        let mut servers: Vec<String> = lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::SRV(srv) => Some(format!("{}:{}", srv.target, srv.port)),
                _ => None,
            })
            .collect();
        if servers.is_empty() {
            return Err(StoreError::Srv {
                name: self.name.clone(),
                detail: "no SRV answer".to_owned(),
            });
        }
        servers.sort();
        servers.dedup();
        Ok(servers)
    }
}

/// Whether `name` has the reference's SRV form `_service._proto.name`.
fn is_srv_name(name: &str) -> bool {
    let mut labels = name.splitn(3, '.');
    let service = labels.next().unwrap_or_default();
    let proto = labels.next().unwrap_or_default();
    let rest = labels.next().unwrap_or_default();
    service.len() > 1
        && service.starts_with('_')
        && proto.len() > 1
        && proto.starts_with('_')
        && !rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srv_names_have_the_references_form() {
        assert!(is_srv_name("_memcache._tcp.example.com"));
        assert!(is_srv_name("_a._b.c"));
        assert!(!is_srv_name("memcache._tcp.example.com"));
        assert!(!is_srv_name("_memcache.tcp.example.com"));
        assert!(!is_srv_name("_memcache._tcp"));
        assert!(!is_srv_name("_._tcp.x"));
        assert!(SrvLookup::new("example.com", None).is_err());
    }
}
