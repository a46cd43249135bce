//! `hrx demo --model DIR`: a sentence encoder served through a pool of
//! slots by concurrent clients, checked against a reference.

use super::DemoArgs;
use hrx::Error;

/// Run the sentence-encoder demo for the model directory in `args`.
pub fn run(args: &DemoArgs) -> Result<(), Error> {
    let _ = args;
    Err(Error::Message("not implemented yet".into()))
}
