//! Run every example of the workspace, as `cargo xtask ci` does after the
//! tests: examples are documentation that must keep working.

use crate::cargo;
use serde::Deserialize;
use std::{path::Path, process::Command, time::Instant};

/// Examples whose name ends with this are checks meant for a real GPU (the
/// H200 tier): on lavapipe in a debug build they take minutes.
const GPU_SUFFIX: &str = "_gpu";

/// Whether CI runs the example `name`.
fn runs_in_ci(name: &str) -> bool {
    !name.ends_with(GPU_SUFFIX)
}

/// One example target: its package, name and the features it requires.
#[derive(Debug, PartialEq)]
pub(crate) struct Example {
    package: String,
    name: String,
    required_features: Vec<String>,
}

/// Run each example but GPU checks in a debug build with the validation
/// layers on (any message aborts it), stopping at the first failure.
pub(crate) fn run_all(root: &Path) -> Result<(), String> {
    let examples = discover(root)?;
    let total = Instant::now();
    for example in &examples {
        let mut args = vec![
            "run",
            "--quiet",
            "-p",
            &example.package,
            "--example",
            &example.name,
        ];
        let features = example.required_features.join(",");
        if !features.is_empty() {
            args.extend(["--features", &features]);
        }
        let start = Instant::now();
        cargo(root, &args, &[("HRX_VALIDATION", "1")])?;
        println!(
            "xtask: example {}/{} passed in {:.1} s",
            example.package,
            example.name,
            start.elapsed().as_secs_f64()
        );
    }
    println!(
        "xtask: {} examples passed in {:.1} s",
        examples.len(),
        total.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The workspace's examples, from `cargo metadata`, GPU checks left out.
fn discover(root: &Path) -> Result<Vec<Example>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let text = String::from_utf8(output.stdout)
        .map_err(|_| "cargo metadata printed non-UTF-8 output".to_string())?;
    examples_in(&text)
}

/// The part of `cargo metadata`'s output read here.
#[derive(Deserialize)]
struct Metadata {
    packages: Vec<Package>,
}

#[derive(Deserialize)]
struct Package {
    name: String,
    targets: Vec<Target>,
}

#[derive(Deserialize)]
struct Target {
    name: String,
    kind: Vec<String>,
    #[serde(default, rename = "required-features")]
    required_features: Vec<String>,
}

/// Pick the example targets out of `cargo metadata`'s JSON.
fn examples_in(metadata: &str) -> Result<Vec<Example>, String> {
    let metadata: Metadata =
        serde_json::from_str(metadata).map_err(|e| format!("cargo metadata: {e}"))?;
    let mut found = Vec::new();
    for package in metadata.packages {
        for target in package.targets {
            if !target.kind.iter().any(|kind| kind == "example") || !runs_in_ci(&target.name) {
                continue;
            }
            found.push(Example {
                package: package.name.clone(),
                name: target.name,
                required_features: target.required_features,
            });
        }
    }
    found.sort_by(|a, b| (&a.package, &a.name).cmp(&(&b.package, &b.name)));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_examples_and_skips_gpu_checks() {
        let metadata = r#"{"packages": [
                {"name": "p", "targets": [
                    {"name": "p", "kind": ["lib"]},
                    {"name": "run", "kind": ["example"], "required-features": ["runtime"]},
                    {"name": "matmul_gpu", "kind": ["example"]}
                ]},
                {"name": "a", "targets": [{"name": "hello", "kind": ["example"]}]}
            ]}"#;
        let examples = examples_in(metadata).unwrap();
        assert_eq!(
            examples,
            [
                Example {
                    package: "a".into(),
                    name: "hello".into(),
                    required_features: vec![],
                },
                Example {
                    package: "p".into(),
                    name: "run".into(),
                    required_features: vec!["runtime".into()],
                },
            ]
        );
        assert!(examples_in("{\"packages\": 3}").is_err());
    }

    #[test]
    fn discovers_this_workspace() {
        let examples = discover(&crate::workspace_root()).unwrap();
        assert!(
            examples
                .iter()
                .any(|e| e.package == "hrx-runtime" && e.name == "hello")
        );
        assert!(examples.iter().all(|e| runs_in_ci(&e.name)));
        println!("{examples:?}");
    }
}
