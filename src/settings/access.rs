//! Who may use the operator views (trusted networks, the tokens file) and
//! what they show (the redaction of secret descriptor values).

use super::parse::boolean;
use super::vars;
use super::{AccessArgs, SettingsError};
use crate::config::Redactor;
use crate::server::AccessOptions;
use std::path::PathBuf;

/// Resolves the access options: flags over variables over the defaults.
pub(super) fn access_options<'a>(
    args: &AccessArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<AccessOptions, SettingsError> {
    let defaults = AccessOptions::default();
    let trusted_networks = match args
        .admin_trusted_networks
        .as_deref()
        .or_else(|| get(vars::admin_trusted_networks.name))
    {
        None => defaults.trusted_networks,
        Some(text) => text
            .split(',')
            .map(str::trim)
            .filter(|cidr| !cidr.is_empty())
            .map(|cidr| {
                cidr.parse().map_err(|_| SettingsError::Invalid {
                    setting: vars::admin_trusted_networks.name.to_owned(),
                    reason: format!("'{cidr}' is not a CIDR such as 10.0.0.0/8 or ::1/128"),
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let tokens_file = args
        .admin_tokens_file
        .clone()
        .or_else(|| get(vars::admin_tokens_file.name).map(PathBuf::from))
        .filter(|path| !path.as_os_str().is_empty());
    Ok(AccessOptions {
        trusted_networks,
        tokens_file,
    })
}

/// Resolves the redaction: secret keys for every domain, the tags' key
/// (read here, so a bad file stops the start), store keys with tags or not.
pub(super) fn redactor<'a>(
    args: &AccessArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Redactor, SettingsError> {
    let keys = args
        .redact_descriptor_keys
        .as_deref()
        .or_else(|| get(vars::redact_descriptor_keys.name))
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
        .collect();
    let key_file = args
        .redact_key_file
        .clone()
        .or_else(|| get(vars::redact_key_file.name).map(PathBuf::from))
        .filter(|path| !path.as_os_str().is_empty());
    let store_keys = boolean(
        args.redact_store_keys,
        get(vars::redact_store_keys.name),
        vars::redact_store_keys.name,
    )?;
    Redactor::new(key_file.as_deref(), keys, store_keys).map_err(|err| SettingsError::Invalid {
        setting: vars::redact_key_file.name.to_owned(),
        reason: crate::telemetry::error_chain(&err),
    })
}
