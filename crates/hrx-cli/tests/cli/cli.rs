//! The `hrx` binary end to end.

use std::path::PathBuf;
use std::process::Command;

fn hrx() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hrx"))
}

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../hrx-loom/tests/corpus")
        .join(name)
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hrx-cli-{}-{name}", std::process::id()))
}

#[test]
fn compile_writes_valid_spirv_and_reports() {
    let out = temp("scale.spv");
    let o = hrx()
        .arg("compile")
        .arg(corpus("scale.loom"))
        .args([
            "--kernel", "@scale", "--target", "lavapipe", "--report", "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(bytes.len() % 4, 0);
    assert_eq!(&bytes[..4], &0x0723_0203u32.to_le_bytes());
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(report.contains("workgroup size: 256 x 1 x 1"), "{report}");
    assert!(report.contains("binding 0 %data: ReadWrite"), "{report}");
    assert!(report.contains("+4 %factor: F32"), "{report}");
    hrx_test_support::spirv_val::validate("scale.spv", &bytes[..]);
    let _ = std::fs::remove_file(&out);
}

#[test]
fn config_flags_reach_the_compiler() {
    let out = temp("cfg.spv");
    let o = hrx()
        .arg("compile")
        .arg(corpus("config.loom"))
        .args([
            "--kernel",
            "configured",
            "--config",
            "cfg.width=128",
            "--report",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("workgroup size: 128 x 1 x 1"));
    let _ = std::fs::remove_file(&out);
}

#[test]
fn compile_errors_print_file_line_col_code_and_exit_below_100() {
    let src = temp("bad.loom");
    std::fs::write(
        &src,
        "kernel.def @k(%n: index) {\n  %one = index.constant 1 : index\n  \
         kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index\n\
         } launch(%n: index) {\n  %x = index.add %n, %nope : index\n  kernel.return\n}\n",
    )
    .unwrap();
    let o = hrx()
        .arg("compile")
        .arg(&src)
        .args(["--kernel", "@k", "-o"])
        .arg(temp("bad.spv"))
        .output()
        .unwrap();
    let code = o.status.code().unwrap();
    assert!(code != 0 && code < 100, "exit {code}");
    let err = String::from_utf8_lossy(&o.stderr);
    let prefix = format!("{}:5:", src.display());
    assert!(err.contains(&prefix), "{err}");
    assert!(err.contains(": error[E0"), "{err}");
    assert!(err.contains('^'), "caret excerpt expected: {err}");
    let _ = std::fs::remove_file(&src);
}

#[test]
fn unknown_kernel_and_usage_errors_fail_cleanly() {
    let o = hrx()
        .arg("compile")
        .arg(corpus("scale.loom"))
        .args(["--kernel", "@nope", "-o"])
        .arg(temp("x.spv"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("error[E0510]"));
    let o = hrx().arg("compile").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = hrx()
        .arg("compile")
        .arg(temp("missing.loom"))
        .args(["--kernel", "@k", "-o", "x.spv"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn endless_and_non_utf8_sources_are_refused_before_any_work() {
    let o = hrx()
        .args(["compile", "/dev/zero", "--kernel", "@k", "-o"])
        .arg(temp("zero.spv"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("limit"), "{}", text(&o.stderr));
    let latin1 = temp("latin1.loom");
    std::fs::write(&latin1, b"// caf\xe9\n").unwrap();
    let o = hrx()
        .arg("compile")
        .arg(&latin1)
        .args(["--kernel", "@k", "-o"])
        .arg(temp("latin1.spv"))
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&latin1);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("not UTF-8"), "{}", text(&o.stderr));
}

#[test]
fn a_closed_stdout_is_an_error_not_a_panic() {
    // A pipe whose read end is closed before the process starts: its
    // first write to stdout fails with EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = hrx()
        .arg("compile")
        .arg(corpus("scale.loom"))
        .args(["--kernel", "@scale", "--report"])
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("cannot write to stdout"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn absurd_demo_sizes_are_refused_before_any_work() {
    let started = std::time::Instant::now();
    for flags in [
        ["--requests", "18446744073709551615"],
        ["--slots", "100000"],
        ["--clients", "1000000"],
    ] {
        let o = hrx()
            .args(["demo", "--model", "toy"])
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("at most"), "{}", text(&o.stderr));
    }
    for (flags, names) in [
        (["--batch", "100000"], "--batch"),
        (["--seq", "100000"], "--seq"),
        (["--requests", "1000000"], "--requests"),
    ] {
        let o = hrx()
            .args(["demo", "--model", "toy"])
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(names), "{}", text(&o.stderr));
    }
    // Refused up front: no CPU reference or device work ran.
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
}

#[test]
fn non_utf8_arguments_are_usage_or_io_errors() {
    use std::os::unix::ffi::OsStrExt as _;
    let odd = std::ffi::OsStr::from_bytes(b"\xff\xfe");
    let o = hrx()
        .arg("compile")
        .arg(odd)
        .args(["--kernel"])
        .arg(odd)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = hrx().args(["embed", "--model"]).arg(odd).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let o = hrx()
        .args(["demo", "--model", "toy", "--device"])
        .arg(odd)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn bench_outside_a_checkout_says_how_to_run_it() {
    let o = hrx()
        .args(["bench", "runtime", "--quick"])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("not inside one"),
        "{}",
        text(&o.stderr)
    );
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_every_command_and_exits_zero() {
    for flag in ["--help", "-h", "help"] {
        let o = hrx().arg(flag).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{flag}: {}", text(&o.stderr));
        let help = text(&o.stdout);
        for command in ["demo", "embed", "compile", "devices", "bench"] {
            assert!(
                help.lines().any(|l| l.trim_start().starts_with(command)),
                "{flag}: `{command}` missing from:\n{help}"
            );
        }
        assert!(help.contains("Usage: hrx <COMMAND>"), "{help}");
    }
}

#[test]
fn every_command_has_help() {
    for (command, needles) in [
        (
            "embed",
            &[
                "--model <DIR>",
                "--input <FILE>",
                "--output <FILE>",
                "--batch <B>",
                "--slots <S>",
                "--device <SEL>",
                "--f16",
                "one sentence per line",
                "JSON Lines",
                "[default: 16]",
                "[default: 2]",
            ][..],
        ),
        (
            "demo",
            &["--model <toy|DIR>", "--clients <M>", "--reference <FILE>"],
        ),
        (
            "compile",
            &[
                "--kernel <@NAME>",
                "--config <KEY=VALUE>",
                "--target <TARGET>",
                "--report",
            ],
        ),
        ("devices", &["Usage: hrx devices"]),
        ("bench", &["[SUITE]", "--quick"]),
    ] {
        let o = hrx().args([command, "--help"]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{command}: {}", text(&o.stderr));
        let help = text(&o.stdout);
        for needle in needles {
            assert!(
                help.contains(needle),
                "{command}: `{needle}` missing from:\n{help}"
            );
        }
    }
}

#[test]
fn embed_without_a_model_is_a_usage_error_naming_it() {
    let o = hrx().args(["embed", "--input", "x.txt"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("--model <DIR>"), "{err}");
    assert!(err.contains("Usage: hrx embed"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn unknown_flags_commands_and_values_are_usage_errors() {
    for args in [
        &[][..],
        &["--frobnicate"],
        &["frobnicate"],
        &[
            "compile",
            "k.loom",
            "--kernel",
            "@k",
            "-o",
            "k.spv",
            "--frobnicate",
        ],
        &[
            "compile", "k.loom", "--kernel", "@k", "-o", "k.spv", "--target", "mars",
        ],
        &[
            "compile", "k.loom", "--kernel", "@k", "-o", "k.spv", "--config", "nokey",
        ],
        &["devices", "extra"],
        &["embed", "--model", "m", "--frobnicate"],
        &["embed", "--model", "m", "--batch", "0"],
        &["bench", "runtime", "--frobnicate"],
    ] {
        let o = hrx().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(!o.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn version_prints_and_exits_zero() {
    let o = hrx().arg("--version").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o.stdout).starts_with("hrx "), "{}", text(&o.stdout));
}
