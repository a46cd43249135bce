//! Shared by the GGUF tests: a writer of GGUF files field by field, a
//! valid small file, a tiny llama, and the use of every part of a file
//! that corruption tests run.

// Each test binary uses its own part of these helpers.
#![allow(dead_code)]

use half::f16;
use hrx_models::gguf::{GgufError, GgufFile, LlamaConfig};

/// Encodes GGUF files field by field.
#[derive(Clone)]
pub struct Writer {
    pub version: u32,
    /// Overrides of the counts in the header (for lying headers).
    pub tensor_count: Option<u64>,
    pub key_count: Option<u64>,
    /// Encoded metadata entries and tensor infos, in file order.
    pub entries: Vec<Vec<u8>>,
    pub infos: Vec<Vec<u8>>,
    /// The padding before the data section.
    pub alignment: u64,
    pub data: Vec<u8>,
}

/// A GGUF string: its length, then its bytes.
pub fn string(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

/// A metadata entry: key, value type, value bytes.
pub fn entry(key: &str, type_id: u32, value: &[u8]) -> Vec<u8> {
    let mut out = string(key.as_bytes());
    out.extend(type_id.to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// A tensor info: name, dims, type, data offset.
pub fn info(name: &str, dims: &[u64], type_id: u32, offset: u64) -> Vec<u8> {
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
pub fn array(type_id: u32, len: u64, elements: &[u8]) -> Vec<u8> {
    let mut out = type_id.to_le_bytes().to_vec();
    out.extend(len.to_le_bytes());
    out.extend_from_slice(elements);
    out
}

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

impl Writer {
    pub fn empty() -> Self {
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
    pub fn valid() -> Self {
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

    pub fn header_len(&self) -> usize {
        24 + self.entries.iter().map(Vec::len).sum::<usize>()
            + self.infos.iter().map(Vec::len).sum::<usize>()
    }

    pub fn bytes(&self) -> Vec<u8> {
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

    pub fn parse(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.bytes())
    }
}

/// A tiny llama: 2 blocks, width 8, FFN 16, 2 heads sharing 1 key/value
/// head, vocabulary 4, F32 tensors of the right dims.
pub fn tiny_llama(edit: impl FnOnce(&mut Vec<(&'static str, Vec<u8>)>)) -> Writer {
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

/// Everything a consumer does with a file, so corruption anywhere is
/// exercised: parse, every lookup, every decode.
pub fn use_everything(bytes: Vec<u8>) {
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
