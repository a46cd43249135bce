//! The GGUF reader on small files written here: a valid one read back in
//! full, and hostile ones (truncated at every byte, absurd counts, lengths
//! and dims, misaligned, overlapping or out-of-file tensors, unknown types,
//! bad UTF-8, repeated names, deep nesting) each refused with the right
//! error at the right offset; random corruption never panics.

use half::f16;
use hrx_models::gguf::{
    Array, GgufError, GgufErrorKind, GgufFile, LlamaConfig, MAX_ARRAY_DEPTH, TensorType, Value,
};
use proptest::prelude::*;

/// Encodes GGUF files field by field.
#[derive(Clone)]
struct Writer {
    version: u32,
    /// Overrides of the counts in the header (for lying headers).
    tensor_count: Option<u64>,
    key_count: Option<u64>,
    entries: Vec<Vec<u8>>,
    infos: Vec<Vec<u8>>,
    alignment: u64,
    data: Vec<u8>,
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

/// A metadata entry: key, value type, value bytes.
fn entry(key: &str, type_id: u32, value: &[u8]) -> Vec<u8> {
    let mut out = string(key.as_bytes());
    out.extend(type_id.to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// A tensor info: name, dims, type, data offset.
fn info(name: &str, dims: &[u64], type_id: u32, offset: u64) -> Vec<u8> {
    let mut out = string(name.as_bytes());
    out.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        out.extend(d.to_le_bytes());
    }
    out.extend(type_id.to_le_bytes());
    out.extend(offset.to_le_bytes());
    out
}

/// An array value: element type, length, element bytes.
fn array(type_id: u32, len: u64, elements: &[u8]) -> Vec<u8> {
    let mut out = type_id.to_le_bytes().to_vec();
    out.extend(len.to_le_bytes());
    out.extend_from_slice(elements);
    out
}

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

impl Writer {
    fn empty() -> Self {
        Self {
            version: 3,
            tensor_count: None,
            key_count: None,
            entries: Vec::new(),
            infos: Vec::new(),
            alignment: 32,
            data: Vec::new(),
        }
    }

    /// A file with one of every value type, nested arrays, and four
    /// tensors (F32, Q8_0, Q4_1, F16) with known values.
    fn valid() -> Self {
        let mut w = Self::empty();
        let strings = [string(b"a"), string("é€😀".as_bytes())].concat();
        let inner_u8 = array(0, 2, &[7, 9]);
        let inner_str = array(8, 1, &string(b"deep"));
        let nested = array(9, 2, &[inner_u8, inner_str].concat());
        w.entries = vec![
            entry("general.architecture", 8, &string(b"llama")),
            entry("general.alignment", 4, &32u32.to_le_bytes()),
            entry("t.u8", 0, &[200]),
            entry("t.i8", 1, &[0xFF]),
            entry("t.u16", 2, &60000u16.to_le_bytes()),
            entry("t.i16", 3, &(-2i16).to_le_bytes()),
            entry("t.i32", 5, &(-3i32).to_le_bytes()),
            entry("t.f32", 6, &1.5f32.to_le_bytes()),
            entry("t.bool", 7, &[1]),
            entry("t.u64", 10, &(1u64 << 40).to_le_bytes()),
            entry("t.i64", 11, &(-4i64).to_le_bytes()),
            entry("t.f64", 12, &0.25f64.to_le_bytes()),
            entry("t.strings", 9, &array(8, 2, &strings)),
            entry("t.nested", 9, &array(9, 1, &nested)),
            entry("t.empty", 9, &array(5, 0, &[])),
        ];
        // F32 [4] at 0: 1, 2, 3, 4.
        let mut data: Vec<u8> = [1f32, 2., 3., 4.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        data.resize(32, 0);
        // Q8_0 [32, 2] at 32: row 0 d = 0.5, q = i - 16; row 1 d = -1, q = 1.
        for (d, q) in [(0.5f32, None), (-1.0, Some(1i8))] {
            data.extend(f16_bytes(d));
            data.extend((0..32).map(|i| q.unwrap_or(i as i8 - 16) as u8));
        }
        data.resize(128, 0);
        // Q4_1 [32] at 128: d = 2, m = -8, q = i % 16.
        data.extend(f16_bytes(2.0));
        data.extend(f16_bytes(-8.0));
        data.extend((0..16).map(|i| (i as u8) | (((15 - i) as u8) << 4)));
        data.resize(160, 0);
        // F16 [2, 2] at 160.
        for v in [0.5f32, -2., 65504., 1. / 1024.] {
            data.extend(f16_bytes(v));
        }
        w.infos = vec![
            info("a", &[4], 0, 0),
            info("b", &[32, 2], 8, 32),
            info("c", &[32], 3, 128),
            info("d", &[2, 2], 1, 160),
        ];
        w.data = data;
        w
    }

    fn header_len(&self) -> usize {
        24 + self.entries.iter().map(Vec::len).sum::<usize>()
            + self.infos.iter().map(Vec::len).sum::<usize>()
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        let tensors = self.tensor_count.unwrap_or(self.infos.len() as u64);
        out.extend(tensors.to_le_bytes());
        out.extend(
            self.key_count
                .unwrap_or(self.entries.len() as u64)
                .to_le_bytes(),
        );
        for e in self.entries.iter().chain(&self.infos) {
            out.extend_from_slice(e);
        }
        if !self.data.is_empty() {
            out.resize(out.len().next_multiple_of(self.alignment as usize), 0);
            out.extend_from_slice(&self.data);
        }
        out
    }

    fn parse(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.bytes())
    }
}

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

    // Q6_K parses (its layout is known) but is not decoded.
    let mut w = Writer::valid();
    w.infos = vec![info("k", &[256], 14, 0)];
    w.data = vec![0; 210];
    let file = w.parse().unwrap();
    let k = file.tensor("k").unwrap();
    assert_eq!(k.tensor_type().name(), "Q6_K");
    assert_eq!(file.tensor_data(k).len(), 210);
    let error = file.dequantize(k).unwrap_err();
    assert_eq!(
        error.kind,
        GgufErrorKind::UnsupportedTensorType {
            tensor: "k".into(),
            type_name: "Q6_K"
        }
    );
    assert!(error.to_string().contains("Q6_K"));

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

/// Everything a consumer does with a file, so corruption anywhere is
/// exercised: parse, every lookup, every decode.
fn use_everything(bytes: Vec<u8>) {
    let Ok(file) = GgufFile::from_bytes(bytes) else {
        return;
    };
    for (key, _) in file.metadata().iter() {
        let _ = file.metadata().u64(key);
        let _ = file.metadata().strings(key);
    }
    for tensor in file.tensors() {
        let _ = file.dequantize(tensor);
        let _ = file.tensor_data(tensor).len();
    }
    if let Ok(config) = LlamaConfig::from_gguf(&file) {
        let _ = config.check_tensors(&file);
    }
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
    fn corrupted_llama_files_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = tiny_llama(|_| {}).bytes();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
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

/// A tiny llama: 2 blocks, width 8, FFN 16, 2 heads sharing 1 key/value
/// head, vocabulary 4, F32 tensors of the right dims.
fn tiny_llama(edit: impl FnOnce(&mut Vec<(&'static str, Vec<u8>)>)) -> Writer {
    let u32v = |v: u32| v.to_le_bytes().to_vec();
    let mut keys: Vec<(&'static str, Vec<u8>)> = vec![
        (
            "general.architecture",
            [8u32.to_le_bytes().to_vec(), string(b"llama")].concat(),
        ),
        ("llama.block_count", [vec![4, 0, 0, 0], u32v(2)].concat()),
        (
            "llama.context_length",
            [vec![4, 0, 0, 0], u32v(64)].concat(),
        ),
        (
            "llama.embedding_length",
            [vec![4, 0, 0, 0], u32v(8)].concat(),
        ),
        (
            "llama.feed_forward_length",
            [vec![4, 0, 0, 0], u32v(16)].concat(),
        ),
        (
            "llama.attention.head_count",
            [vec![4, 0, 0, 0], u32v(2)].concat(),
        ),
        (
            "llama.attention.head_count_kv",
            [vec![4, 0, 0, 0], u32v(1)].concat(),
        ),
        (
            "llama.rope.freq_base",
            [vec![6, 0, 0, 0], 10000f32.to_le_bytes().to_vec()].concat(),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon",
            [vec![6, 0, 0, 0], 1e-5f32.to_le_bytes().to_vec()].concat(),
        ),
        ("llama.vocab_size", [vec![4, 0, 0, 0], u32v(4)].concat()),
    ];
    edit(&mut keys);
    let mut w = Writer::empty();
    w.entries = keys
        .iter()
        .map(|(k, typed)| [string(k.as_bytes()), typed.clone()].concat())
        .collect();
    let mut tensors: Vec<(String, Vec<u64>)> = vec![("token_embd.weight".into(), vec![8, 4])];
    for i in 0..2 {
        for (name, dims) in [
            ("attn_norm", vec![8]),
            ("attn_q", vec![8, 8]),
            ("attn_k", vec![8, 4]),
            ("attn_v", vec![8, 4]),
            ("attn_output", vec![8, 8]),
            ("ffn_norm", vec![8]),
            ("ffn_gate", vec![8, 16]),
            ("ffn_up", vec![8, 16]),
            ("ffn_down", vec![16, 8]),
        ] {
            tensors.push((format!("blk.{i}.{name}.weight"), dims));
        }
    }
    tensors.push(("output_norm.weight".into(), vec![8]));
    for (name, dims) in tensors {
        let offset = w.data.len() as u64;
        w.infos.push(info(&name, &dims, 0, offset));
        let bytes = dims.iter().product::<u64>() as usize * 4;
        w.data
            .resize((w.data.len() + bytes).next_multiple_of(32), 0);
    }
    w
}

fn llama_error(edit: impl FnOnce(&mut Vec<(&'static str, Vec<u8>)>)) -> String {
    let file = tiny_llama(edit).parse().unwrap();
    LlamaConfig::from_gguf(&file).unwrap_err().to_string()
}

fn set_u32(keys: &mut [(&'static str, Vec<u8>)], key: &str, value: u32) {
    keys.iter_mut().find(|(k, _)| *k == key).unwrap().1 =
        [vec![4, 0, 0, 0], value.to_le_bytes().to_vec()].concat();
}

#[test]
fn llama_constants_are_read_and_checked() {
    let file = tiny_llama(|_| {}).parse().unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    assert_eq!(
        (
            config.layers,
            config.width,
            config.ffn_width,
            config.heads,
            config.kv_heads
        ),
        (2, 8, 16, 2, 1)
    );
    assert_eq!(
        (config.head_dim, config.rope_dims, config.vocab_size),
        (4, 4, 4)
    );
    assert_eq!((config.rope_base, config.context_length), (10000.0, 64));
    assert!(config.tied_embedding);
    config.check_tensors(&file).unwrap();

    // Defaults where llama.cpp has them.
    let file = tiny_llama(|k| {
        k.retain(|(key, _)| !key.ends_with("head_count_kv") && !key.ends_with("freq_base"))
    })
    .parse()
    .unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    assert_eq!((config.kv_heads, config.rope_base), (2, 10000.0));
    // Two query heads read two key/value heads now: attn_k is too small.
    let error = config.check_tensors(&file).unwrap_err();
    assert!(error.to_string().contains("blk.0.attn_k.weight"), "{error}");
}

#[test]
fn inconsistent_llama_constants_are_errors_naming_the_key() {
    let cases: [(&str, u32, &str); 6] = [
        ("llama.attention.head_count", 3, "do not divide the width"),
        ("llama.attention.head_count", 8, "odd"),
        ("llama.attention.head_count_kv", 3, "do not divide the 2"),
        ("llama.block_count", 0, "not a count"),
        ("llama.vocab_size", 0, "not a count"),
        ("llama.block_count", 1 << 24, "not a count from 1 to 4096"),
    ];
    for (key, value, expect) in cases {
        let error = llama_error(|k| set_u32(k, key, value));
        assert!(
            error.contains(key) && error.contains(expect),
            "{key}={value}: {error}"
        );
    }
    let error = llama_error(|k| k.retain(|(key, _)| *key != "llama.embedding_length"));
    assert!(
        error.contains("\"llama.embedding_length\" is missing"),
        "{error}"
    );
    let error = llama_error(|k| {
        k[0].1 = [8u32.to_le_bytes().to_vec(), string(b"gpt2")].concat();
    });
    assert!(error.contains("not a llama-family architecture"), "{error}");
    let error = llama_error(|k| {
        k.iter_mut()
            .find(|(key, _)| key.ends_with("rms_epsilon"))
            .unwrap()
            .1 = [vec![6, 0, 0, 0], f32::NAN.to_le_bytes().to_vec()].concat();
    });
    assert!(error.contains("finite positive"), "{error}");
}

#[test]
fn check_tensors_names_the_missing_one() {
    let mut w = tiny_llama(|_| {});
    w.infos
        .retain(|i| !i.windows(16).any(|s| s == b"blk.1.ffn_up.wei"));
    let file = w.parse().unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let error = config.check_tensors(&file).unwrap_err();
    assert_eq!(
        error.kind,
        GgufErrorKind::MissingTensor("blk.1.ffn_up.weight".into())
    );
}
