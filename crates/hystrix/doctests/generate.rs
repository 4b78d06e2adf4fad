// The build script of hystrix-rs, hystrix-dashboard and hystrix-redis (each crate's build.rs
// includes this file): turns the Rust snippets of the README and of the guide (`docs/*.md`)
// into doc tests, so that none can rot.
//
// Every ```rust block of the workspace's README.md and docs/*.md is preceded by a line
// `<!-- doctest: NAME -->` (an HTML comment: GitHub and crates.io show nothing). NAME is a
// section of exactly one setup file, a `crates/*/doctests/*.rs` (this file aside), which holds
// what the snippet leaves out: the dependencies it calls (`client`, `fetch_user`, ...) and the
// `main` it runs in, with the line `// [snippet]` where the snippet goes. The text before the
// first section of a setup file is a prelude common to its snippets, after the crate's
// `doctests/prelude.rs` (not a setup file), common to all of them: `use hystrix::*;`, std
// imports and made-up types such as `MyError`. A hystrix item a snippet names without
// importing it must be at the crate root, as a reader would assume; any other path the
// snippet imports itself. A page's snippets
// usually have a setup file of the same name (docs/breakers.md, doctests/breakers.rs), in
// the crate they use.
//
// This script writes `$OUT_DIR/snippet_doctests.rs`: one documented item per snippet whose
// section is in this crate, named `<page>_<NAME>`, whose doc is the snippet wrapped in its
// setup, and the crate includes it under `#[cfg(doctest)]` in a module `snippets`, so
// `cargo test --doc` compiles and runs each snippet (as `snippets::...` tests) and nothing
// else is built. A section's line may add attributes after the name: `no_run` (compiled, not
// run: it starts a server or reads files that are not there) and `feature=NAME` (compiled only
// with that feature; `scripts/test` runs them with all features). A ```rust block without a
// marker, a marker no setup file has a section for, and a section no page uses all fail the
// doc tests with a message saying so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

const MARKER: &str = "<!-- doctest:";
const PLACEHOLDER: &str = "// [snippet]";
const SETUP_DIR: &str = "doctests";

struct Snippet {
    /// The page, relative to the workspace root (`README.md`, `docs/breakers.md`).
    page: String,
    line: usize,
    name: String,
    code: String,
}

struct Section {
    attributes: Vec<String>,
    before: String,
    after: String,
}

/// A setup file's prelude and sections.
struct Setup {
    path: PathBuf,
    prelude: String,
    sections: BTreeMap<String, Section>,
}

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let crates_dir = manifest_dir
        .parent()
        .expect("the crate is in crates/")
        .to_path_buf();
    let root = crates_dir
        .parent()
        .expect("crates/ is in the workspace")
        .to_path_buf();
    println!("cargo:rerun-if-changed=build.rs");
    println!(
        "cargo:rerun-if-changed={}",
        crates_dir.join("hystrix/doctests/generate.rs").display()
    );
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("snippet_doctests.rs");
    let generated = if root.join("README.md").is_file() {
        generate(&root, &manifest_dir, &crates_dir)
    } else {
        // Outside the workspace (a packaged crate) there are no pages to test.
        String::new()
    };
    fs::write(&out, generated).expect("writing snippet_doctests.rs");
}

/// The generated items, or a `compile_error!` saying what is wrong.
fn generate(root: &Path, manifest_dir: &Path, crates_dir: &Path) -> String {
    match try_generate(root, manifest_dir, crates_dir) {
        Ok(items) => items,
        Err(message) => format!("compile_error!({message:?});\n"),
    }
}

/// The pages: README.md, then docs/*.md by name; each is watched.
fn pages(root: &Path) -> Result<Vec<(String, String)>, String> {
    let mut names = vec!["README.md".to_owned()];
    let docs = root.join("docs");
    // A directory is watched as a whole: a page added or changed reruns the script.
    println!("cargo:rerun-if-changed={}", docs.display());
    if let Ok(entries) = fs::read_dir(&docs) {
        let mut guide: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.ends_with(".md"))
            .map(|name| format!("docs/{name}"))
            .collect();
        guide.sort();
        names.extend(guide);
    }
    names
        .into_iter()
        .map(|name| {
            let path = root.join(&name);
            println!("cargo:rerun-if-changed={}", path.display());
            fs::read_to_string(&path)
                .map(|text| (name, text))
                .map_err(|err| format!("reading {}: {err}", path.display()))
        })
        .collect()
}

/// Every crate's setup files, and whether each belongs to this crate.
fn setups(manifest_dir: &Path, crates_dir: &Path) -> Result<Vec<(Setup, bool)>, String> {
    let mut crate_dirs: Vec<PathBuf> = fs::read_dir(crates_dir)
        .map_err(|err| format!("reading {}: {err}", crates_dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    crate_dirs.sort();
    let mut setups = Vec::new();
    for dir in crate_dirs {
        let setup_dir = dir.join(SETUP_DIR);
        // Watched only if it exists: cargo reruns a build script on every build while a
        // watched path is missing.
        let Ok(entries) = fs::read_dir(&setup_dir) else {
            continue;
        };
        println!("cargo:rerun-if-changed={}", setup_dir.display());
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| {
                path.extension().is_some_and(|ext| ext == "rs")
                    && path
                        .file_name()
                        .is_some_and(|name| name != "generate.rs" && name != "prelude.rs")
            })
            .collect();
        paths.sort();
        // The crate's common prelude, without its own doc comment.
        let common: String = fs::read_to_string(setup_dir.join("prelude.rs"))
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.starts_with("//!"))
            .map(|line| format!("{line}\n"))
            .collect();
        for path in paths {
            let text = fs::read_to_string(&path)
                .map_err(|err| format!("reading {}: {err}", path.display()))?;
            let (prelude, sections) = sections(&text, &path)?;
            let prelude = format!("{}{prelude}", common.trim_start());
            let own = dir.file_name() == manifest_dir.file_name();
            setups.push((
                Setup {
                    path,
                    prelude,
                    sections,
                },
                own,
            ));
        }
    }
    Ok(setups)
}

fn try_generate(root: &Path, manifest_dir: &Path, crates_dir: &Path) -> Result<String, String> {
    let mut snippets = Vec::new();
    for (page, text) in pages(root)? {
        snippets.extend(self::snippets(&page, &text)?);
    }
    let setups = setups(manifest_dir, crates_dir)?;
    // Which setup files have a section of each name: exactly one must.
    let mut owners: BTreeMap<&str, Vec<&Path>> = BTreeMap::new();
    for (setup, _) in &setups {
        for name in setup.sections.keys() {
            owners.entry(name).or_default().push(&setup.path);
        }
    }
    for snippet in &snippets {
        match owners.get(snippet.name.as_str()).map(Vec::as_slice) {
            Some([_]) => {}
            None | Some([]) => {
                return Err(format!(
                    "{}:{}: no crates/*/{SETUP_DIR}/*.rs has a section `// doctest: {}` for this snippet",
                    snippet.page, snippet.line, snippet.name
                ));
            }
            Some(paths) => {
                return Err(format!(
                    "{}:{}: several files have a section `// doctest: {}`: {paths:?}",
                    snippet.page, snippet.line, snippet.name
                ));
            }
        }
    }
    let mut items = String::new();
    for (setup, own) in &setups {
        for name in setup.sections.keys() {
            if !snippets.iter().any(|snippet| &snippet.name == name) {
                return Err(format!(
                    "{}: section `// doctest: {name}` has no `{MARKER} {name} -->` snippet in README.md or docs/*.md",
                    setup.path.display()
                ));
            }
        }
        if !own {
            continue;
        }
        for snippet in &snippets {
            let Some(section) = setup.sections.get(&snippet.name) else {
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
            let code = literal(&format!(
                "{}{}// {} line {}\n{}{}",
                setup.prelude,
                section.before,
                snippet.page,
                snippet.line,
                snippet.code,
                section.after
            ));
            let doc = format!(
                "{} line {}: `{}`.\n\n{fence}\n{code}```\n",
                snippet.page, snippet.line, snippet.name
            );
            let page = Path::new(&snippet.page)
                .file_stem()
                .and_then(|stem| stem.to_str())
                .unwrap_or("page")
                .to_lowercase();
            let item = format!("{page}_{}", snippet.name).replace('-', "_");
            if let Some(feature) = cfg {
                writeln!(items, "#[cfg(feature = {feature:?})]").expect("writing to a String");
            }
            writeln!(items, "#[doc = {doc:?}]\npub mod {item} {{}}\n")
                .expect("writing to a String");
        }
    }
    Ok(items)
}

/// `code` as rustdoc must see it to compile it unchanged: rustdoc hides a line that starts
/// (after its indentation) with `# ` or is `#`, and drops one `#` of a line starting with `##`,
/// so each such line gets one more `#` (e.g. a `# comment` line of a string literal).
fn literal(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    for line in code.lines() {
        let rest = line.trim_start();
        let indent = &line[..line.len() - rest.len()];
        match rest.strip_prefix('#') {
            Some(after) if after.is_empty() || after.starts_with([' ', '\t', '#']) => {
                out.push_str(indent);
                out.push('#');
                out.push_str(rest);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The ```rust blocks of a page, each with the name of its marker.
fn snippets(page: &str, text: &str) -> Result<Vec<Snippet>, String> {
    let mut snippets = Vec::new();
    let mut marker: Option<String> = None;
    let mut lines = text.lines().enumerate();
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
                    "{page}:{}: a ```rust block needs a line `{MARKER} NAME -->` before it, NAME being a section of a crates/*/{SETUP_DIR}/*.rs",
                    index + 1
                )
            })?;
            snippets.push(Snippet {
                page: page.to_owned(),
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
