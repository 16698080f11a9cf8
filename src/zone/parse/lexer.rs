//! The zone-file lexer: bytes → logical entries, one per record or directive. Handles blanks,
//! comments, quoting (escapes are kept for the field decoders), and parentheses that join
//! lines, and numbers every token with the line it is on.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Token {
    /// Raw text: without the surrounding quotes, escapes not yet decoded.
    pub(super) text: Vec<u8>,
    pub(super) quoted: bool,
    pub(super) line: u32,
    /// No blank separates it from the previous token (as in `alpn="h2,h3"`).
    pub(super) glued: bool,
}

impl Token {
    pub(super) fn shown(&self) -> String {
        String::from_utf8_lossy(&self.text).into_owned()
    }

    pub(super) fn is(&self, word: &str) -> bool {
        !self.quoted && self.text.eq_ignore_ascii_case(word.as_bytes())
    }
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) line: u32,
    /// The entry's first line starts with a non-blank, i.e. it names its owner.
    pub(super) has_owner: bool,
    pub(super) tokens: Vec<Token>,
}

/// A problem at a line of the file being lexed or parsed.
#[derive(Debug)]
pub(super) struct Fault {
    pub(super) line: u32,
    pub(super) message: String,
}

pub(super) fn fault(line: u32, message: impl Into<String>) -> Fault {
    Fault {
        line,
        message: message.into(),
    }
}

pub(super) struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    line: u32,
}

impl<'a> Lexer<'a> {
    pub(super) fn new(src: &'a [u8]) -> Self {
        Self {
            src,
            pos: 0,
            line: 1,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    /// Next logical entry, `None` at the end of input.
    pub(super) fn next_entry(&mut self) -> Option<Result<Entry, Fault>> {
        let mut tokens: Vec<Token> = Vec::new();
        let mut entry_line = self.line;
        let mut has_owner = false;
        let mut open_paren: Option<u32> = None;
        let mut at_line_start = true;
        loop {
            if at_line_start && open_paren.is_none() && tokens.is_empty() {
                entry_line = self.line;
                has_owner = self.peek().is_some_and(|b| !matches!(b, b' ' | b'\t'));
            }
            at_line_start = false;
            let glued_to_previous = !tokens.is_empty() && self.follows_text();
            let Some(byte) = self.peek() else {
                if let Some(opened) = open_paren {
                    return Some(Err(fault(opened, "'(' is never closed")));
                }
                return (!tokens.is_empty()).then_some(Ok(Entry {
                    line: entry_line,
                    has_owner,
                    tokens,
                }));
            };
            match byte {
                b'\n' => {
                    self.pos += 1;
                    self.line = self.line.saturating_add(1);
                    at_line_start = true;
                    if open_paren.is_none() && !tokens.is_empty() {
                        return Some(Ok(Entry {
                            line: entry_line,
                            has_owner,
                            tokens,
                        }));
                    }
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b';' => self.skip_to_line_end(),
                b'(' => {
                    self.pos += 1;
                    if open_paren.is_some() {
                        return Some(Err(
                            self.recover(fault(self.line, "nested '(' is not allowed"))
                        ));
                    }
                    open_paren = Some(self.line);
                }
                b')' => {
                    self.pos += 1;
                    if open_paren.take().is_none() {
                        return Some(Err(
                            self.recover(fault(self.line, "')' without a matching '('"))
                        ));
                    }
                }
                b'"' => match self.quoted() {
                    Ok(token) => tokens.push(Token {
                        glued: glued_to_previous,
                        ..token
                    }),
                    Err(problem) => return Some(Err(self.recover(problem))),
                },
                _ => match self.word() {
                    Ok(token) => tokens.push(Token {
                        glued: glued_to_previous,
                        ..token
                    }),
                    Err(problem) => return Some(Err(self.recover(problem))),
                },
            }
        }
    }

    /// The byte before the cursor belongs to a token (no blank in between).
    fn follows_text(&self) -> bool {
        let previous = self.pos.checked_sub(1).and_then(|i| self.src.get(i));
        previous.is_some_and(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'(' | b')'))
    }

    /// After a lexing error, drop the rest of the physical line so parsing can go on.
    fn recover(&mut self, problem: Fault) -> Fault {
        self.skip_to_line_end();
        problem
    }

    fn skip_to_line_end(&mut self) {
        while self.peek().is_some_and(|b| b != b'\n') {
            self.pos += 1;
        }
    }

    fn quoted(&mut self) -> Result<Token, Fault> {
        let line = self.line;
        self.pos += 1; // opening quote
        let start = self.pos;
        loop {
            match self.peek() {
                None | Some(b'\n') => return Err(fault(line, "unterminated quoted string")),
                Some(b'"') => break,
                Some(b'\\') => {
                    self.pos += 1;
                    if matches!(self.peek(), None | Some(b'\n')) {
                        return Err(fault(
                            line,
                            "unterminated quoted string (ends in a backslash)",
                        ));
                    }
                    self.pos += 1;
                }
                Some(_) => self.pos += 1,
            }
        }
        let text = self.src[start..self.pos].to_vec();
        self.pos += 1; // closing quote
        Ok(Token {
            text,
            quoted: true,
            line,
            glued: false,
        })
    }

    fn word(&mut self) -> Result<Token, Fault> {
        let line = self.line;
        let start = self.pos;
        while let Some(byte) = self.peek() {
            match byte {
                b' ' | b'\t' | b'\r' | b'\n' | b';' | b'(' | b')' | b'"' => break,
                b'\\' => {
                    self.pos += 1;
                    // An escaped special character belongs to the word; a trailing backslash is
                    // reported when the word is decoded.
                    if self.peek().is_some_and(|b| b != b'\n') {
                        self.pos += 1;
                    }
                }
                control if control < 0x20 || control == 0x7f => {
                    return Err(fault(
                        line,
                        format!("control character 0x{control:02x} in the text"),
                    ));
                }
                _ => self.pos += 1,
            }
        }
        Ok(Token {
            text: self.src[start..self.pos].to_vec(),
            quoted: false,
            line,
            glued: false,
        })
    }
}
