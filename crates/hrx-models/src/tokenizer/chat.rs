//! Chat templates: a conversation to the prompt text a chat model was
//! trained on.
//!
//! Models ship their template as Jinja source (GGUF's
//! `tokenizer.chat_template`). hrx does not run Jinja: it recognises the
//! ChatML family of templates by their structure and renders them in
//! Rust, byte for byte as the template would. Recognition compares the
//! template's tags with whitespace inside tags ignored, string literals
//! compared by value (either quote, escapes decoded, adjacent literals
//! joined with `+` merged), and text between tags required to be empty;
//! any other template is an error, never a guess. Two forms are known:
//!
//! - plain ChatML: each message as `<|im_start|>{role}\n{content}<|im_end|>\n`,
//!   then `<|im_start|>assistant\n` when a generation prompt is asked for;
//! - ChatML with a default system prompt (SmolLM2's): the same, with
//!   `<|im_start|>system\n{default}<|im_end|>\n` first when the first
//!   message is not a system message.
//!
//! Roles and contents are written as they are, as the template does:
//! special tokens in a message's content are not escaped.

use hrx_core::{Error, Result};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant` (any role is rendered as given).
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A recognised chat template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatTemplate {
    /// The system prompt put first when the conversation has none.
    default_system: Option<String>,
}

/// A lexical piece of a template's tag: a string literal by value, or
/// any other char (whitespace dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Lexeme {
    Literal(String),
    Char(char),
}

/// A template as a sequence of tags: `{% ... %}` or `{{ ... }}`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tag {
    statement: bool,
    body: Vec<Lexeme>,
}

const FOR: &str = "{% for message in messages %}";
const IF_NO_SYSTEM: &str = "{% if loop.first and messages[0]['role'] != 'system' %}";
const MESSAGE: &str =
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}";
const END_FOR: &str = "{% endfor %}";
const IF_GENERATION: &str = "{% if add_generation_prompt %}";
const GENERATION: &str = "{{ '<|im_start|>assistant\n' }}";
const END_IF: &str = "{% endif %}";
const SYSTEM_START: &str = "<|im_start|>system\n";
const SYSTEM_END: &str = "<|im_end|>\n";

impl ChatTemplate {
    /// Recognises `source`, a Jinja chat template; anything but the ChatML
    /// forms of the module's contract is an error.
    pub fn parse(source: &str) -> Result<Self> {
        let unknown = |why: &str| {
            Error::Unsupported(format!(
                "chat template not recognised ({why}); the ChatML forms are rendered"
            ))
        };
        let found = tags(source).map_err(|why| unknown(&why))?;
        let expect = |sources: &[&str]| -> Vec<Tag> {
            sources
                .iter()
                .flat_map(|s| tags(s).expect("the known forms parse"))
                .collect()
        };
        let tail = expect(&[MESSAGE, END_FOR, IF_GENERATION, GENERATION, END_IF]);
        if found == [expect(&[FOR]), tail.clone()].concat() {
            return Ok(Self {
                default_system: None,
            });
        }
        // FOR, IF_NO_SYSTEM, {{ '<|im_start|>system\n...<|im_end|>\n' }}, END_IF, tail.
        let head = expect(&[FOR, IF_NO_SYSTEM]);
        let with_system = found.len() == head.len() + 2 + tail.len()
            && found.starts_with(&head)
            && found.ends_with(&tail)
            && found[head.len() + 1] == expect(&[END_IF])[0];
        if with_system
            && let Tag {
                statement: false,
                body,
            } = &found[head.len()]
            && let [Lexeme::Literal(text)] = body.as_slice()
            && let Some(prompt) = text
                .strip_prefix(SYSTEM_START)
                .and_then(|t| t.strip_suffix(SYSTEM_END))
        {
            return Ok(Self {
                default_system: Some(prompt.to_owned()),
            });
        }
        Err(unknown("not a ChatML form"))
    }

    /// The template of a GGUF file (`tokenizer.chat_template`); a file
    /// without one is an error naming the key.
    pub fn from_gguf(meta: &crate::gguf::Metadata) -> Result<Self> {
        Self::parse(meta.string("tokenizer.chat_template")?)
    }

    /// The system prompt added when a conversation has none.
    pub fn default_system_prompt(&self) -> Option<&str> {
        self.default_system.as_deref()
    }

    /// The prompt text of `messages`, ending with the assistant's turn
    /// opened when `add_generation_prompt`.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        let mut out = String::new();
        for (index, message) in messages.iter().enumerate() {
            if let Some(system) = &self.default_system
                && index == 0
                && message.role != "system"
            {
                out.push_str(SYSTEM_START);
                out.push_str(system);
                out.push_str(SYSTEM_END);
            }
            for part in [
                "<|im_start|>",
                &message.role,
                "\n",
                &message.content,
                "<|im_end|>\n",
            ] {
                out.push_str(part);
            }
        }
        if add_generation_prompt {
            out.push_str("<|im_start|>assistant\n");
        }
        out
    }
}

/// The tags of `source`, or why it is not a sequence of tags.
fn tags(source: &str) -> std::result::Result<Vec<Tag>, String> {
    let mut out = Vec::new();
    let mut rest = source;
    while !rest.is_empty() {
        let (statement, close) = if rest.starts_with("{%") {
            (true, "%}")
        } else if rest.starts_with("{{") {
            (false, "}}")
        } else {
            let at = source.len() - rest.len();
            return Err(format!("text outside a tag at byte {at}"));
        };
        let (body, after) = lex(&rest[2..], close)?;
        out.push(Tag { statement, body });
        rest = after;
    }
    Ok(out)
}

/// The lexemes of a tag body up to `close`, and the text after it.
fn lex<'s>(mut rest: &'s str, close: &str) -> std::result::Result<(Vec<Lexeme>, &'s str), String> {
    let mut body = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix(close) {
            return Ok((merge_concatenations(body), after));
        }
        let c = rest.chars().next().ok_or("an unclosed tag")?;
        rest = &rest[c.len_utf8()..];
        match c {
            '\'' | '"' => {
                let (literal, after) = string_literal(rest, c)?;
                body.push(Lexeme::Literal(literal));
                rest = after;
            }
            // Jinja's whitespace control changes the output: not ChatML.
            '-' if body.is_empty() => return Err("whitespace control".into()),
            c if c.is_whitespace() => {}
            c => body.push(Lexeme::Char(c)),
        }
    }
}

/// A string literal's value (after its opening `quote`) and what follows.
fn string_literal(rest: &str, quote: char) -> std::result::Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = rest.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c == quote => return Ok((value, &rest[at + 1..])),
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('n') => value.push('\n'),
                Some('t') => value.push('\t'),
                Some('r') => value.push('\r'),
                Some(e @ ('\\' | '\'' | '"')) => value.push(e),
                other => return Err(format!("the escape \\{other:?} in a string")),
            },
            c => value.push(c),
        }
    }
    Err("an unterminated string".into())
}

/// `'a' + 'b'` as `'ab'`: templates differ in how they cut literals.
fn merge_concatenations(body: Vec<Lexeme>) -> Vec<Lexeme> {
    let mut out: Vec<Lexeme> = Vec::with_capacity(body.len());
    for lexeme in body {
        if let Lexeme::Literal(next) = &lexeme
            && let [.., Lexeme::Literal(previous), Lexeme::Char('+')] = out.as_mut_slice()
        {
            previous.push_str(next);
            out.pop();
            continue;
        }
        out.push(lexeme);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn recognises_smollm2_and_renders_it() {
        let template = ChatTemplate::parse(SMOLLM2).unwrap();
        assert_eq!(
            template.default_system_prompt(),
            Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
        );
        let user = [ChatMessage::new("user", "Hi")];
        assert_eq!(
            template.render(&user, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ];
        assert_eq!(
            template.render(&with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
        assert_eq!(template.render(&[], true), "<|im_start|>assistant\n");
    }

    #[test]
    fn recognises_plain_chatml_written_differently() {
        let source = "{%for message in messages%}{{ \"<|im_start|>\" + message['role'] + \"\\n\" + message['content'] + \"<|im_end|>\\n\" }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>' + 'assistant\\n' }}{% endif %}";
        let template = ChatTemplate::parse(source).unwrap();
        assert_eq!(template.default_system_prompt(), None);
        let user = [ChatMessage::new("user", "Hi")];
        assert_eq!(
            template.render(&user, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn other_templates_are_errors() {
        for source in [
            "",
            "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}",
            &SMOLLM2.replace("{% endfor %}", "{% endfor %}\n"),
            &SMOLLM2.replace("{% endfor %}", "{%- endfor %}"),
            &SMOLLM2.replace("'\n'", "'\n\n'"),
            &SMOLLM2[..SMOLLM2.len() - 3],
            "{{ 'unterminated }}",
        ] {
            let error = ChatTemplate::parse(source).unwrap_err();
            assert!(
                matches!(error, Error::Unsupported(_)),
                "{source:?}: {error}"
            );
        }
    }
}
