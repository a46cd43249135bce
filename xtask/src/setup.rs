//! Make sure a Vulkan driver, the validation layers and spirv-tools exist.

use std::{path::Path, process::Command};

pub(crate) const PACKAGES: &[&str] = &[
    "mesa-vulkan-drivers",
    "libvulkan1",
    "vulkan-validationlayers",
    "spirv-tools",
];

fn missing() -> Vec<&'static str> {
    let mut missing = Vec::new();
    let icd_dirs = [
        "/usr/share/vulkan/icd.d",
        "/etc/vulkan/icd.d",
        "/usr/local/share/vulkan/icd.d",
    ];
    let has_icd = icd_dirs
        .iter()
        .any(|dir| std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()))
        || std::env::var_os("VK_DRIVER_FILES").is_some()
        || std::env::var_os("VK_ICD_FILENAMES").is_some();
    if !has_icd {
        missing.push("mesa-vulkan-drivers");
    }
    let loader = [
        "/usr/lib/x86_64-linux-gnu/libvulkan.so.1",
        "/usr/lib/aarch64-linux-gnu/libvulkan.so.1",
        "/usr/lib/libvulkan.so.1",
        "/usr/lib64/libvulkan.so.1",
    ];
    let has_loader = loader.iter().any(|p| Path::new(p).exists())
        || Command::new("sh")
            .args(["-c", "ldconfig -p | grep -q libvulkan.so.1"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_loader {
        missing.push("libvulkan1");
    }
    let layer_dirs = [
        "/usr/share/vulkan/explicit_layer.d",
        "/etc/vulkan/explicit_layer.d",
        "/usr/local/share/vulkan/explicit_layer.d",
    ];
    if !layer_dirs.iter().any(|dir| {
        Path::new(dir)
            .join("VkLayer_khronos_validation.json")
            .exists()
    }) {
        missing.push("vulkan-validationlayers");
    }
    if Command::new("spirv-val").arg("--version").output().is_err() {
        missing.push("spirv-tools");
    }
    missing
}

/// Check for the packages; as root on Debian/Ubuntu install what is missing,
/// otherwise print the exact command and fail.
pub(crate) fn ensure_vulkan() -> Result<(), String> {
    let missing = missing();
    if missing.is_empty() {
        return Ok(());
    }
    apt_install(
        PACKAGES,
        &format!("missing Vulkan packages: {}", missing.join(", ")),
    )?;
    let still = missing_after_install();
    if still.is_empty() {
        Ok(())
    } else {
        Err(format!("still missing after install: {}", still.join(", ")))
    }
}

/// Install Debian `packages` with apt-get when that can work unattended (as
/// root, with apt-get present); otherwise fail with `why` and the exact
/// command to run, so a developer without root knows what to do.
pub(crate) fn apt_install(packages: &[&str], why: &str) -> Result<(), String> {
    let command = format!(
        "apt-get update && apt-get install -y {}",
        packages.join(" ")
    );
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    let has_apt = Path::new("/usr/bin/apt-get").exists();
    if !(is_root && has_apt) {
        return Err(format!("{why}.\nInstall with:\n  sudo sh -c '{command}'"));
    }
    println!("xtask: installing {} ({why})", packages.join(" "));
    let status = Command::new("sh")
        .args(["-c", &command])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{command}` failed ({status})"))
    }
}

fn missing_after_install() -> Vec<&'static str> {
    missing()
}
