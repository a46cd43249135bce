//! Dropping the last clone of a `SentenceEmbedder` waits for its batching
//! thread to release the pools, so the device is closed when the drop
//! returns: nothing of the embedder outlives it (a process that exits
//! right after must not race the thread's teardown of the device). Its own
//! test binary: it counts the process's open devices.

use hrx_inference::ModelContext;
use hrx_models::embed::{EmbedderOptions, SentenceEmbedder};
use hrx_runtime::{RuntimeOptions, open_device_count};
use hrx_test_support::models::minilm_dir;

/// Without the join the thread often, not always, still runs when the
/// drop returns; a few rounds make a missing join show.
#[test]
fn the_device_is_closed_when_the_last_clone_drops() {
    for _ in 0..4 {
        one_round();
    }
}

fn one_round() {
    assert_eq!(open_device_count(), 0);
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context");
    let options = EmbedderOptions {
        max_batch: 1,
        slots: 1,
        ..EmbedderOptions::default()
    };
    let embedder = SentenceEmbedder::load(&context, &minilm_dir(), &options).expect("load");
    let clone = embedder.clone();
    // A batch prepares a pool on the batching thread's side.
    assert_eq!(clone.embed(&["hello"]).expect("embed")[0].vector.len(), 384);
    drop(context);
    drop(embedder);
    assert_eq!(open_device_count(), 1, "a clone still holds the device");
    assert_eq!(batching_threads(), 1);
    drop(clone);
    assert_eq!(
        batching_threads(),
        0,
        "the batching thread outlived the drop"
    );
    assert_eq!(open_device_count(), 0);
}

/// Threads of this process named like the embedder's batching thread
/// (Linux shows the first 15 bytes of a name).
fn batching_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == &"hrx-embed-batcher"[..15])
        .count()
}
