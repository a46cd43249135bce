//! `hrx embed`: sentences in, one JSON object per sentence out (JSON
//! Lines), through a pool of sentence-encoder slots.

use crate::args::EmbedArgs;
use hrx::Error;

/// Embed the sentences `args` names and write them out.
pub fn run(args: &EmbedArgs) -> Result<(), Error> {
    let _ = args;
    Err(Error::Message("not implemented yet".into()))
}
