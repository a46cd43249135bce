//! The progress bar shown while requests are served.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A bar of `len` requests on stderr, or a hidden one with `--quiet` or
/// when stdout is not a terminal (piped output stays a clean report).
pub fn bar(len: usize, label: &'static str, quiet: bool) -> ProgressBar {
    bar_of(len, label, "requests", quiet)
}

/// [`bar`] counting `unit` (`sentences`, ...) instead of requests.
pub fn bar_of(len: usize, label: &'static str, unit: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    bar.set_draw_target(ProgressDrawTarget::stderr());
    // A fixed template cannot fail to parse; fall back to the default style
    // rather than abort the demo over cosmetics.
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{prefix:>6}} [{{bar:40}}] {{pos}}/{{len}} {unit}, {{elapsed}}"
    )) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(label);
    bar
}
