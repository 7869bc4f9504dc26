//! memcached settings (`backend_type` = `memcache`): the servers, from a
//! list or a DNS SRV record, connections, TLS, and the key settings shared
//! with Redis.

use super::redis::{expiration_jitter, key_prefix};
use super::vars;
use super::*;
use crate::store::{MemcacheConfig, MemcacheServers, MemcacheTls};

/// Longest `cache_key_prefix` memcached keys leave room for (a key is at
/// most 250 bytes, and the hashed form of a long key needs 50 of them).
const MAX_PREFIX_BYTES: usize = 200;

/// Resolves the memcached store from its variables.
pub(super) fn memcache_config<'a>(
    args: &StoreArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<MemcacheConfig, SettingsError> {
    let hosts: Vec<String> = get(vars::memcache_host_port.name)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(str::to_owned)
        .collect();
    let servers = match (hosts.is_empty(), get(vars::memcache_srv.name)) {
        (false, Some(_)) => {
            return Err(SettingsError::Conflict {
                reason: format!(
                    "{} and {} are both set: name the memcached servers one way",
                    vars::memcache_host_port.name,
                    vars::memcache_srv.name
                ),
            });
        }
        (true, None) => {
            return Err(SettingsError::Invalid {
                setting: format!("{}=memcache", vars::backend_type.name),
                reason: format!(
                    "name the memcached servers with {} or {}",
                    vars::memcache_host_port.name,
                    vars::memcache_srv.name
                ),
            });
        }
        (false, None) => MemcacheServers::List(hosts),
        (true, Some(name)) => MemcacheServers::Srv {
            name: name.to_owned(),
            refresh: Some(duration(
                None,
                get(vars::memcache_srv_refresh.name),
                vars::memcache_srv_refresh.name,
                Duration::ZERO,
            )?)
            .filter(|every| !every.is_zero()),
            dns: pick(
                None,
                get(vars::memcache_srv_dns.name),
                vars::memcache_srv_dns.name,
                "an address such as 127.0.0.1:8600",
                |text| text.parse().ok().map(Some),
                None,
            )?,
        },
    };
    let tls = if boolean(None, get(vars::memcache_tls.name), vars::memcache_tls.name)? {
        let path = |var: &Var| get(var.name).map(PathBuf::from);
        Some(MemcacheTls {
            ca_cert: path(&vars::memcache_tls_cacert),
            client_cert: path(&vars::memcache_tls_client_cert),
            client_key: path(&vars::memcache_tls_client_key),
            skip_hostname_verification: boolean(
                None,
                get(vars::memcache_tls_skip_hostname_verification.name),
                vars::memcache_tls_skip_hostname_verification.name,
            )?,
        })
    } else {
        None
    };
    let key_prefix = key_prefix(args, get);
    if key_prefix.len() > MAX_PREFIX_BYTES || key_prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(SettingsError::Invalid {
            setting: vars::cache_key_prefix.name.to_owned(),
            reason: format!(
                "memcached keys take no space or control character, and the prefix may be at most {MAX_PREFIX_BYTES} bytes"
            ),
        });
    }
    Ok(MemcacheConfig {
        servers,
        max_idle_conns: number(
            None,
            get(vars::memcache_max_idle_conns.name),
            vars::memcache_max_idle_conns.name,
            2,
        )?,
        timeout: timeout(
            None,
            get(vars::memcache_timeout.name),
            vars::memcache_timeout.name,
            Duration::from_millis(500),
        )?,
        key_prefix,
        expiration_jitter_max_secs: expiration_jitter(args, get)?,
        tls,
    })
}
