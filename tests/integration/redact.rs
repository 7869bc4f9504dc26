//! Redaction tags across instances: two processes sharing one
//! `REDACT_KEY_FILE` show one tag for one value (operators correlate
//! pods); without it each process draws its own key and the tags differ.

use crate::support::floodgate::Floodgate;
use crate::support::http::post_json;

const EXPLAIN: &str =
    r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"k-4e1b7a"}]}]}"#;

/// The tag `/explain` shows for the secret value (the first step's value).
async fn explained_tag(server: &Floodgate) -> String {
    let body = post_json(server.http, "/explain", EXPLAIN).await.body;
    assert!(!body.contains("k-4e1b7a"), "{body}");
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    let tag = value["descriptors"][0]["steps"][0]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(tag.starts_with('~') && tag.len() == 17, "{tag}");
    tag
}

async fn two_tags(extra: &[(&str, String)]) -> (String, String) {
    let mut env = vec![("REDACT_DESCRIPTOR_KEYS", "user".to_owned())];
    env.extend(extra.iter().cloned());
    let (a, b) = (Floodgate::start(&env).await, Floodgate::start(&env).await);
    let tags = (explained_tag(&a).await, explained_tag(&b).await);
    a.stop().await;
    b.stop().await;
    tags
}

#[tokio::test]
async fn instances_sharing_a_key_file_show_one_tag_and_others_differ() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("redact.key");
    std::fs::write(&key, "a shared key of forty bytes, not less!!\n").unwrap();
    let (a, b) = two_tags(&[("REDACT_KEY_FILE", key.display().to_string())]).await;
    assert_eq!(a, b);
    let expected = floodgate::Redactor::new(Some(&key), Vec::new(), false)
        .unwrap()
        .tag("k-4e1b7a");
    assert_eq!(a, expected);
    let (a, b) = two_tags(&[]).await;
    assert_ne!(a, b);
}
