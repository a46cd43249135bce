//! Fuzz the loom front end: any bytes, parsed and verified, must produce a
//! module or diagnostics, never a panic, a stack overflow or a hang; and a
//! parsed program must print to text that parses back to the same print.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    let Ok(ast) = hrx_loom::front::parse(&source) else {
        return;
    };
    let _ = hrx_loom::verify::verify(&ast, &source);
    let printed = hrx_loom::front::print(&ast);
    let again = hrx_loom::front::parse(&printed).expect("printed text parses");
    assert_eq!(hrx_loom::front::print(&again), printed);
});
