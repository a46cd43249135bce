//! `hrx demo` end to end, kept short: the debug build on lavapipe is slow,
//! so device runs serve a handful of requests.

use std::path::PathBuf;
use std::process::{Command, Output};

/// `hrx demo --model toy ARGS`.
fn hrx_demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["demo", "--model", "toy"])
        .args(args)
        .output()
        .unwrap()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hrx-demo-{}-{name}", std::process::id()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The figures the report must print.
fn assert_report(stdout: &str) {
    for needle in [
        "device:",
        "parameters",
        "MiB of weights",
        "pool:",
        "naive:",
        "p50 ",
        "p99 ",
        "requests/s",
        "ratio:",
        "max abs error",
    ] {
        assert!(
            stdout.contains(needle),
            "`{needle}` missing from:\n{stdout}"
        );
    }
}

#[test]
fn a_short_demo_serves_checks_and_reports() {
    let o = hrx_demo(&[
        "--requests",
        "6",
        "--clients",
        "3",
        "--slots",
        "2",
        "--quiet",
    ]);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", text(&o.stderr));
    assert_report(&stdout);
    assert!(
        stdout.contains("6 requests from 3 tokio clients through 2 slots"),
        "{stdout}"
    );
    // min(N, 32) naive requests, and all outputs of both paths checked.
    assert!(stdout.contains("naive:   6 requests"), "{stdout}");
    assert!(stdout.contains("all 12 outputs match"), "{stdout}");
}

#[test]
fn saved_weights_load_back_and_serve() {
    let file = temp("roundtrip.safetensors");
    let o = hrx_demo(&["--save-weights", file.to_str().unwrap(), "--seed", "5"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("wrote 38 tensors"),
        "{}",
        text(&o.stdout)
    );
    let run = |extra: &[&str]| {
        let mut args = vec!["--seed", "5", "--requests", "2", "--batch", "2", "--quiet"];
        args.extend_from_slice(extra);
        let o = hrx_demo(&args);
        assert!(
            o.status.success(),
            "{}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    };
    let loaded = run(&["--weights", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    assert_report(&loaded);
    assert!(loaded.contains("batch 2"), "{loaded}");
    // Same weights, same tokens: the same outputs, so the same worst error
    // (the reference alone would accept any weights the file held).
    let check_line = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("check:"))
            .map(String::from)
    };
    assert_eq!(check_line(&loaded), check_line(&run(&[])));
}

#[test]
fn a_malformed_weights_file_fails_with_its_name() {
    let file = temp("garbage.safetensors");
    std::fs::write(&file, b"\xff\xff\x00\x00not safetensors at all").unwrap();
    let o = hrx_demo(&["--weights", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("not a valid safetensors file"), "{err}");
    assert!(err.contains("garbage.safetensors"), "{err}");
    let o = hrx_demo(&["--weights", temp("missing.safetensors").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("cannot read weights"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn weights_of_another_shape_fail_naming_the_tensor() {
    let file = temp("seq8.safetensors");
    let o = hrx_demo(&["--save-weights", file.to_str().unwrap(), "--seq", "8"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The default config has 16 positions, the file 8.
    let o = hrx_demo(&["--weights", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("do not fit the model"), "{err}");
    assert!(err.contains("pos"), "{err}");
}

#[test]
fn bad_flags_are_usage_errors() {
    for (args, message) in [
        (
            &["--clients", "0"][..],
            "'--clients <M>': must be at least 1",
        ),
        (&["--requests"], "a value is required for '--requests <N>'"),
        (&["--slots", "two"], "`two` is not a positive integer"),
        (
            &["--device", ""],
            "'--device <SEL>': needs a non-empty value",
        ),
        (&["--frobnicate"], "unexpected argument '--frobnicate'"),
        (
            &["--weights", "a", "--save-weights", "b"],
            "cannot be used with '--save-weights <FILE>'",
        ),
    ] {
        let o = hrx_demo(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(
            err.contains("try '--help'"),
            "a pointer to the help expected: {err}"
        );
    }
    // The model is required.
    let o = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["demo", "--requests", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("--model <toy|DIR>"), "{err}");
    assert!(err.contains("Usage: hrx demo"), "usage expected: {err}");
    let o = hrx_demo(&["--help"]);
    assert!(o.status.success());
    let help = text(&o.stdout);
    for flag in [
        "--model <toy|DIR>",
        "--clients <M>",
        "--slots <S>",
        "--requests <N>",
        "--save-weights <FILE>",
        "--reference <FILE>",
        "--sentences <N>",
    ] {
        assert!(help.contains(flag), "`{flag}` missing from:\n{help}");
    }
}

#[test]
fn an_unknown_device_is_an_error() {
    let o = hrx_demo(&["--device", "no-such-device-anywhere", "--requests", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(!text(&o.stderr).is_empty());
}
