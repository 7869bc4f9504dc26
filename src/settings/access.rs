//! Who may use the operator views: trusted networks and the tokens file.

use super::vars;
use super::{AccessArgs, SettingsError};
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
