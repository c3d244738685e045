//! Command lines split into statements and words the way `sh -c`, `powershell -Command` and
//! `cmd /c` would, for the small subset the emulation runs: quoting, escapes, comments and
//! statement separators. What the emulation cannot do (pipes, redirections, substitutions) is
//! refused with a reason rather than misread.

/// Which shell's rules split a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Syntax {
    /// POSIX sh: `'…'`, `"…"` with `\` escapes, `\x`, `#` comments; `;`, `&&`, `||`, newline.
    Sh,
    /// PowerShell: `'…'` (`''`), `"…"` with backtick escapes, `@{…}` kept as one word, `#`
    /// comments; `;`, newline (and PowerShell 7's `&&`, `||`); `(cmd …).Property` and
    /// `| Select-Object -ExpandProperty P`; `| Format-List` and the like are ignored.
    PowerShell,
    /// cmd.exe: `"…"` (quotes stripped), `^x`; `&`, `&&`, `||`.
    Cmd,
}

/// When a statement runs, given how the previous one ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Joiner {
    /// First statement, or after `;`, `&` (cmd) or a newline.
    Always,
    /// After `&&`.
    IfSucceeded,
    /// After `||`.
    IfFailed,
}

/// One command of a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Statement {
    pub(super) joiner: Joiner,
    pub(super) argv: Vec<String>,
    /// PowerShell: the property asked for with `(…).P` or `| Select-Object -ExpandProperty P`.
    pub(super) select: Option<String>,
    /// The statement as written, for PowerShell's error positions.
    pub(super) text: String,
}

/// Why a line cannot be run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum SyntaxError {
    #[error("missing closing {0}")]
    Unterminated(char),
    #[error("{0} are not emulated")]
    Unsupported(&'static str),
    #[error("unexpected {0:?}")]
    Unexpected(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Separator(Joiner),
    Pipe,
    Open,
    Close,
    /// `.Name` right after `)`.
    Member(String),
}

/// Splits `line` into statements, dropping empty ones.
pub(super) fn split(syntax: Syntax, line: &str) -> Result<Vec<Statement>, SyntaxError> {
    let chars: Vec<char> = line.chars().collect();
    let tokens = Scanner {
        syntax,
        chars: &chars,
        pos: 0,
    }
    .tokens()?;
    let mut statements = Vec::new();
    let mut joiner = Joiner::Always;
    let mut current: Vec<(Token, usize, usize)> = Vec::new();
    for (token, start, end) in tokens {
        if let Token::Separator(next) = token {
            if let Some(statement) = build(syntax, &chars, std::mem::take(&mut current), joiner)? {
                statements.push(statement);
            } else if next != Joiner::Always {
                return Err(SyntaxError::Unexpected(
                    if next == Joiner::IfSucceeded {
                        "&&"
                    } else {
                        "||"
                    }
                    .to_string(),
                ));
            }
            joiner = next;
        } else {
            current.push((token, start, end));
        }
    }
    if let Some(statement) = build(syntax, &chars, current, joiner)? {
        statements.push(statement);
    }
    Ok(statements)
}

/// One statement from its tokens: words, and for PowerShell a `(…)` group, a member and pipes.
fn build(
    syntax: Syntax,
    chars: &[char],
    tokens: Vec<(Token, usize, usize)>,
    joiner: Joiner,
) -> Result<Option<Statement>, SyntaxError> {
    let (Some(first), Some(last)) = (tokens.first(), tokens.last()) else {
        return Ok(None);
    };
    let text: String = chars[first.1..last.2].iter().collect();
    let mut segments: Vec<Vec<Token>> = vec![Vec::new()];
    for (token, _, _) in tokens {
        if token == Token::Pipe {
            segments.push(Vec::new());
        } else if let Some(segment) = segments.last_mut() {
            segment.push(token);
        }
    }
    let mut segments = segments.into_iter();
    let head = segments.next().unwrap_or_default();
    let (argv, mut select) = head_words(head)?;
    if argv.is_empty() {
        return Err(SyntaxError::Unexpected(text));
    }
    for segment in segments {
        if syntax != Syntax::PowerShell {
            return Err(SyntaxError::Unsupported("pipes"));
        }
        let words = segment
            .into_iter()
            .map(|t| match t {
                Token::Word(w) => Ok(w),
                _ => Err(SyntaxError::Unsupported("subexpressions after a pipe")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(property) = pipeline_select(&words)? {
            select = Some(property);
        }
    }
    Ok(Some(Statement {
        joiner,
        argv,
        select,
        text,
    }))
}

/// The words of a pipeline's first command; `(cmd …).Member` gives the member too.
fn head_words(tokens: Vec<Token>) -> Result<(Vec<String>, Option<String>), SyntaxError> {
    let mut argv = Vec::new();
    let mut select = None;
    let mut tokens = tokens.into_iter().peekable();
    if tokens.peek() == Some(&Token::Open) {
        tokens.next();
        loop {
            match tokens.next() {
                Some(Token::Word(w)) => argv.push(w),
                Some(Token::Close) => break,
                Some(_) => return Err(SyntaxError::Unsupported("nested subexpressions")),
                None => return Err(SyntaxError::Unterminated(')')),
            }
        }
        match tokens.next() {
            Some(Token::Member(m)) => select = Some(m),
            None => {}
            Some(other) => return Err(SyntaxError::Unexpected(describe(&other))),
        }
        if let Some(other) = tokens.next() {
            return Err(SyntaxError::Unexpected(describe(&other)));
        }
        return Ok((argv, select));
    }
    for token in tokens {
        match token {
            Token::Word(w) => argv.push(w),
            Token::Open | Token::Close | Token::Member(_) => {
                return Err(SyntaxError::Unsupported("subexpressions"));
            }
            Token::Separator(_) | Token::Pipe => {}
        }
    }
    Ok((argv, select))
}

fn describe(token: &Token) -> String {
    match token {
        Token::Word(w) => w.clone(),
        Token::Separator(_) => ";".to_string(),
        Token::Pipe => "|".to_string(),
        Token::Open => "(".to_string(),
        Token::Close => ")".to_string(),
        Token::Member(m) => format!(".{m}"),
    }
}

/// What a PowerShell pipeline stage after the first does: `Select-Object -ExpandProperty P`
/// (or `select -exp P`, `select P`) picks a property; formatting and `Out-*` stages change
/// nothing here.
fn pipeline_select(words: &[String]) -> Result<Option<String>, SyntaxError> {
    let Some(command) = words.first() else {
        return Err(SyntaxError::Unexpected("|".to_string()));
    };
    let command = command.to_ascii_lowercase();
    match command.as_str() {
        "select-object" | "select" => {
            let mut property = None;
            let mut rest = words[1..].iter();
            while let Some(word) = rest.next() {
                let lower = word.to_ascii_lowercase();
                if lower.len() > 1 && "-expandproperty".starts_with(&lower)
                    || lower.len() > 1 && "-property".starts_with(&lower)
                {
                    property = rest.next().cloned();
                } else if !word.starts_with('-') {
                    property = Some(word.clone());
                }
            }
            match property {
                Some(p) => Ok(Some(p)),
                None => Err(SyntaxError::Unsupported("this Select-Object form")),
            }
        }
        "format-list" | "fl" | "format-table" | "ft" | "out-string" | "out-host"
        | "out-default" => Ok(None),
        _ => Err(SyntaxError::Unsupported(
            "pipes other than Select-Object -ExpandProperty",
        )),
    }
}

struct Scanner<'a> {
    syntax: Syntax,
    chars: &'a [char],
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    /// All tokens with their character spans.
    fn tokens(mut self) -> Result<Vec<(Token, usize, usize)>, SyntaxError> {
        let mut tokens = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut word_start = 0;
        let mut after_close = false;
        macro_rules! finish_word {
            () => {
                if in_word {
                    tokens.push((Token::Word(std::mem::take(&mut word)), word_start, self.pos));
                    in_word = false;
                }
            };
        }
        while let Some(c) = self.peek() {
            let start = self.pos;
            if !in_word {
                word_start = start;
            }
            if after_close && c == '.' && self.syntax == Syntax::PowerShell {
                self.pos += 1;
                let mut member = String::new();
                while let Some(m) = self.peek().filter(|m| m.is_alphanumeric() || *m == '_') {
                    member.push(m);
                    self.pos += 1;
                }
                tokens.push((Token::Member(member), start, self.pos));
                after_close = false;
                continue;
            }
            after_close = false;
            match (self.syntax, c) {
                (_, ' ' | '\t') => {
                    finish_word!();
                    self.pos += 1;
                }
                (_, '\n' | '\r') => {
                    finish_word!();
                    self.pos += 1;
                    tokens.push((Token::Separator(Joiner::Always), start, self.pos));
                }
                (Syntax::Sh | Syntax::PowerShell, '#') if !in_word => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                (Syntax::Sh | Syntax::PowerShell, ';') => {
                    finish_word!();
                    self.pos += 1;
                    tokens.push((Token::Separator(Joiner::Always), start, self.pos));
                }
                (_, '&') if self.peek_at(1) == Some('&') => {
                    finish_word!();
                    self.pos += 2;
                    tokens.push((Token::Separator(Joiner::IfSucceeded), start, self.pos));
                }
                (_, '|') if self.peek_at(1) == Some('|') => {
                    finish_word!();
                    self.pos += 2;
                    tokens.push((Token::Separator(Joiner::IfFailed), start, self.pos));
                }
                (_, '|') => {
                    finish_word!();
                    self.pos += 1;
                    tokens.push((Token::Pipe, start, self.pos));
                }
                (Syntax::Cmd, '&') => {
                    finish_word!();
                    self.pos += 1;
                    tokens.push((Token::Separator(Joiner::Always), start, self.pos));
                }
                (Syntax::PowerShell, '&') if !in_word && self.at_statement_start(&tokens) => {
                    // The call operator: `& 'C:\curl.exe' …` runs its first argument.
                    self.pos += 1;
                }
                (Syntax::Sh, '&') => return Err(SyntaxError::Unsupported("background jobs")),
                (Syntax::PowerShell, '&') => return Err(SyntaxError::Unexpected("&".to_string())),
                (_, '>' | '<') => return Err(SyntaxError::Unsupported("redirections")),
                (Syntax::Sh, '`') => return Err(SyntaxError::Unsupported("command substitutions")),
                (Syntax::Sh, '$') if self.peek_at(1) == Some('(') => {
                    return Err(SyntaxError::Unsupported("command substitutions"));
                }
                (Syntax::Sh, '(' | ')') => return Err(SyntaxError::Unsupported("subshells")),
                (Syntax::PowerShell, '$' | '@') if self.peek_at(1) == Some('(') => {
                    return Err(SyntaxError::Unsupported("subexpressions"));
                }
                (Syntax::PowerShell, '@') if self.peek_at(1) == Some('{') => {
                    in_word = true;
                    self.hashtable(&mut word)?;
                }
                (Syntax::PowerShell, '{' | '}') => {
                    return Err(SyntaxError::Unsupported("script blocks"));
                }
                (Syntax::PowerShell, '(') if !in_word => {
                    self.pos += 1;
                    tokens.push((Token::Open, start, self.pos));
                }
                (Syntax::PowerShell, ')') => {
                    finish_word!();
                    self.pos += 1;
                    tokens.push((Token::Close, start, self.pos));
                    after_close = true;
                }
                (Syntax::Sh, '\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(next) => {
                            in_word = true;
                            word.push(next);
                            self.pos += 1;
                        }
                        None => {}
                    }
                }
                (Syntax::PowerShell, '`') => {
                    self.pos += 1;
                    if let Some(next) = self.peek() {
                        in_word = true;
                        word.push(next);
                        self.pos += 1;
                    }
                }
                (Syntax::Cmd, '^') => {
                    self.pos += 1;
                    if let Some(next) = self.peek() {
                        in_word = true;
                        word.push(next);
                        self.pos += 1;
                    }
                }
                (_, '\'') if self.syntax != Syntax::Cmd => {
                    in_word = true;
                    self.single_quoted(&mut word)?;
                }
                (_, '"') => {
                    in_word = true;
                    self.double_quoted(&mut word)?;
                }
                (_, c) => {
                    in_word = true;
                    word.push(c);
                    self.pos += 1;
                }
            }
        }
        if in_word {
            tokens.push((Token::Word(word), word_start, self.pos));
        }
        Ok(tokens)
    }

    /// Whether nothing but separators came before in this statement.
    fn at_statement_start(&self, tokens: &[(Token, usize, usize)]) -> bool {
        matches!(tokens.last(), None | Some((Token::Separator(_), _, _)))
    }

    /// `'…'`: literal; PowerShell doubles `''` for a quote.
    fn single_quoted(&mut self, word: &mut String) -> Result<(), SyntaxError> {
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err(SyntaxError::Unterminated('\'')),
                Some('\'') => {
                    self.pos += 1;
                    if self.syntax == Syntax::PowerShell && self.peek() == Some('\'') {
                        word.push('\'');
                        self.pos += 1;
                    } else {
                        return Ok(());
                    }
                }
                Some(c) => {
                    word.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `"…"`: sh escapes `\"`, `\\`, `\$`, `` \` ``; PowerShell escapes with a backtick (`` `n ``,
    /// `` `t ``, `` `0 ``, anything else literally) and doubles `""`; cmd has no escapes.
    fn double_quoted(&mut self, word: &mut String) -> Result<(), SyntaxError> {
        self.pos += 1;
        loop {
            let Some(c) = self.peek() else {
                return if self.syntax == Syntax::Cmd {
                    Ok(())
                } else {
                    Err(SyntaxError::Unterminated('"'))
                };
            };
            self.pos += 1;
            match (self.syntax, c) {
                (Syntax::PowerShell, '"') if self.peek() == Some('"') => {
                    word.push('"');
                    self.pos += 1;
                }
                (_, '"') => return Ok(()),
                (Syntax::Sh, '\\') => match self.peek() {
                    Some(next @ ('"' | '\\' | '$' | '`')) => {
                        word.push(next);
                        self.pos += 1;
                    }
                    Some('\n') => self.pos += 1,
                    _ => word.push('\\'),
                },
                (Syntax::Sh, '`') => return Err(SyntaxError::Unsupported("command substitutions")),
                (Syntax::Sh, '$') if self.peek() == Some('(') => {
                    return Err(SyntaxError::Unsupported("command substitutions"));
                }
                (Syntax::PowerShell, '$') if self.peek() == Some('(') => {
                    return Err(SyntaxError::Unsupported("subexpressions"));
                }
                (Syntax::PowerShell, '`') => {
                    if let Some(next) = self.peek() {
                        self.pos += 1;
                        word.push(match next {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            '0' => '\0',
                            other => other,
                        });
                    }
                }
                (_, c) => word.push(c),
            }
        }
    }

    /// `@{ … }` kept verbatim (quotes and nesting included) as one word.
    fn hashtable(&mut self, word: &mut String) -> Result<(), SyntaxError> {
        let mut depth = 0usize;
        let mut quote: Option<char> = None;
        while let Some(c) = self.peek() {
            word.push(c);
            self.pos += 1;
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '{') => depth += 1,
                (None, '}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        Err(SyntaxError::Unterminated('}'))
    }
}

/// A PowerShell hashtable literal `@{K="V"; K2='V2'}` as ordered pairs; `None` when `text` is
/// not one.
pub(super) fn parse_hashtable(text: &str) -> Option<Vec<(String, String)>> {
    let inner = text.trim().strip_prefix("@{")?.strip_suffix('}')?;
    let mut pairs = Vec::new();
    let mut entry = String::new();
    let mut entries = Vec::new();
    let mut quote: Option<char> = None;
    for c in inner.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                entry.push(c);
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                entry.push(c);
            }
            (None, ';' | '\n') => entries.push(std::mem::take(&mut entry)),
            _ => entry.push(c),
        }
    }
    entries.push(entry);
    for entry in entries {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let (key, value) = entry.split_once('=')?;
        pairs.push((unquote(key.trim()), unquote(value.trim())));
    }
    Some(pairs)
}

/// `'x'` or `"x"` without its quotes; anything else as is.
fn unquote(text: &str) -> String {
    for q in ['\'', '"'] {
        if let Some(inner) = text.strip_prefix(q).and_then(|t| t.strip_suffix(q))
            && text.len() >= 2
        {
            return inner.to_string();
        }
    }
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argvs(syntax: Syntax, line: &str) -> Vec<Vec<String>> {
        split(syntax, line)
            .unwrap_or_else(|e| panic!("{line:?}: {e}"))
            .into_iter()
            .map(|s| s.argv)
            .collect()
    }

    #[test]
    fn sh_quotes_escapes_and_separators() {
        assert_eq!(
            argvs(
                Syntax::Sh,
                r#"echo 'a b' "c \"d\"" e\ f; true && false || echo x # no"#
            ),
            vec![
                vec!["echo", "a b", "c \"d\"", "e f"],
                vec!["true"],
                vec!["false"],
                vec!["echo", "x"],
            ]
        );
        let statements = split(Syntax::Sh, "a && b || c").expect("splits");
        let joiners: Vec<Joiner> = statements.iter().map(|s| s.joiner).collect();
        assert_eq!(
            joiners,
            [Joiner::Always, Joiner::IfSucceeded, Joiner::IfFailed]
        );
        assert_eq!(argvs(Syntax::Sh, r#"echo """#), vec![vec!["echo", ""]]);
    }

    #[test]
    fn sh_refuses_what_it_cannot_run() {
        assert_eq!(
            split(Syntax::Sh, "a | b"),
            Err(SyntaxError::Unsupported("pipes"))
        );
        assert_eq!(
            split(Syntax::Sh, "a > f"),
            Err(SyntaxError::Unsupported("redirections"))
        );
        assert_eq!(
            split(Syntax::Sh, "echo $(hostname)"),
            Err(SyntaxError::Unsupported("command substitutions"))
        );
        assert_eq!(
            split(Syntax::Sh, "echo 'x"),
            Err(SyntaxError::Unterminated('\''))
        );
    }

    #[test]
    fn powershell_quotes_hashtables_and_members() {
        assert_eq!(
            argvs(
                Syntax::PowerShell,
                r#"iwr -Uri "http://w/`"x`"" -Headers @{Host="a; b"} 'it''s'; hostname"#
            ),
            vec![
                vec![
                    "iwr",
                    "-Uri",
                    "http://w/\"x\"",
                    "-Headers",
                    "@{Host=\"a; b\"}",
                    "it's"
                ],
                vec!["hostname"],
            ]
        );
        let statements = split(
            Syntax::PowerShell,
            "(iwr http://web -UseBasicParsing).Content",
        )
        .expect("ok");
        assert_eq!(
            statements[0].argv,
            ["iwr", "http://web", "-UseBasicParsing"]
        );
        assert_eq!(statements[0].select.as_deref(), Some("Content"));
        let statements = split(
            Syntax::PowerShell,
            "iwr http://web | Select-Object -ExpandProperty StatusCode | Out-String",
        )
        .expect("ok");
        assert_eq!(statements[0].select.as_deref(), Some("StatusCode"));
        assert_eq!(
            argvs(Syntax::PowerShell, "& 'C:\\Windows\\curl.exe' -s x"),
            vec![vec!["C:\\Windows\\curl.exe", "-s", "x"]]
        );
        assert_eq!(
            split(Syntax::PowerShell, "iwr x | Where-Object y"),
            Err(SyntaxError::Unsupported(
                "pipes other than Select-Object -ExpandProperty"
            ))
        );
    }

    #[test]
    fn cmd_separators_and_carets() {
        assert_eq!(
            argvs(Syntax::Cmd, r#"echo "a b" ^& c & hostname && ping -n 1 x"#),
            vec![
                vec!["echo", "a b", "&", "c"],
                vec!["hostname"],
                vec!["ping", "-n", "1", "x"],
            ]
        );
    }

    #[test]
    fn hashtables_become_pairs() {
        assert_eq!(
            parse_hashtable(r#"@{ "Host" = "web"; Accept='text/plain' }"#),
            Some(vec![
                ("Host".to_string(), "web".to_string()),
                ("Accept".to_string(), "text/plain".to_string()),
            ])
        );
        assert_eq!(parse_hashtable("nope"), None);
    }
}
