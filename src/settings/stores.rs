//! The stores file (`stores_file`): the stores rules name (`store: NAME`), each from a YAML
//! map whose keys are the process-wide settings' names without their
//! `REDIS_` or `MEMCACHE_` prefix, in lower case, read exactly as those
//! settings are (the same parsers, the same defaults).

use super::memcache::memcache_config;
use super::redis::{MAIN, redis_config};
use super::vars::{self, ALL};
use super::{SettingsError, StoreArgs};
use crate::limiter::FailureMode;
use crate::store::{MemcacheConfig, RedisConfig};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Longest store name: names travel in metric labels and log lines.
const MAX_NAME: usize = 64;
/// Names rules give without a file: the process-wide store and this
/// instance's embedded store.
const RESERVED: [&str; 2] = ["default", "local"];
/// Settings every store kind shares with the process-wide ones, by their
/// full names.
const SHARED: [&str; 2] = [
    vars::cache_key_prefix.name,
    vars::expiration_jitter_max_seconds.name,
];

/// One store of the stores file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedStore {
    /// The name rules give (`store: NAME`).
    pub name: String,
    /// Where its counters live.
    pub kind: NamedKind,
    /// Its `failure_mode` (else the process-wide one).
    pub failure_mode: Option<FailureMode>,
}

/// What a named store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamedKind {
    /// `type: redis`, `redis-sentinel` or `redis-cluster`.
    Redis(RedisConfig),
    /// `type: memcache`.
    Memcache(MemcacheConfig),
    /// `type: memory`: an embedded store of its own, with this budget.
    Memory {
        /// `memory_store_max_bytes`.
        max_bytes: usize,
    },
}

impl NamedKind {
    /// Whether it counts fixed windows only (memcached).
    pub fn fixed_windows_only(&self) -> bool {
        matches!(self, Self::Memcache(_))
    }

    /// The `type` it was given, for logs.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Redis(config) => match config.mode {
                crate::store::RedisMode::Single => "redis",
                crate::store::RedisMode::Sentinel => "redis-sentinel",
                crate::store::RedisMode::Cluster => "redis-cluster",
            },
            Self::Memcache(_) => "memcache",
            Self::Memory { .. } => "memory",
        }
    }
}

/// Reads `path`: every store, in name order.
///
/// # Errors
///
/// [`SettingsError::Invalid`] naming the setting, the file, the store
/// and what is wrong.
pub fn read_stores_file(path: &Path) -> Result<Vec<NamedStore>, SettingsError> {
    let fail = |reason: String| SettingsError::Invalid {
        setting: vars::stores_file.name.to_owned(),
        reason: format!("{}: {reason}", path.display()),
    };
    let text = std::fs::read_to_string(path).map_err(|err| fail(format!("cannot read: {err}")))?;
    parse_stores(&text).map_err(fail)
}

/// The stores `text` (a stores file's YAML) defines, in name order.
///
/// # Errors
///
/// What is wrong, naming the store.
pub fn parse_stores(text: &str) -> Result<Vec<NamedStore>, String> {
    let map: BTreeMap<String, serde_yaml_ng::Value> = if text.trim().is_empty() {
        BTreeMap::new()
    } else {
        serde_yaml_ng::from_str(text)
            .map_err(|err| format!("not a map from store names to settings: {err}"))?
    };
    let mut stores = Vec::with_capacity(map.len());
    for (name, value) in map {
        let store = named_store(&name, &value).map_err(|err| format!("store '{name}': {err}"))?;
        stores.push(store);
    }
    if stores.len() > usize::from(u8::MAX) - 2 {
        return Err(format!(
            "{} stores: at most {} are allowed",
            stores.len(),
            u8::MAX - 2
        ));
    }
    Ok(stores)
}

/// One store from its map.
fn named_store(name: &str, value: &serde_yaml_ng::Value) -> Result<NamedStore, String> {
    if RESERVED.contains(&name) {
        return Err(format!(
            "'{name}' is reserved ({}): give the store another name",
            if name == "default" {
                format!(
                    "the process-wide store, set with {} and REDIS_* or MEMCACHE_*",
                    vars::backend_type.name
                )
            } else {
                "this instance's embedded store".to_owned()
            }
        ));
    }
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(format!(
            "a store's name is 1 to {MAX_NAME} letters, digits, '_', '-' or '.'"
        ));
    }
    let serde_yaml_ng::Value::Mapping(map) = value else {
        return Err("settings must be a map (type: redis, url: ...)".to_owned());
    };
    let mut keys: HashMap<String, String> = HashMap::with_capacity(map.len());
    for (key, value) in map {
        let key = key
            .as_str()
            .ok_or_else(|| "setting names must be strings".to_owned())?;
        let text = match value {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            serde_yaml_ng::Value::Bool(b) => b.to_string(),
            _ => {
                return Err(format!(
                    "{key}: a setting's value is a string, number or boolean"
                ));
            }
        };
        keys.insert(key.to_owned(), text);
    }
    let kind = keys
        .get("type")
        .ok_or_else(|| {
            "type is required: redis, redis-sentinel, redis-cluster, memcache or memory".to_owned()
        })?
        .clone();
    let failure_mode = match keys.get("failure_mode").map(String::as_str) {
        None => None,
        Some("error") => Some(FailureMode::Error),
        Some("allow") => Some(FailureMode::Allow),
        Some("deny") => Some(FailureMode::Deny),
        Some(other) => {
            return Err(format!(
                "failure_mode '{other}' is not error, allow or deny"
            ));
        }
    };
    let (prefix, redis_type) = match kind.as_str() {
        "redis" => ("REDIS_", Some("single")),
        "redis-sentinel" => ("REDIS_", Some("sentinel")),
        "redis-cluster" => ("REDIS_", Some("cluster")),
        "memcache" => ("MEMCACHE_", None),
        "memory" => ("MEMORY_STORE_", None),
        other => {
            return Err(format!(
                "type '{other}' is not redis, redis-sentinel, redis-cluster, memcache or memory"
            ));
        }
    };
    let allowed = allowed_keys(prefix);
    if let Some(unknown) = keys
        .keys()
        .find(|k| !matches!(k.as_str(), "type" | "failure_mode") && !allowed.contains(k))
    {
        let mut known: Vec<&str> = allowed.iter().map(String::as_str).collect();
        known.sort_unstable();
        return Err(format!(
            "unknown setting '{unknown}' for type {kind} (known: type, failure_mode, {})",
            known.join(", ")
        ));
    }
    // Each process-wide variable read from the store's own keys; the
    // shared ones fall back to nothing here (their defaults), so a store
    // is set by its file alone.
    let full_name = |var: &str| -> Option<String> {
        if var == vars::redis_type.name {
            return None;
        }
        if SHARED.contains(&var) {
            return Some(var.to_ascii_lowercase());
        }
        let rest = var.strip_prefix(prefix)?;
        if rest.starts_with("PERSECOND") {
            return None;
        }
        Some(if prefix == "MEMORY_STORE_" {
            var.to_ascii_lowercase()
        } else {
            rest.to_ascii_lowercase()
        })
    };
    let get = |var: &str| -> Option<&str> {
        if var == vars::redis_type.name {
            return redis_type;
        }
        let key = full_name(var)?;
        keys.get(&key).map(String::as_str).filter(|v| !v.is_empty())
    };
    let in_keys = |err: SettingsError| -> String {
        // The parsers name the process-wide variable: name the key.
        let mut text = err.to_string();
        for var in ALL {
            if let Some(key) = full_name(var.name)
                && text.contains(var.name)
            {
                text = text
                    .replace(&format!("environment variable {}", var.name), &key)
                    .replace(var.name, &key);
            }
        }
        text
    };
    let args = StoreArgs::default();
    let kind = match kind.as_str() {
        "memcache" => NamedKind::Memcache(memcache_config(&args, &get).map_err(in_keys)?),
        "memory" => NamedKind::Memory {
            max_bytes: match get(vars::memory_store_max_bytes.name) {
                None => 128 * 1024 * 1024,
                Some(text) => text.parse().map_err(|_| {
                    format!("memory_store_max_bytes '{text}' is not a number of bytes")
                })?,
            },
        },
        _ => {
            if !keys.contains_key("url") {
                return Err("url is required for a Redis store".to_owned());
            }
            NamedKind::Redis(redis_config(&args, &get, &MAIN).map_err(in_keys)?)
        }
    };
    Ok(NamedStore {
        name: name.to_owned(),
        kind,
        failure_mode,
    })
}

/// The keys a store of the kind whose variables start with `prefix` takes.
fn allowed_keys(prefix: &str) -> Vec<String> {
    if prefix == "MEMORY_STORE_" {
        return vec![vars::memory_store_max_bytes.name.to_ascii_lowercase()];
    }
    ALL.iter()
        .filter_map(|var| {
            let rest = var.name.strip_prefix(prefix)?;
            (var.name != vars::redis_type.name && !rest.starts_with("PERSECOND"))
                .then(|| rest.to_ascii_lowercase())
        })
        .chain(SHARED.iter().map(|s| s.to_ascii_lowercase()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_redis_store_reads_the_redis_settings_by_their_short_names() {
        let stores = parse_stores(
            "global:\n  type: redis\n  url: redis.home:6379\n  timeout: 2s\n  pool_size: 4\n  failure_mode: allow\nzone:\n  type: redis-cluster\n  url: a:1,b:2\n",
        )
        .unwrap();
        assert_eq!(stores.len(), 2);
        let global = &stores[0];
        assert_eq!(global.name, "global");
        assert_eq!(global.failure_mode, Some(FailureMode::Allow));
        let NamedKind::Redis(config) = &global.kind else {
            panic!("a redis store: {global:?}");
        };
        assert_eq!(config.url, "redis.home:6379");
        assert_eq!(config.timeout, Duration::from_secs(2));
        assert_eq!(config.pool_size, 4);
        assert_eq!(config.mode, crate::store::RedisMode::Single);
        let NamedKind::Redis(zone) = &stores[1].kind else {
            panic!("a cluster");
        };
        assert_eq!(zone.mode, crate::store::RedisMode::Cluster);
        assert_eq!(stores[1].failure_mode, None);
    }

    #[test]
    fn memcache_and_memory_stores() {
        let stores = parse_stores(
            "edge:\n  type: memcache\n  host_port: 127.0.0.1:11211\nburst:\n  type: memory\n  memory_store_max_bytes: 1048576\n",
        )
        .unwrap();
        assert_eq!(
            stores[0].kind,
            NamedKind::Memory {
                max_bytes: 1_048_576
            }
        );
        assert!(stores[1].kind.fixed_windows_only());
    }

    #[test]
    fn mistakes_name_the_store_and_what_is_wrong() {
        let cases = [
            (
                "default:\n  type: redis\n  url: x:1\n",
                "store 'default': 'default' is reserved",
            ),
            (
                "local:\n  type: memory\n",
                "store 'local': 'local' is reserved",
            ),
            ("g:\n  url: x:1\n", "store 'g': type is required"),
            (
                "g:\n  type: postgres\n",
                "store 'g': type 'postgres' is not",
            ),
            ("g:\n  type: redis\n", "store 'g': url is required"),
            (
                "g:\n  type: redis\n  url: x:1\n  timeot: 2s\n",
                "store 'g': unknown setting 'timeot' for type redis",
            ),
            (
                "g:\n  type: redis\n  url: x:1\n  timeout: soon\n",
                "store 'g': timeout='soon' is not",
            ),
            (
                "g:\n  type: redis\n  url: x:1\n  failure_mode: maybe\n",
                "store 'g': failure_mode 'maybe'",
            ),
            ("g:\n  type: memcache\n", "store 'g':"),
            ("'a b':\n  type: memory\n", "store 'a b': a store's name"),
            ("- a\n- b\n", "not a map"),
            ("g: 3\n", "store 'g': settings must be a map"),
        ];
        for (text, wanted) in cases {
            let err = parse_stores(text).unwrap_err();
            assert!(err.contains(wanted), "{text:?}: {err}");
        }
    }
}
