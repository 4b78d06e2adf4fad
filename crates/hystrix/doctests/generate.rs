// The build script of hystrix-rs, hystrix-dashboard and hystrix-redis (each crate's build.rs
// includes this file): turns the README's Rust snippets into doc tests, so that none can rot.
//
// Every ```rust block of the workspace's README.md is preceded by a line
// `<!-- doctest: NAME -->` (an HTML comment: GitHub and crates.io show nothing). NAME is a
// section of exactly one crate's `doctests/readme.rs`, which holds what the snippet leaves
// out: the dependencies it calls (`client`, `fetch_user`, ...) and the `main` it runs in, with
// the line `// [README snippet]` where the snippet goes. The text before the first section of
// that file is a prelude common to its snippets (`use hystrix::*;` and std imports: a
// hystrix item a snippet names without importing it must be at the crate root, as a reader
// would assume; any other path the snippet imports itself).
//
// This script writes `$OUT_DIR/readme_doctests.rs`: one documented item per snippet of this
// crate, whose doc is the snippet wrapped in its setup, and the crate includes it under
// `#[cfg(doctest)]`, so `cargo test --doc` compiles and runs each snippet (as `readme::...`
// tests) and nothing else is built. A section's line may add attributes after the name:
// `no_run` (compiled, not run: it starts a server or reads files that are not there) and
// `feature=NAME` (compiled only with that feature; `scripts/test` runs them with all
// features). A ```rust block without a marker, a marker no crate has a section for, and a
// section the README no longer uses all fail the doc tests with a message saying so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

const MARKER: &str = "<!-- doctest:";
const PLACEHOLDER: &str = "// [README snippet]";
const SETUP: &str = "doctests/readme.rs";

struct Snippet {
    line: usize,
    name: String,
    code: String,
}

struct Section {
    attributes: Vec<String>,
    before: String,
    after: String,
}

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let crates_dir = manifest_dir
        .parent()
        .expect("the crate is in crates/")
        .to_path_buf();
    let readme_path = crates_dir.join("../README.md");
    println!("cargo:rerun-if-changed=build.rs");
    println!(
        "cargo:rerun-if-changed={}",
        crates_dir.join("hystrix/doctests/generate.rs").display()
    );
    println!("cargo:rerun-if-changed={}", readme_path.display());
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("readme_doctests.rs");
    let generated = match fs::read_to_string(&readme_path) {
        Ok(readme) => generate(&readme, &manifest_dir, &crates_dir),
        // Outside the workspace (a packaged crate) there is no README to test.
        Err(_) => String::new(),
    };
    fs::write(&out, generated).expect("writing readme_doctests.rs");
}

/// The generated items, or a `compile_error!` saying what is wrong.
fn generate(readme: &str, manifest_dir: &Path, crates_dir: &Path) -> String {
    match try_generate(readme, manifest_dir, crates_dir) {
        Ok(items) => items,
        Err(message) => format!("compile_error!({message:?});\n"),
    }
}

fn try_generate(readme: &str, manifest_dir: &Path, crates_dir: &Path) -> Result<String, String> {
    let snippets = snippets(readme)?;
    // Every crate's sections, to check that each snippet has exactly one.
    let mut owners: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut own = None;
    let mut crate_dirs: Vec<PathBuf> = fs::read_dir(crates_dir)
        .map_err(|err| format!("reading {}: {err}", crates_dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    crate_dirs.sort();
    for dir in crate_dirs {
        let path = dir.join(SETUP);
        // Watched only if it exists: cargo reruns a build script on every build while a
        // watched file is missing (a crate without snippets would rebuild this one each time;
        // a crate's first setup file comes with a README change, which is watched).
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        println!("cargo:rerun-if-changed={}", path.display());
        let (prelude, sections) = sections(&text, &path)?;
        for name in sections.keys() {
            owners.entry(name.clone()).or_default().push(path.clone());
        }
        if dir.file_name() == manifest_dir.file_name() {
            own = Some((prelude, sections));
        }
    }
    let own_path = manifest_dir.join(SETUP);
    let (prelude, sections) = own.ok_or_else(|| format!("{} is missing", own_path.display()))?;
    for snippet in &snippets {
        match owners.get(&snippet.name).map(Vec::as_slice) {
            Some([_]) => {}
            None | Some([]) => {
                return Err(format!(
                    "README.md:{}: no crates/*/{SETUP} has a section `// doctest: {}` for this snippet",
                    snippet.line, snippet.name
                ));
            }
            Some(paths) => {
                return Err(format!(
                    "README.md:{}: several files have a section `// doctest: {}`: {paths:?}",
                    snippet.line, snippet.name
                ));
            }
        }
    }
    for name in sections.keys() {
        if !snippets.iter().any(|snippet| &snippet.name == name) {
            return Err(format!(
                "{}: section `// doctest: {name}` has no `{MARKER} {name} -->` snippet in README.md",
                own_path.display()
            ));
        }
    }

    let mut items = String::new();
    for snippet in &snippets {
        let Some(section) = sections.get(&snippet.name) else {
            continue;
        };
        let mut fence = String::from("```rust");
        let mut cfg = None;
        for attribute in &section.attributes {
            match attribute.strip_prefix("feature=") {
                Some(feature) => cfg = Some(feature),
                None => write!(fence, ",{attribute}").expect("writing to a String"),
            }
        }
        let doc = format!(
            "README.md line {}: `{}`.\n\n{fence}\n{prelude}{}// README.md line {}\n{}{}```\n",
            snippet.line, snippet.name, section.before, snippet.line, snippet.code, section.after
        );
        let item = snippet.name.replace('-', "_");
        if let Some(feature) = cfg {
            writeln!(items, "#[cfg(feature = {feature:?})]").expect("writing to a String");
        }
        writeln!(items, "#[doc = {doc:?}]\npub mod {item} {{}}\n").expect("writing to a String");
    }
    Ok(items)
}

/// The ```rust blocks of the README, each with the name of its marker.
fn snippets(readme: &str) -> Result<Vec<Snippet>, String> {
    let mut snippets = Vec::new();
    let mut marker: Option<String> = None;
    let mut lines = readme.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix(MARKER) {
            let name = rest.trim_end_matches("-->").trim();
            marker = Some(name.to_owned());
            continue;
        }
        let Some(info) = trimmed.strip_prefix("```") else {
            if !trimmed.is_empty() {
                marker = None;
            }
            continue;
        };
        let is_rust = info.split([',', ' ']).next() == Some("rust");
        let mut code = String::new();
        for (_, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            code.push_str(line);
            code.push('\n');
        }
        if is_rust {
            let name = marker.take().ok_or_else(|| {
                format!(
                    "README.md:{}: a ```rust block needs a line `{MARKER} NAME -->` before it, NAME being a section of a crates/*/{SETUP}",
                    index + 1
                )
            })?;
            snippets.push(Snippet {
                line: index + 1,
                name,
                code,
            });
        }
        marker = None;
    }
    Ok(snippets)
}

/// The prelude and the sections of a setup file.
fn sections(text: &str, path: &Path) -> Result<(String, BTreeMap<String, Section>), String> {
    let mut prelude = String::new();
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, Section, bool)> = None;
    for (index, line) in text.lines().enumerate() {
        if let Some(header) = line.strip_prefix("// doctest:") {
            if let Some((name, section, placed)) = current.take() {
                finish(path, &name, section, placed, &mut sections)?;
            }
            let mut words = header.split_whitespace();
            let name = words.next().ok_or_else(|| {
                format!("{}:{}: a section needs a name", path.display(), index + 1)
            })?;
            let section = Section {
                attributes: words.map(str::to_owned).collect(),
                before: String::new(),
                after: String::new(),
            };
            current = Some((name.to_owned(), section, false));
            continue;
        }
        match &mut current {
            None if line.starts_with("//!") => {}
            None => {
                prelude.push_str(line);
                prelude.push('\n');
            }
            Some((_, _, placed)) if line.trim() == PLACEHOLDER => *placed = true,
            Some((_, section, placed)) => {
                let part = if *placed {
                    &mut section.after
                } else {
                    &mut section.before
                };
                part.push_str(line);
                part.push('\n');
            }
        }
    }
    if let Some((name, section, placed)) = current.take() {
        finish(path, &name, section, placed, &mut sections)?;
    }
    Ok((prelude.trim_start().to_owned(), sections))
}

fn finish(
    path: &Path,
    name: &str,
    section: Section,
    placed: bool,
    sections: &mut BTreeMap<String, Section>,
) -> Result<(), String> {
    if !placed {
        return Err(format!(
            "{}: section `{name}` has no line `{PLACEHOLDER}`",
            path.display()
        ));
    }
    if sections.insert(name.to_owned(), section).is_some() {
        return Err(format!("{}: two sections `{name}`", path.display()));
    }
    Ok(())
}
