//! The proto3-JSON shapes of `RateLimitRequest` and `RateLimitResponse`
//! for `POST /json`: hand-written serde types (numbers as strings or
//! numbers, enum names or numbers, nulls as absent), converted straight to
//! and from the domain types.

use crate::descriptor::{Descriptor, Entry, RateLimitOverride, Request, Unit, UnknownOverrideUnit};
use crate::limiter::{Code, Response, Status};
use serde::{Deserialize, Deserializer, Serialize};
use std::time::Duration;

/// Why a `/json` body is not a valid request.
#[derive(Debug, thiserror::Error)]
pub(super) enum JsonError {
    /// Not JSON, or not the shape of a `RateLimitRequest`.
    #[error("invalid RateLimitRequest JSON")]
    Parse(#[source] serde_json::Error),
    /// An override's unit is missing or UNKNOWN.
    #[error(transparent)]
    OverrideUnit(#[from] UnknownOverrideUnit),
}

/// `RateLimitRequest` in proto3 JSON: lowerCamelCase or original field names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonRequest {
    #[serde(default, deserialize_with = "nullable")]
    domain: String,
    #[serde(default, deserialize_with = "nullable")]
    descriptors: Vec<JsonDescriptor>,
    #[serde(
        default,
        rename = "hitsAddend",
        alias = "hits_addend",
        deserialize_with = "uint"
    )]
    hits_addend: u32,
}

/// `RateLimitDescriptor` in proto3 JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonDescriptor {
    #[serde(default, deserialize_with = "nullable")]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    /// A `UInt64Value`: a number (or string) when present, absent or null
    /// when not.
    #[serde(
        default,
        rename = "hitsAddend",
        alias = "hits_addend",
        deserialize_with = "optional_uint"
    )]
    hits_addend: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonEntry {
    #[serde(default, deserialize_with = "nullable")]
    key: String,
    #[serde(default, deserialize_with = "nullable")]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonOverride {
    #[serde(
        default,
        rename = "requestsPerUnit",
        alias = "requests_per_unit",
        deserialize_with = "uint"
    )]
    requests_per_unit: u32,
    #[serde(default, deserialize_with = "unit")]
    unit: Option<Unit>,
}

impl JsonRequest {
    pub(super) fn into_request(self) -> Result<Request, JsonError> {
        let descriptors = self
            .descriptors
            .into_iter()
            .enumerate()
            .map(|(index, d)| {
                let limit = match d.limit {
                    None => None,
                    Some(o) => Some(RateLimitOverride {
                        requests_per_unit: o.requests_per_unit,
                        unit: o.unit.ok_or(UnknownOverrideUnit { index })?,
                    }),
                };
                Ok(Descriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry::new(e.key, e.value))
                        .collect(),
                    limit,
                    hits_addend: d.hits_addend,
                })
            })
            .collect::<Result<_, JsonError>>()?;
        Ok(Request {
            domain: self.domain,
            descriptors,
            hits_addend: self.hits_addend,
        })
    }
}

/// proto3 JSON: `null` means the field's default.
pub(super) fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A proto3-JSON integer: a number or a decimal string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum JsonInt {
    Number(u64),
    Text(String),
}

impl JsonInt {
    fn to_u64<E: serde::de::Error>(&self) -> Result<u64, E> {
        match self {
            Self::Number(n) => Ok(*n),
            Self::Text(text) => text
                .parse()
                .map_err(|_| E::custom(format!("'{text}' is not an unsigned integer"))),
        }
    }
}

pub(super) fn optional_uint<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    Option::<JsonInt>::deserialize(deserializer)?
        .map(|n| n.to_u64())
        .transpose()
}

pub(super) fn uint<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let Some(n) = optional_uint(deserializer)? else {
        return Ok(0);
    };
    u32::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} does not fit in uint32")))
}

/// A `RateLimitUnit` by name or number; UNKNOWN (0), null or absent is
/// `None`.
pub(super) fn unit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Unit>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Name(String),
    }
    let unit = match Option::<Raw>::deserialize(deserializer)? {
        None => None,
        Some(Raw::Number(0)) => None,
        Some(Raw::Number(n)) => Some(
            Unit::from_proto_number(n)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown unit number {n}")))?,
        ),
        Some(Raw::Name(name)) if name == "UNKNOWN" => None,
        Some(Raw::Name(name)) => Some(
            Unit::ALL
                .into_iter()
                .find(|u| u.proto_name() == name)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown unit '{name}'")))?,
        ),
    };
    Ok(unit)
}

pub(super) const fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// `RateLimitResponse` in proto3 JSON: lowerCamelCase, default values
/// omitted.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JsonResponse {
    overall_code: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    request_headers_to_add: Vec<JsonHeader>,
    /// `RESPONSE_DYNAMIC_METADATA`: the Struct as a plain JSON object.
    #[serde(skip_serializing_if = "Option::is_none")]
    dynamic_metadata: Option<serde_json::Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JsonLimit {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    unit: &'static str,
}

#[derive(Debug, Serialize)]
pub(super) struct JsonHeader {
    key: String,
    value: String,
}

/// serde's `skip_serializing_if` passes a reference.
pub(super) const fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A `google.protobuf.Duration` in proto3 JSON: seconds with an `s`
/// suffix, and 3, 6 or 9 fractional digits when needed.
pub(super) fn duration_text(d: Duration) -> String {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    if nanos == 0 {
        format!("{secs}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{secs}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{secs}.{:06}s", nanos / 1_000)
    } else {
        format!("{secs}.{nanos:09}s")
    }
}

impl From<Status> for JsonStatus {
    fn from(status: Status) -> Self {
        Self {
            code: code_name(status.code),
            current_limit: status.current_limit.map(|l| JsonLimit {
                name: l.name.as_deref().unwrap_or_default().to_owned(),
                requests_per_unit: l.requests_per_unit,
                unit: Unit::proto_name(l.unit),
            }),
            limit_remaining: status.limit_remaining,
            duration_until_reset: status.duration_until_reset.map(duration_text),
        }
    }
}

impl JsonResponse {
    /// The answer to `request`, with its dynamic metadata when the limiter
    /// gave some (`RESPONSE_DYNAMIC_METADATA`).
    pub(super) fn answering(mut response: Response, request: &Request) -> Self {
        let dynamic_metadata = response.dynamic_metadata.take().map(|passed| {
            struct_to_json(super::super::metadata::dynamic_metadata(request, &passed))
        });
        Self {
            dynamic_metadata,
            ..Self::from(response)
        }
    }
}

/// A `google.protobuf.Struct` in proto3 JSON: a plain object.
fn struct_to_json(value: prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        value
            .fields
            .into_iter()
            .map(|(k, v)| (k, value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(value: prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(n)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.into_iter().map(value_to_json).collect())
        }
        Some(Kind::StructValue(s)) => struct_to_json(s),
    }
}

impl From<Response> for JsonResponse {
    fn from(response: Response) -> Self {
        Self {
            dynamic_metadata: None,
            overall_code: code_name(response.overall_code),
            statuses: response
                .statuses
                .into_iter()
                .map(JsonStatus::from)
                .collect(),
            response_headers_to_add: json_headers(response.response_headers),
            request_headers_to_add: json_headers(response.request_headers),
        }
    }
}

fn json_headers(headers: Vec<(std::sync::Arc<str>, String)>) -> Vec<JsonHeader> {
    headers
        .into_iter()
        .map(|(key, value)| JsonHeader {
            key: key.to_string(),
            value,
        })
        .collect()
}
