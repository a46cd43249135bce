//! Run every example of the workspace, as `cargo xtask ci` does after the
//! tests: examples are documentation that must keep working.

use crate::cargo;
use std::{path::Path, process::Command, time::Instant};

/// Examples whose name starts with this are benchmarks: they build in CI
/// (clippy `--all-targets`) but take too long to run there.
const BENCH_PREFIX: &str = "bench";

/// Examples whose name ends with this are checks meant for a real GPU (the
/// H200 tier): on lavapipe in a debug build they take minutes.
const GPU_SUFFIX: &str = "_gpu";

/// Whether CI runs the example `name`.
fn runs_in_ci(name: &str) -> bool {
    !name.starts_with(BENCH_PREFIX) && !name.ends_with(GPU_SUFFIX)
}

/// One example target: its package, name and the features it requires.
#[derive(Debug, PartialEq)]
pub(crate) struct Example {
    package: String,
    name: String,
    required_features: Vec<String>,
}

/// Run each example but benchmarks and GPU checks in a debug build with the validation
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

/// The workspace's examples, from `cargo metadata`, benchmarks and GPU
/// checks left out.
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
    examples_in(&json::parse(&text)?)
}

/// Pick the example targets out of `cargo metadata`'s JSON.
fn examples_in(metadata: &json::Value) -> Result<Vec<Example>, String> {
    let malformed = |what: &str| format!("cargo metadata: malformed {what}");
    let mut found = Vec::new();
    for package in metadata
        .get("packages")
        .and_then(json::Value::as_array)
        .ok_or_else(|| malformed("packages"))?
    {
        let package_name = package
            .get("name")
            .and_then(json::Value::as_str)
            .ok_or_else(|| malformed("package name"))?;
        let targets = package
            .get("targets")
            .and_then(json::Value::as_array)
            .ok_or_else(|| malformed("targets"))?;
        for target in targets {
            let strings = |key: &str| -> Vec<String> {
                target
                    .get(key)
                    .and_then(json::Value::as_array)
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(json::Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            if !strings("kind").iter().any(|kind| kind == "example") {
                continue;
            }
            let name = target
                .get("name")
                .and_then(json::Value::as_str)
                .ok_or_else(|| malformed("target name"))?;
            if !runs_in_ci(name) {
                continue;
            }
            found.push(Example {
                package: package_name.to_string(),
                name: name.to_string(),
                required_features: strings("required-features"),
            });
        }
    }
    found.sort_by(|a, b| (&a.package, &a.name).cmp(&(&b.package, &b.name)));
    Ok(found)
}

/// Just enough JSON for `cargo metadata`, so xtask needs no JSON crate.
mod json {
    use std::collections::BTreeMap;

    /// A parsed JSON value; numbers are kept as their text.
    #[derive(Debug, PartialEq)]
    pub(crate) enum Value {
        Null,
        Bool(bool),
        Number(String),
        String(String),
        Array(Vec<Value>),
        Object(BTreeMap<String, Value>),
    }

    impl Value {
        pub(crate) fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Object(map) => map.get(key),
                _ => None,
            }
        }

        pub(crate) fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(items) => Some(items),
                _ => None,
            }
        }

        pub(crate) fn as_str(&self) -> Option<&str> {
            match self {
                Value::String(text) => Some(text),
                _ => None,
            }
        }
    }

    /// Parse one JSON document (trailing whitespace allowed).
    pub(crate) fn parse(text: &str) -> Result<Value, String> {
        let mut parser = Parser {
            bytes: text.as_bytes(),
            at: 0,
        };
        let value = parser.value(0)?;
        parser.skip_space();
        if parser.at != parser.bytes.len() {
            return Err(parser.error("trailing characters"));
        }
        Ok(value)
    }

    /// Nesting bound: cargo metadata is shallow, and this keeps a hostile
    /// document from overflowing the stack.
    const MAX_DEPTH: usize = 64;

    struct Parser<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl Parser<'_> {
        fn error(&self, what: &str) -> String {
            format!("cargo metadata JSON: {what} at byte {}", self.at)
        }

        fn skip_space(&mut self) {
            while self
                .bytes
                .get(self.at)
                .is_some_and(|b| b.is_ascii_whitespace())
            {
                self.at += 1;
            }
        }

        fn expect(&mut self, byte: u8) -> Result<(), String> {
            self.skip_space();
            if self.bytes.get(self.at) == Some(&byte) {
                self.at += 1;
                Ok(())
            } else {
                Err(self.error(&format!("expected `{}`", byte as char)))
            }
        }

        fn literal(&mut self, word: &str, value: Value) -> Result<Value, String> {
            if self.bytes[self.at..].starts_with(word.as_bytes()) {
                self.at += word.len();
                Ok(value)
            } else {
                Err(self.error("unknown literal"))
            }
        }

        fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > MAX_DEPTH {
                return Err(self.error("nested too deep"));
            }
            self.skip_space();
            match self.bytes.get(self.at) {
                Some(b'{') => self.object(depth),
                Some(b'[') => self.array(depth),
                Some(b'"') => self.string().map(Value::String),
                Some(b't') => self.literal("true", Value::Bool(true)),
                Some(b'f') => self.literal("false", Value::Bool(false)),
                Some(b'n') => self.literal("null", Value::Null),
                Some(b'-' | b'0'..=b'9') => {
                    let start = self.at;
                    while self.bytes.get(self.at).is_some_and(|b| {
                        matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                    }) {
                        self.at += 1;
                    }
                    Ok(Value::Number(
                        String::from_utf8_lossy(&self.bytes[start..self.at]).into_owned(),
                    ))
                }
                _ => Err(self.error("expected a value")),
            }
        }

        fn object(&mut self, depth: usize) -> Result<Value, String> {
            self.expect(b'{')?;
            let mut map = BTreeMap::new();
            self.skip_space();
            if self.bytes.get(self.at) == Some(&b'}') {
                self.at += 1;
                return Ok(Value::Object(map));
            }
            loop {
                self.skip_space();
                let key = self.string()?;
                self.expect(b':')?;
                map.insert(key, self.value(depth + 1)?);
                self.skip_space();
                match self.bytes.get(self.at) {
                    Some(b',') => self.at += 1,
                    Some(b'}') => {
                        self.at += 1;
                        return Ok(Value::Object(map));
                    }
                    _ => return Err(self.error("expected `,` or `}`")),
                }
            }
        }

        fn array(&mut self, depth: usize) -> Result<Value, String> {
            self.expect(b'[')?;
            let mut items = Vec::new();
            self.skip_space();
            if self.bytes.get(self.at) == Some(&b']') {
                self.at += 1;
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value(depth + 1)?);
                self.skip_space();
                match self.bytes.get(self.at) {
                    Some(b',') => self.at += 1,
                    Some(b']') => {
                        self.at += 1;
                        return Ok(Value::Array(items));
                    }
                    _ => return Err(self.error("expected `,` or `]`")),
                }
            }
        }

        fn string(&mut self) -> Result<String, String> {
            self.expect(b'"')?;
            let mut out = Vec::new();
            loop {
                let Some(&byte) = self.bytes.get(self.at) else {
                    return Err(self.error("unterminated string"));
                };
                self.at += 1;
                match byte {
                    b'"' => break,
                    b'\\' => {
                        let Some(&escape) = self.bytes.get(self.at) else {
                            return Err(self.error("unterminated escape"));
                        };
                        self.at += 1;
                        let decoded = match escape {
                            b'"' => '"',
                            b'\\' => '\\',
                            b'/' => '/',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'n' => '\n',
                            b'r' => '\r',
                            b't' => '\t',
                            b'u' => self.unicode_escape()?,
                            _ => return Err(self.error("unknown escape")),
                        };
                        let mut buffer = [0u8; 4];
                        out.extend_from_slice(decoded.encode_utf8(&mut buffer).as_bytes());
                    }
                    _ => out.push(byte),
                }
            }
            String::from_utf8(out).map_err(|_| self.error("invalid UTF-8 in string"))
        }

        /// The code point of a `\uXXXX` escape (the `\u` already read),
        /// joining a UTF-16 surrogate pair; a lone surrogate becomes U+FFFD.
        fn unicode_escape(&mut self) -> Result<char, String> {
            let high = self.hex4()?;
            if (0xD800..0xDC00).contains(&high) && self.bytes[self.at..].starts_with(b"\\u") {
                self.at += 2;
                let low = self.hex4()?;
                if (0xDC00..0xE000).contains(&low) {
                    let code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                    return Ok(char::from_u32(code).unwrap_or('\u{FFFD}'));
                }
                return Ok('\u{FFFD}');
            }
            Ok(char::from_u32(high).unwrap_or('\u{FFFD}'))
        }

        fn hex4(&mut self) -> Result<u32, String> {
            let digits = self
                .bytes
                .get(self.at..self.at + 4)
                .and_then(|d| std::str::from_utf8(d).ok())
                .and_then(|d| u32::from_str_radix(d, 16).ok())
                .ok_or_else(|| self.error("bad \\u escape"))?;
            self.at += 4;
            Ok(digits)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_escapes_and_nesting() {
        let value =
            json::parse(r#" {"a": [1, -2.5e3, true, null, "x\"\u00e9\ud83d\ude00"], "b": {}} "#)
                .unwrap();
        let items = value.get("a").and_then(json::Value::as_array).unwrap();
        assert_eq!(items[4].as_str(), Some("x\"é😀"));
        assert_eq!(items[1], json::Value::Number("-2.5e3".into()));
        assert!(json::parse("[1, 2").is_err());
        assert!(json::parse("{} x").is_err());
        assert!(json::parse(&"[".repeat(100)).is_err());
    }

    #[test]
    fn picks_examples_and_skips_benchmarks() {
        let metadata = json::parse(
            r#"{"packages": [
                {"name": "p", "targets": [
                    {"name": "p", "kind": ["lib"]},
                    {"name": "run", "kind": ["example"], "required-features": ["runtime"]},
                    {"name": "bench_x", "kind": ["example"]},
                    {"name": "matmul_gpu", "kind": ["example"]}
                ]},
                {"name": "a", "targets": [{"name": "hello", "kind": ["example"]}]}
            ]}"#,
        )
        .unwrap();
        let examples = examples_in(&metadata).unwrap();
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
