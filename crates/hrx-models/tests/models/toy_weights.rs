//! Host weights: safetensors round trips, F16/BF16 decoding, malformed
//! files, missing or misshapen tensors and invalid configurations. None of
//! these touches a device except the model constructors' checks.

use hrx_core::Error;
use hrx_models::{
    Weights, compare,
    toy::{Mlp, MlpConfig, Transformer, TransformerConfig},
};

/// A safetensors file from a header and data, as a foreign writer would
/// produce it.
fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn malformed(bytes: &[u8]) -> String {
    match Weights::from_safetensors(bytes) {
        Ok(w) => panic!("accepted a malformed file: {w:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn safetensors_round_trip() {
    let weights = MlpConfig::small().seeded_weights(5);
    let bytes = weights.to_safetensors();
    assert_eq!(Weights::from_safetensors(&bytes).unwrap(), weights);
    let empty = Weights::new();
    assert_eq!(
        Weights::from_safetensors(&empty.to_safetensors()).unwrap(),
        empty
    );
    let mut scalar = Weights::new();
    scalar.insert("s", vec![], vec![2.5]).unwrap();
    scalar.insert("e", vec![0, 3], vec![]).unwrap();
    assert_eq!(
        Weights::from_safetensors(&scalar.to_safetensors()).unwrap(),
        scalar
    );
}

#[test]
fn f16_and_bf16_tensors_decode_to_f32() {
    let halves = [1.5f32, -2.0, 0.333, 65504.0];
    let f16: Vec<u8> = halves
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    let bf16: Vec<u8> = halves
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    let header = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[8,16]}}"#;
    let weights = Weights::from_safetensors(&raw(header, &[f16, bf16].concat())).unwrap();
    let a = weights.get("a", &[2, 2]).unwrap();
    let b = weights.get("b", &[4]).unwrap();
    for (i, &v) in halves.iter().enumerate() {
        assert_eq!(a[i], half::f16::from_f32(v).to_f32());
        assert_eq!(b[i], half::bf16::from_f32(v).to_f32());
    }
    assert_eq!(a[0], 1.5);
    assert!((a[2] - 0.333).abs() < 1e-3 && (b[2] - 0.333).abs() < 3e-3);
    assert_eq!(weights.names().collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn malformed_files_are_errors() {
    let good = MlpConfig::small().seeded_weights(2).to_safetensors();
    for cut in [0, 4, 8, 9, 20, good.len() - 1] {
        malformed(&good[..cut]);
    }
    let data = [0u8; 8];
    let cases = [
        // Header JSON that is not JSON, or not the expected object.
        ("{\"a\": {\"dtype\": \"F32\", \"shape\": [2]", &data[..]),
        ("[1, 2]", &data),
        (
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}",
            &data,
        ),
        // Offsets past the data, overlapping, gapped or inconsistent.
        (
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            &data,
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &data,
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &data,
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            &data,
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
            &data,
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[18446744073709551615,4],"data_offsets":[0,8]}}"#,
            &data,
        ),
        // A dtype nobody knows.
        (
            r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}"#,
            &data,
        ),
    ];
    for (header, data) in cases {
        let why = malformed(&raw(header, data));
        assert!(why.contains("safetensors"), "{header}: {why}");
    }
    // A header length beyond the file.
    let mut long = raw("{}", &[]);
    long[..8].copy_from_slice(&1_000u64.to_le_bytes());
    malformed(&long);
    let mut huge = raw("{}", &[]);
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    malformed(&huge);
    // A known dtype this library does not convert.
    let i64s = raw(
        r#"{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#,
        &data,
    );
    assert!(matches!(
        Weights::from_safetensors(&i64s),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn weights_check_names_and_shapes() {
    let mut w = Weights::new();
    w.insert("a", vec![2, 3], vec![1.0; 6]).unwrap();
    assert!(w.insert("a", vec![1], vec![1.0]).is_err(), "duplicate name");
    assert!(
        w.insert("b", vec![2, 3], vec![1.0; 5]).is_err(),
        "value count"
    );
    assert!(
        w.insert("c", vec![usize::MAX, 2], vec![]).is_err(),
        "overflow"
    );
    let missing = w.get("nope", &[1]).unwrap_err().to_string();
    assert!(
        missing.contains("\"nope\"") && missing.contains("missing"),
        "{missing}"
    );
    let shape = w.get("a", &[3, 2]).unwrap_err().to_string();
    assert!(
        shape.contains("[2, 3]") && shape.contains("[3, 2]"),
        "{shape}"
    );
    assert_eq!(w.parameter_count(), 6);
}

#[test]
fn models_reject_missing_and_misshapen_weights() {
    let context = crate::toy_common::context();
    let config = MlpConfig::small();
    let good = config.seeded_weights(1);
    let (mut missing, mut misshapen) = (Weights::new(), Weights::new());
    for name in good.names().filter(|&n| n != "layers.2.weight") {
        copy(&good, &mut missing, name, None);
    }
    for name in good.names() {
        let reshape = (name == "layers.0.weight").then(|| vec![config.hidden, config.input]);
        copy(&good, &mut misshapen, name, reshape);
    }
    let why = Mlp::new(&context, config, &missing)
        .err()
        .unwrap()
        .to_string();
    assert!(
        why.contains("layers.2.weight") && why.contains("missing"),
        "{why}"
    );
    let why = Mlp::new(&context, config, &misshapen)
        .err()
        .unwrap()
        .to_string();
    assert!(
        why.contains("layers.0.weight") && why.contains("expected"),
        "{why}"
    );
    let t = TransformerConfig::small();
    let all = t.seeded_weights(1);
    let mut partial = Weights::new();
    for name in all.names().filter(|&n| n != "blocks.1.attn.v.bias") {
        copy(&all, &mut partial, name, None);
    }
    let why = Transformer::new(&context, t, &partial)
        .err()
        .unwrap()
        .to_string();
    assert!(why.contains("blocks.1.attn.v.bias"), "{why}");
}

/// Copy tensor `name` from `from`, optionally under another shape of the
/// same element count.
fn copy(from: &Weights, to: &mut Weights, name: &str, shape: Option<Vec<usize>>) {
    let original = from.shape(name).unwrap().to_vec();
    let values = from.get(name, &original).unwrap().to_vec();
    to.insert(name, shape.unwrap_or(original), values).unwrap();
}

#[test]
fn invalid_configurations_are_errors() {
    let t = TransformerConfig::small();
    let bad = [
        TransformerConfig { heads: 3, ..t },
        TransformerConfig { heads: 0, ..t },
        TransformerConfig { vocab: 0, ..t },
        TransformerConfig { seq: 0, ..t },
        TransformerConfig { blocks: 0, ..t },
        TransformerConfig {
            d_model: usize::MAX / 2,
            heads: 1,
            ..t
        },
        TransformerConfig {
            vocab: usize::MAX / 8,
            ..t
        },
        TransformerConfig {
            seq: 1 << 40,
            batch: 1 << 30,
            ..t
        },
    ];
    for config in bad {
        assert!(config.validate().is_err(), "{config:?}");
    }
    t.validate().unwrap();
    let m = MlpConfig::small();
    for config in [
        MlpConfig { batch: 0, ..m },
        MlpConfig { hidden: 0, ..m },
        MlpConfig {
            input: usize::MAX / 2,
            ..m
        },
    ] {
        assert!(config.validate().is_err(), "{config:?}");
    }
    let context = crate::toy_common::context();
    let weights = m.seeded_weights(1);
    assert!(Mlp::new(&context, MlpConfig { batch: 0, ..m }, &weights).is_err());
    let weights = t.seeded_weights(1);
    let why = Transformer::new(&context, TransformerConfig { heads: 5, ..t }, &weights);
    assert!(why.err().unwrap().to_string().contains("multiple of heads"));
}

#[test]
fn compare_reports_the_worst_offender() {
    assert_eq!(compare(&[1.0, 2.0], &[1.0, 2.0], 0.0, 0.0), Ok(()));
    assert_eq!(
        compare(&[1.0, 2.5, 3.0], &[1.0, 2.0, 2.0], 0.1, 0.0),
        Err(2)
    );
    assert_eq!(compare(&[100.5], &[100.0], 0.0, 0.01), Ok(()));
    assert_eq!(compare(&[1.0, f32::NAN], &[1.5, 1.0], 0.0, 0.0), Err(1));
    assert_eq!(compare(&[1.0], &[1.0, 2.0], 1.0, 1.0), Err(1));
}
