"""Writes ids.json: Hugging Face `tokenizers` ids for all-MiniLM-L6-v2's
tokenizer on hand-picked hostile strings and seeded random ones, for
crates/hrx-models/tests/models/tokenizer.rs to compare hrx's tokenizer with.

Usage: python3 make_ids.py [MODEL_DIR]
(default: target/models/all-MiniLM-L6-v2 under the repository root;
needs `pip install tokenizers`). No padding; truncation at max_len, which is
256 (sentence-transformers' max_seq_length) unless a case says otherwise.
"""

import json
import pathlib
import random
import sys

import tokenizers

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[4]
MAX_LEN = 256

LONG_WORD = "pneumonoultramicroscopicsilicovolcanoconiosis" * 3  # 135 chars
LONG_TEXT = " ".join(
    "The quick brown fox jumps over the lazy dog; naïve café résumé №{}!".format(i)
    for i in range(40)
)

CURATED = [
    # plain English, numbers, casing
    "A man is eating food.",
    "The new movie is awesome!",
    "HELLO World, hello WORLD.",
    "It's 3:45pm on 2024-02-29; pi is 3.14159, e is 2.71828.",
    "1234567890 12,345.67 $100 €50 £20 ¥1000 100% 1e-9 0x1F",
    "unaffable unbelievably tokenization transformers",
    "running runner ran runs",
    "I can't won't shouldn't y'all",
    # accents and case mapping
    "Café naïve résumé coöperate façade",
    "Ñandú España mañana",
    "Åsa Ørsted Ærø",
    "Straße groß ẞ",
    "İstanbul ıi İI",
    "ǅemal ǈ ǋ Ǆ",
    "ﬁne ﬂow ﬃ",
    "Ωmega ΣΊΣΥΦΟΣ σοφός ς",
    "e\u0301 e\u0301\u0301 a\u0308o\u0308u\u0308",
    "\u0301\u0301 leading marks",
    "Z\u0351\u0360\u0363a\u0352l\u035cg\u0367o\u0344",
    "Å Å Å",  # precomposed, decomposed, angstrom sign
    # CJK, kana, hangul
    "我爱北京天安门",
    "中文 English 混合 text",
    "日本語のテキストです。カタカナ、ひらがな",
    "ｶﾀｶﾅ ﾊﾝｶｸ",
    "한국어 텍스트입니다. 안녕하세요!",
    "\u4e00\u9fff\u3400\u4dbf\U00020000\U0002a6df\U0002b820\U0002b920\uf900\ufaff\U0002f800",
    "豈更車",
    "〇〡〢",
    # emoji
    "I love 🍕 and 🍣!",
    "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ ☺︎",
    "🇫🇷🇯🇵 flags",
    "🥰🫠🪿 newer emoji",
    "emoji🙂glued🙃together",
    # control and invisible characters
    "null\x00byte bell\x07 esc\x1b del\x7f",
    "zero\u200bwidth\u200cjoiner\u200dnon\u2060word",
    "\ufeffBOM at start",
    "soft\u00adhyphen",
    "c1\x80\x85\x9fcontrols",
    "vertical\x0btab form\x0cfeed",
    "replacement\ufffdchar",
    "bidi \u202aembed\u202c \u200emark\u200f \u2066iso\u2069",
    "private \ue000\uf8ff \U000f0000 use",
    "noncharacters \ufdd0 \uffff \U0010ffff",
    "unassigned \u0378 \u0890 \U0001fb00",
    # whitespace
    "tabs\tand\nnewlines\r\nand\rreturns",
    "  leading and trailing  ",
    "nbsp\u00a0here en\u2002em\u2003thin\u2009hair\u200a",
    "ideographic\u3000space ogham\u1680mark narrow\u202fnbsp math\u205fspace",
    "line\u2028para\u2029sep",
    "many     spaces\t\t\t\n\n\n",
    # long words
    LONG_WORD,
    "a" * 100,
    "b" * 101,
    "x" * 99 + "é",
    "é" * 101,
    "word " + "z" * 250 + " word",
    # URLs, code, markup
    "https://example.com/path?query=1&x=y#frag",
    "mailto:someone@example.org",
    "fn main() { println!(\"{}\", 1 + 2); }",
    "if (a && b || !c) { x->y = z[i]; }",
    "<div class=\"x\">Hello &amp; bye</div>",
    "SELECT * FROM t WHERE a >= 1 AND b <> 'x';",
    "$ cargo test -p hrx-models --lib -- --nocapture",
    "C:\\Users\\name\\file.txt",
    # punctuation runs
    "!!!???...,,,;;;:::",
    "--- *** ___ ~~~ ^^^ ||| ```",
    "«guillemets» „quotes“ “curly” ‘single’",
    "¿Qué? ¡Hola! … — – ‐",
    "。、「」『』【】〜・",
    "§¶†‡•‰′″‴※",
    "@#$%^&*()_+-={}[]|\\:\";'<>?,./`~",
    # special tokens in the raw text
    "[CLS] [SEP] [MASK] [PAD] [UNK]",
    "hello[MASK]world",
    "[cls] [mask] lowercase is not special",
    "[CLS[SEP]]",
    "[MASK][MASK][MASK]",
    "[unused0] [unused99]",
    # other scripts
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "สวัสดีชาวโลก",
    "नमस्ते दुनिया। क्षत्रिय",
    "Γειά σου Κόσμε",
    "Привет, мир! Ёжик",
    "Բարեւ Ձեզ",
    "გამარჯობა",
    "ሰላም ለዓለም",
    "வணக்கம் உலகம்",
    "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ",
    "Xin chào thế giới",
    "Tiếng Việt có dấu: ặ ỗ ữ",
    "mixed العربية and English and 中文 and русский",
    # fullwidth and compatibility forms
    "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３！",
    "①②③ ⅰⅱⅲ ㎏㎞ ℃ ™ ½",
    "𝐁𝐨𝐥𝐝 𝕯𝖔𝖚𝖇𝖑𝖊 𝓢𝓬𝓻𝓲𝓹𝓽",
    # empty and degenerate
    "",
    " ",
    "\t\n\r ",
    "\x00\x01\x02",
    "\u200b\u200b",
    ".",
    "a",
    "é",
    "##",
    "##ing",
    # long text, truncated at 256
    LONG_TEXT,
    " ".join(["antidisestablishmentarianism"] * 60),
    "中" * 400,
]

# Truncation at other lengths: (text, max_len).
TRUNCATED = [
    ("hello world", 2),
    ("hello world", 3),
    ("unaffable unaffable", 4),
    (LONG_TEXT, 8),
    (LONG_TEXT, 128),
    ("[MASK] [MASK] [MASK]", 4),
]

# Seeded random strings over the character classes above.
CLASSES = {
    "ascii_letters": [chr(c) for c in range(0x41, 0x5B)] + [chr(c) for c in range(0x61, 0x7B)],
    "digits": list("0123456789"),
    "ascii_punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "space": [" "] * 6 + ["\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u2003", "\u3000", "\u2028", "\u1680"],
    "control": [chr(c) for c in list(range(0, 0x20)) + [0x7F] + list(range(0x80, 0xA0))],
    "format": ["\u200b", "\u200c", "\u200d", "\u200e", "\u2060", "\ufeff", "\u00ad", "\u061c", "\U000e0041"],
    "latin_accented": [chr(c) for c in range(0xC0, 0x250)],
    "combining": [chr(c) for c in range(0x300, 0x370)] + ["\u0483", "\u05b0", "\u064b", "\u093c", "\u20d7"],
    "greek": [chr(c) for c in range(0x391, 0x3CF)],
    "cyrillic": [chr(c) for c in range(0x400, 0x460)],
    "arabic": [chr(c) for c in range(0x621, 0x656)],
    "hebrew": [chr(c) for c in range(0x5D0, 0x5EB)],
    "thai": [chr(c) for c in range(0xE01, 0xE3B)],
    "devanagari": [chr(c) for c in range(0x900, 0x970)],
    "cjk": [chr(c) for c in range(0x4E00, 0x4F00)] + ["\u3400", "\U00020001", "\U0002b820", "\uf91f"],
    "kana": [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)],
    "hangul": [chr(c) for c in range(0xAC00, 0xAC40)] + [chr(c) for c in range(0x1100, 0x1113)],
    "emoji": [chr(c) for c in range(0x1F600, 0x1F650)] + ["\u2764", "\ufe0f", "\u200d", "\U0001F3FD", "\U0001FAE0"],
    "fullwidth": [chr(c) for c in range(0xFF01, 0xFF5F)],
    "unicode_punct": list("«»„“”‘’¿¡…—–‐。、「」・§¶†‡•※⁂⸘⸙⹂⹃⹄"),
    "special": ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[CLS", "MASK]"],
    "words": ["the", "running", "token", "ization", "##ing", "un", "hello", "world", "naïve", "東京"],
    "any": None,  # any Unicode scalar value
}


def random_char(rng, name):
    if name == "any":
        while True:
            c = rng.randrange(0x110000)
            if not 0xD800 <= c < 0xE000:
                return chr(c)
    return rng.choice(CLASSES[name])


def random_string(rng):
    # Each string draws from a few classes, so that words mix them the way
    # real (and hostile) text does.
    names = rng.sample(sorted(CLASSES), rng.randint(1, 4))
    length = rng.choice([0, 1, 2, 5, 10, 20, 40, 80, 150, 400])
    # Mostly short words: a long run of letters is a single [UNK].
    out = []
    for _ in range(length):
        out.append(random_char(rng, rng.choice(names)))
        if rng.random() < 0.2:
            out.append(" ")
    return "".join(out)


def main():
    model_dir = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target/models/all-MiniLM-L6-v2"
    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()

    def ids(text, max_len):
        tokenizer.enable_truncation(max_length=max_len)
        return tokenizer.encode(text).ids

    rng = random.Random(20240229)
    cases = [(text, MAX_LEN) for text in CURATED] + TRUNCATED
    cases += [(random_string(rng), MAX_LEN) for _ in range(500)]
    out = {
        "tokenizers_version": tokenizers.__version__,
        "model": "all-MiniLM-L6-v2",
        "cases": [{"text": text, "max_len": max_len, "ids": ids(text, max_len)} for text, max_len in cases],
    }
    # One case per line keeps diffs of the fixture readable.
    lines = ",\n".join("    " + json.dumps(case) for case in out.pop("cases"))
    header = json.dumps(out)[:-1]
    (HERE / "ids.json").write_text(f'{header}, "cases": [\n{lines}\n]}}\n')
    print(f"wrote {len(cases)} cases to {HERE / 'ids.json'}")


if __name__ == "__main__":
    main()
