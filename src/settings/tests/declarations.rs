//! The declarations: written once, matching the flags, and the generated
//! settings reference up to date.

use super::*;

/// docs/settings.md's table is the one the declarations generate.
#[test]
fn the_settings_reference_is_generated_from_the_declarations() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/settings.md");
    let document = std::fs::read_to_string(&path).unwrap();
    let current = super::reference::current(&document).expect("docs/settings.md has the markers");
    assert!(
        current == super::reference::markdown(),
        "docs/settings.md is out of date: run `cargo run -- settings-doc --write docs/settings.md`"
    );
}

/// Each environment variable's name is written once under src/settings/:
/// in its declaration. Everything else refers to the declaration.
#[test]
fn every_variable_name_is_written_once() {
    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    files(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/settings"),
        &mut paths,
    );
    let texts: Vec<String> = paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut repeated = Vec::new();
    for var in vars::ALL {
        let lines = texts
            .iter()
            .flat_map(|text| text.lines())
            .filter(|line| {
                line.match_indices(var.name).any(|(at, _)| {
                    !is_word(line[..at].chars().next_back())
                        && !is_word(line[at + var.name.len()..].chars().next())
                })
            })
            .count();
        if lines != 1 {
            repeated.push(format!("{} ({lines} lines)", var.name));
        }
    }
    assert!(repeated.is_empty(), "written more than once: {repeated:?}");
}

/// Every flag of `serve` has its declaration (so --help and the reference
/// name its variable), and every declared flag exists.
#[test]
fn flags_and_declarations_match() {
    use clap::Args as _;
    let command = ServeArgs::augment_args(clap::Command::new("serve"));
    let longs: Vec<&str> = command
        .get_arguments()
        .filter_map(clap::Arg::get_long)
        .collect();
    let undeclared: Vec<&&str> = longs
        .iter()
        .filter(|long| !vars::ALL.iter().any(|v| v.flag == **long))
        .collect();
    assert!(
        undeclared.is_empty(),
        "flags without a declaration: {undeclared:?}"
    );
    let unknown: Vec<&str> = vars::ALL
        .iter()
        .filter(|v| !v.flag.is_empty() && !longs.contains(&v.flag))
        .map(|v| v.name)
        .collect();
    assert!(
        unknown.is_empty(),
        "declared flags serve lacks: {unknown:?}"
    );
}
