//! GPT-2's byte-level alphabet: each of the 256 byte values is one
//! printable char, so that any byte string is a string of vocabulary
//! chars. Printable Latin-1 bytes (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) stand
//! for themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen)
//! take U+0100 onwards in byte order, so a space is `Ġ` and a newline `Ċ`.

/// The byte-level alphabet both ways.
#[derive(Debug)]
pub(crate) struct ByteLevel {
    to_char: [char; 256],
    /// By code point, below U+0144 (the last char of the alphabet).
    to_byte: [Option<u8>; 0x144],
}

impl ByteLevel {
    pub fn new() -> Self {
        let mut to_char = ['\0'; 256];
        let mut to_byte = [None; 0x144];
        let mut next = 256u32;
        for byte in 0..=255u8 {
            let printable = matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let code = if printable {
                u32::from(byte)
            } else {
                next += 1;
                next - 1
            };
            to_char[usize::from(byte)] = char::from_u32(code).expect("below U+0144");
            to_byte[code as usize] = Some(byte);
        }
        Self { to_char, to_byte }
    }

    /// The char that stands for `byte`.
    pub fn char_of(&self, byte: u8) -> char {
        self.to_char[usize::from(byte)]
    }

    /// The byte that `c` stands for, if it is in the alphabet.
    pub fn byte_of(&self, c: char) -> Option<u8> {
        *self.to_byte.get(c as usize)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        let alphabet = ByteLevel::new();
        assert_eq!(alphabet.char_of(b' '), 'Ġ');
        assert_eq!(alphabet.char_of(b'\n'), 'Ċ');
        assert_eq!(alphabet.char_of(b'a'), 'a');
        for byte in 0..=255u8 {
            assert_eq!(alphabet.byte_of(alphabet.char_of(byte)), Some(byte));
        }
        assert_eq!(alphabet.byte_of('€'), None);
        assert_eq!(alphabet.byte_of(' '), None);
    }
}
