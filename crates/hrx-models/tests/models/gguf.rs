//! The GGUF reader on small files written here: a valid one read back in
//! full, and hostile ones (truncated at every byte, absurd counts, lengths
//! and dims, misaligned, overlapping or out-of-file tensors, unknown types,
//! bad UTF-8, repeated names, deep nesting) each refused with the right
//! error at the right offset; random corruption never panics.

use crate::gguf_common::{Writer, array, entry, info, string, use_everything};
use base64::Engine as _;
use hrx_models::gguf::{
    Array, GgufError, GgufErrorKind, GgufFile, MAX_ARRAY_DEPTH, TensorType, Value,
};
use proptest::prelude::*;

fn kind(result: Result<GgufFile, GgufError>) -> GgufErrorKind {
    result.expect_err("the file must be refused").kind
}

#[test]
fn a_valid_file_reads_back_in_full() {
    let file = Writer::valid().parse().unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.data_offset() % 32, 0);
    let meta = file.metadata();
    assert_eq!(meta.len(), 15);
    assert_eq!(meta.string("general.architecture").unwrap(), "llama");
    assert_eq!(meta.get("t.u8"), Some(&Value::U8(200)));
    assert_eq!(meta.get("t.i8"), Some(&Value::I8(-1)));
    assert_eq!(meta.get("t.u16"), Some(&Value::U16(60000)));
    assert_eq!(meta.get("t.i16"), Some(&Value::I16(-2)));
    assert_eq!(meta.get("t.i32"), Some(&Value::I32(-3)));
    assert_eq!(meta.get("t.f32"), Some(&Value::F32(1.5)));
    assert!(meta.bool("t.bool").unwrap());
    assert_eq!(meta.u64("t.u64").unwrap(), 1 << 40);
    assert_eq!(meta.get("t.i64"), Some(&Value::I64(-4)));
    assert_eq!(meta.f64("t.f64").unwrap(), 0.25);
    assert_eq!(meta.strings("t.strings").unwrap(), ["a", "é€😀"]);
    let nested = Array::Array(vec![Array::Array(vec![
        Array::U8(vec![7, 9]),
        Array::String(vec!["deep".into()]),
    ])]);
    assert_eq!(meta.array("t.nested").unwrap(), &nested);
    assert!(meta.i32s("t.empty").unwrap().is_empty());

    let names: Vec<&str> = file.tensors().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    let a = file.tensor("a").unwrap();
    assert_eq!(file.dequantize(a).unwrap(), [1., 2., 3., 4.]);
    let b = file.tensor("b").unwrap();
    assert_eq!(
        (b.tensor_type(), b.dims(), b.shape()),
        (TensorType::Q8_0, &[32u64, 2][..], vec![2, 32])
    );
    assert_eq!(file.tensor_data(b).len(), 68);
    let row0: Vec<f32> = (0..32).map(|i| 0.5 * (i as f32 - 16.)).collect();
    assert_eq!(file.dequantize_rows(b, 0..1).unwrap(), row0);
    assert_eq!(file.dequantize_rows(b, 1..2).unwrap(), vec![-1.0; 32]);
    let c = file.tensor("c").unwrap();
    let expected: Vec<f32> = (0..16)
        .chain((0..16).map(|i| 15 - i))
        .map(|q| 2. * q as f32 - 8.)
        .collect();
    assert_eq!(file.dequantize(c).unwrap(), expected);
    let d = file.tensor("d").unwrap();
    assert_eq!(file.dequantize(d).unwrap(), [0.5, -2., 65504., 1. / 1024.]);
    assert!(matches!(
        file.dequantize_rows(d, 1..3).unwrap_err().kind,
        GgufErrorKind::BadDimensions { .. }
    ));
}

#[test]
fn version_2_reads_and_a_file_without_tensors_may_end_unpadded() {
    let mut w = Writer::valid();
    w.version = 2;
    assert_eq!(w.parse().unwrap().version(), 2);
    let mut w = Writer::empty();
    w.entries = vec![entry("k", 0, &[1])];
    assert_eq!(w.parse().unwrap().tensors().len(), 0);
}

#[test]
fn truncation_anywhere_is_an_error_not_a_panic() {
    let w = Writer::valid();
    let bytes = w.bytes();
    let header = w.header_len();
    for cut in 0..bytes.len() {
        let error = GgufFile::from_bytes(bytes[..cut].to_vec()).unwrap_err();
        match error.kind {
            GgufErrorKind::Truncated {
                needed, available, ..
            } => {
                let offset = error.offset.unwrap();
                assert!(
                    offset <= cut as u64 && needed > available,
                    "cut {cut}: {error}"
                );
                assert_eq!(offset + available, cut as u64, "cut {cut}: {error}");
            }
            // Cut in the data: the last tensor no longer fits.
            GgufErrorKind::TensorOutOfFile { ref tensor, .. } => {
                assert!(cut >= header, "cut {cut}: {error}");
                assert!(["a", "b", "c", "d"].contains(&tensor.as_str()));
            }
            _ => panic!("cut {cut}: unexpected {error}"),
        }
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut bytes = Writer::valid().bytes();
    bytes[0] = b'X';
    assert_eq!(
        kind(GgufFile::from_bytes(bytes)),
        GgufErrorKind::BadMagic(*b"XGUF")
    );
    for version in [0, 1, 4, 3 << 24] {
        let mut w = Writer::valid();
        w.version = version;
        let error = w.parse().unwrap_err();
        assert_eq!(error.kind, GgufErrorKind::UnsupportedVersion(version));
        assert_eq!(error.offset, Some(4));
        assert!(matches!(
            hrx_core::Error::from(error),
            hrx_core::Error::Unsupported(_)
        ));
    }
}

#[test]
fn absurd_counts_are_refused_before_allocation() {
    for (count, field_offset) in [(u64::MAX, 8), (1 << 40, 8)] {
        let mut w = Writer::valid();
        w.tensor_count = Some(count);
        let error = w.parse().unwrap_err();
        assert_eq!(error.offset, Some(field_offset), "{error}");
        assert!(
            matches!(error.kind, GgufErrorKind::TooLarge { value, .. } if value == count),
            "{error}"
        );
    }
    let mut w = Writer::valid();
    w.key_count = Some(u64::MAX);
    let error = w.parse().unwrap_err();
    assert_eq!(error.offset, Some(16));
    assert!(
        matches!(error.kind, GgufErrorKind::TooLarge { .. }),
        "{error}"
    );
    // A count the file could hold but does not: found missing as it reads.
    let mut w = Writer::valid();
    w.key_count = Some(w.entries.len() as u64 + 1);
    // (The first tensor info is read as the extra entry; what fails then
    // depends on its bytes, but it fails at a place.)
    assert!(w.parse().unwrap_err().offset.is_some());
}

#[test]
fn absurd_lengths_are_refused() {
    // A key claiming 2^40 bytes.
    let mut w = Writer::empty();
    let mut huge_key = (1u64 << 40).to_le_bytes().to_vec();
    huge_key.extend([b'a'; 32]);
    w.entries = vec![huge_key];
    let error = w.parse().unwrap_err();
    assert_eq!(error.offset, Some(24));
    assert!(
        matches!(error.kind, GgufErrorKind::TooLarge { value, .. } if value == 1 << 40),
        "{error}"
    );

    // A string value claiming u64::MAX bytes: more than the file has.
    let mut w = Writer::empty();
    w.entries = vec![entry("s", 8, &u64::MAX.to_le_bytes())];
    let error = w.parse().unwrap_err();
    assert!(
        matches!(error.kind, GgufErrorKind::Truncated { needed, .. } if needed == u64::MAX),
        "{error}"
    );

    // Arrays claiming more elements than the rest of the file could hold.
    for element_type in [0, 5, 8, 9, 12] {
        let mut w = Writer::empty();
        w.entries = vec![entry(
            "arr",
            9,
            &array(element_type, u64::MAX / 2, &[0; 16]),
        )];
        let error = w.parse().unwrap_err();
        assert_eq!(error.offset, Some(24 + 11 + 4 + 4), "{error}");
        assert!(
            matches!(error.kind, GgufErrorKind::TooLarge { ref what, .. } if what.contains("\"arr\"")),
            "{error}"
        );
    }
}

#[test]
fn absurd_or_unusable_dims_are_refused() {
    let cases: [(&[u64], u32, &str); 6] = [
        (&[u64::MAX, u64::MAX], 0, "TooLarge"),
        (&[1 << 32, 1 << 32, 1 << 32], 0, "TooLarge"),
        (&[1 << 40], 0, "TooLarge"),
        (&[4, 0], 0, "dim 1 is 0"),
        (&[], 0, "0 dims"),
        (&[1, 1, 1, 1, 1], 0, "5 dims"),
    ];
    for (dims, type_id, expect) in cases {
        let mut w = Writer::valid();
        w.infos[0] = info("a", dims, type_id, 0);
        let error = w.parse().unwrap_err();
        let text = format!("{:?} {error}", error.kind);
        assert!(text.contains(expect), "{dims:?}: {text}");
        assert!(text.contains("\"a\""), "{text}");
        assert!(error.offset.is_some(), "{text}");
    }
    // A Q8_0 row of 48 values is not whole blocks of 32.
    let mut w = Writer::valid();
    w.infos[1] = info("b", &[48], 8, 32);
    let error = w.parse().unwrap_err();
    assert!(
        matches!(error.kind, GgufErrorKind::BadDimensions { ref why, .. } if why.contains("blocks of 32")),
        "{error}"
    );
}

#[test]
fn misaligned_overlapping_and_out_of_file_tensors_are_refused() {
    let mut w = Writer::valid();
    w.infos[1] = info("b", &[32, 2], 8, 36);
    assert_eq!(
        kind(w.parse()),
        GgufErrorKind::MisalignedTensor {
            tensor: "b".into(),
            offset: 36,
            alignment: 32
        }
    );

    let mut w = Writer::valid();
    w.infos[2] = info("c", &[32], 3, 64); // inside b's 32..100
    assert_eq!(
        kind(w.parse()),
        GgufErrorKind::OverlappingTensors {
            first: "b".into(),
            second: "c".into()
        }
    );

    let mut w = Writer::valid();
    w.infos[3] = info("d", &[2, 2], 1, 1 << 20);
    assert!(
        matches!(kind(w.parse()), GgufErrorKind::TensorOutOfFile { ref tensor, .. } if tensor == "d")
    );

    let mut w = Writer::valid();
    w.infos[3] = info("d", &[2, 2], 1, u64::MAX - 31);
    assert!(matches!(
        kind(w.parse()),
        GgufErrorKind::TensorOutOfFile { ref tensor, start, .. } if tensor == "d" && start == u64::MAX - 31
    ));
}

#[test]
fn unknown_and_unsupported_types() {
    let mut w = Writer::valid();
    w.infos[0] = info("a", &[4], 4, 0); // id 4 was retired
    let error = w.parse().unwrap_err();
    assert_eq!(
        error.kind,
        GgufErrorKind::UnknownTensorType {
            tensor: "a".into(),
            type_id: 4
        }
    );

    // Q3_K parses (its layout is known) but is not decoded.
    let mut w = Writer::valid();
    w.infos = vec![info("k", &[256], 11, 0)];
    w.data = vec![0; 110];
    let file = w.parse().unwrap();
    let k = file.tensor("k").unwrap();
    assert_eq!(k.tensor_type().name(), "Q3_K");
    assert_eq!(file.tensor_data(k).len(), 110);
    let error = file.dequantize(k).unwrap_err();
    assert_eq!(
        error.kind,
        GgufErrorKind::UnsupportedTensorType {
            tensor: "k".into(),
            type_name: "Q3_K"
        }
    );
    assert!(error.to_string().contains("Q3_K"));

    let mut w = Writer::empty();
    w.entries = vec![entry("v", 13, &[0; 8])];
    let error = w.parse().unwrap_err();
    assert_eq!(error.offset, Some(24 + 9));
    assert!(matches!(
        error.kind,
        GgufErrorKind::UnknownValueType { type_id: 13, .. }
    ));

    let mut w = Writer::empty();
    w.entries = vec![entry("v", 9, &array(77, 1, &[0; 8]))];
    assert!(matches!(
        kind(w.parse()),
        GgufErrorKind::UnknownValueType { type_id: 77, .. }
    ));

    let mut w = Writer::empty();
    w.entries = vec![entry("b", 7, &[2])];
    assert!(matches!(
        kind(w.parse()),
        GgufErrorKind::InvalidBool { value: 2, .. }
    ));
}

#[test]
fn bad_utf8_is_located() {
    let mut w = Writer::empty();
    w.entries = vec![entry("ok", 0, &[1]), {
        let mut e = string(b"ab\xFFcd");
        e.extend(0u32.to_le_bytes());
        e.push(0);
        e
    }];
    let error = w.parse().unwrap_err();
    // The header (24), the first entry (8 + 2 + 4 + 1), the length (8), "ab".
    assert_eq!(error.offset, Some(24 + 15 + 8 + 2));
    assert_eq!(
        error.kind,
        GgufErrorKind::InvalidUtf8 {
            what: "metadata key 1".into()
        }
    );

    let mut w = Writer::valid();
    w.infos[0] = {
        let mut e = string(b"\xC3");
        e.extend(&info("", &[4], 0, 0)[8..]);
        e
    };
    assert!(
        matches!(kind(w.parse()), GgufErrorKind::InvalidUtf8 { ref what } if what == "the name of tensor 0")
    );

    let mut w = Writer::empty();
    w.entries = vec![entry("s", 9, &array(8, 1, &string(b"\xE2\x82")))];
    assert!(
        matches!(kind(w.parse()), GgufErrorKind::InvalidUtf8 { ref what } if what.contains("element 0"))
    );
}

#[test]
fn repeated_names_are_refused() {
    let mut w = Writer::valid();
    w.entries.push(entry("t.u8", 0, &[1]));
    assert_eq!(kind(w.parse()), GgufErrorKind::DuplicateKey("t.u8".into()));
    let mut w = Writer::valid();
    w.infos[3] = info("a", &[2, 2], 1, 160);
    assert_eq!(kind(w.parse()), GgufErrorKind::DuplicateTensor("a".into()));
}

#[test]
fn alignment_must_be_a_power_of_two_integer() {
    for bad in [0u32, 3, 48, 1 << 30] {
        let mut w = Writer::valid();
        w.entries[1] = entry("general.alignment", 4, &bad.to_le_bytes());
        assert_eq!(kind(w.parse()), GgufErrorKind::BadAlignment(bad.into()));
    }
    let mut w = Writer::valid();
    w.entries[1] = entry("general.alignment", 8, &string(b"32"));
    assert!(
        matches!(kind(w.parse()), GgufErrorKind::WrongType { ref key, .. } if key == "general.alignment")
    );
    // Alignment 64: the data section moves, b (at 32) is now misaligned.
    let mut w = Writer::valid();
    w.entries[1] = entry("general.alignment", 4, &64u32.to_le_bytes());
    w.alignment = 64;
    assert!(
        matches!(kind(w.parse()), GgufErrorKind::MisalignedTensor { ref tensor, .. } if tensor == "b")
    );
}

#[test]
fn nesting_is_limited() {
    // Arrays of one array each, `depth` deep, around one u8: the headers
    // of the outer arrays, then the innermost array.
    let nest = |depth: usize| [array(9, 1, &[]).repeat(depth - 1), array(0, 1, &[5])].concat();
    let mut w = Writer::empty();
    w.entries = vec![entry("n", 9, &nest(MAX_ARRAY_DEPTH))];
    assert!(w.parse().is_ok());
    w.entries = vec![entry("n", 9, &nest(MAX_ARRAY_DEPTH + 1))];
    assert!(matches!(kind(w.parse()), GgufErrorKind::NestingTooDeep { ref key, .. } if key == "n"));
    // Far deeper than the stack would allow unchecked.
    w.entries = vec![entry("n", 9, &nest(100_000))];
    assert!(matches!(
        kind(w.parse()),
        GgufErrorKind::NestingTooDeep { .. }
    ));
}

#[test]
fn typed_lookups_name_the_key() {
    let file = Writer::valid().parse().unwrap();
    let meta = file.metadata();
    assert_eq!(
        meta.string("nope").unwrap_err().kind,
        GgufErrorKind::MissingKey("nope".into())
    );
    assert_eq!(
        meta.string("t.u8").unwrap_err().kind,
        GgufErrorKind::WrongType {
            key: "t.u8".into(),
            expected: "string",
            found: "u8"
        }
    );
    assert!(matches!(
        meta.u64("t.i64").unwrap_err().kind,
        GgufErrorKind::BadValue { .. }
    ));
    assert!(matches!(
        meta.u32("t.u64").unwrap_err().kind,
        GgufErrorKind::BadValue { .. }
    ));
    assert_eq!(
        meta.i32s("t.strings").unwrap_err().kind,
        GgufErrorKind::WrongType {
            key: "t.strings".into(),
            expected: "array of i32",
            found: "array of string"
        }
    );
    assert_eq!(
        file.tensor("zz").unwrap_err().kind,
        GgufErrorKind::MissingTensor("zz".into())
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_corruption_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = Writer::valid().bytes();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        use_everything(bytes);
    }

    #[test]
    fn corrupted_header_words_never_panic(
        at in any::<prop::sample::Index>(),
        word in prop_oneof![Just(u64::MAX), Just(0u64), Just(1u64 << 63), any::<u64>()],
    ) {
        let mut bytes = Writer::valid().bytes();
        let header = Writer::valid().header_len();
        let i = at.index(header - 8);
        bytes[i..i + 8].copy_from_slice(&word.to_le_bytes());
        use_everything(bytes);
    }
}

/// Q4_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K tensors decode to the `gguf`
/// package's values bit for bit (`tests/reference/quants/`), whole and by
/// rows.
#[test]
fn block_formats_decode_as_the_gguf_package_does() {
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("../reference/quants/quants.json")).unwrap();
    let formats = [
        ("Q4_0", 2),
        ("Q5_0", 6),
        ("Q5_1", 7),
        ("Q4_K", 12),
        ("Q5_K", 13),
        ("Q6_K", 14),
    ];
    for (name, type_id) in formats {
        let m = &reference[name];
        let (rows, cols) = (m["rows"].as_u64().unwrap(), m["cols"].as_u64().unwrap());
        let b64 = |key: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(m[key].as_str().unwrap())
                .unwrap()
        };
        let want: Vec<u32> = b64("values")
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let mut w = Writer::empty();
        w.infos = vec![info("w", &[cols, rows], type_id, 0)];
        w.data = b64("bytes");
        let file = w.parse().unwrap();
        let tensor = file.tensor("w").unwrap();
        assert_eq!(tensor.tensor_type().name(), name);
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_eq!(bits(file.dequantize(tensor).unwrap()), want, "{name}");
        let cols = cols as usize;
        let rows_2_4 = file.dequantize_rows(tensor, 2..4).unwrap();
        assert_eq!(bits(rows_2_4), want[2 * cols..4 * cols], "{name} rows");
    }
}
