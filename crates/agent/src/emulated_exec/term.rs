//! The exec streams as a terminal: output that becomes `\r\n` on a TTY, and line input with the
//! editing a TTY's line discipline would do (echo, Backspace, Ctrl-C, Ctrl-D).

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::ExecIo;

/// Longest input line kept; the rest of a longer line is dropped.
const MAX_LINE_BYTES: usize = 64 << 10;
const CTRL_C: u8 = 0x03;
const CTRL_D: u8 = 0x04;
const BACKSPACE: u8 = 0x08;
const DELETE: u8 = 0x7f;
const ESC: u8 = 0x1b;

/// Both halves of the exec streams.
pub(super) struct Term {
    pub(super) out: Output,
    pub(super) input: Input,
}

impl Term {
    pub(super) fn new(io: ExecIo) -> Self {
        Self {
            out: Output {
                stdout: io.stdout,
                stderr: io.stderr,
                tty: io.tty,
            },
            input: Input {
                rx: io.stdin,
                pending: VecDeque::new(),
                tty: io.tty,
            },
        }
    }
}

/// Where output goes. Writes to a closed stream are dropped: the client went away.
#[derive(Clone)]
pub(super) struct Output {
    stdout: mpsc::Sender<Bytes>,
    stderr: mpsc::Sender<Bytes>,
    tty: bool,
}

impl Output {
    pub(super) async fn out(&self, text: &str) {
        self.out_bytes(text.as_bytes()).await;
    }

    pub(super) async fn err(&self, text: &str) {
        let bytes = self.translate(text.as_bytes());
        if !bytes.is_empty() {
            let _ = self.stderr.send(bytes).await;
        }
    }

    /// Raw bytes (an HTTP body) on stdout.
    pub(super) async fn out_bytes(&self, bytes: &[u8]) {
        let bytes = self.translate(bytes);
        if !bytes.is_empty() {
            let _ = self.stdout.send(bytes).await;
        }
    }

    /// On a TTY, `\n` becomes `\r\n` as a pty's ONLCR would do it.
    fn translate(&self, bytes: &[u8]) -> Bytes {
        if !self.tty || !bytes.contains(&b'\n') {
            return Bytes::copy_from_slice(bytes);
        }
        let mut translated = Vec::with_capacity(bytes.len() + bytes.len() / 16);
        let mut previous = 0u8;
        for &b in bytes {
            if b == b'\n' && previous != b'\r' {
                translated.push(b'\r');
            }
            translated.push(b);
            previous = b;
        }
        Bytes::from(translated)
    }
}

/// One line read from stdin.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line {
    Text(String),
    /// Ctrl-C on a TTY: the line is dropped.
    Interrupt,
    /// Stdin closed, or Ctrl-D on an empty line on a TTY.
    Eof,
}

/// Where input comes from, with bytes read ahead of need kept for the next line.
pub(super) struct Input {
    rx: Option<mpsc::Receiver<Bytes>>,
    pending: VecDeque<u8>,
    tty: bool,
}

impl Input {
    /// Whether kubectl attached stdin at all.
    pub(super) fn attached(&self) -> bool {
        self.rx.is_some()
    }

    /// The next byte, reading stdin when nothing is pending; `None` at end of input.
    async fn next_byte(&mut self) -> Option<u8> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            let chunk = self.rx.as_mut()?.recv().await;
            match chunk {
                Some(chunk) => self.pending.extend(chunk.iter()),
                None => {
                    self.rx = None;
                    return None;
                }
            }
        }
    }

    /// Reads one line. On a TTY, echoes what is typed to `out` and edits as a terminal would;
    /// otherwise lines end at `\n` (a `\r` before it is dropped).
    pub(super) async fn read_line(&mut self, out: &Output) -> Line {
        let mut line: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.next_byte().await else {
                return if line.is_empty() {
                    Line::Eof
                } else {
                    Line::Text(String::from_utf8_lossy(&line).into_owned())
                };
            };
            if !self.tty {
                match b {
                    b'\n' => {
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                        return Line::Text(String::from_utf8_lossy(&line).into_owned());
                    }
                    _ if line.len() < MAX_LINE_BYTES => line.push(b),
                    _ => {}
                }
                continue;
            }
            match b {
                b'\r' | b'\n' => {
                    if b == b'\r' && self.pending.front() == Some(&b'\n') {
                        self.pending.pop_front();
                    }
                    out.out("\r\n").await;
                    return Line::Text(String::from_utf8_lossy(&line).into_owned());
                }
                CTRL_C => {
                    out.out("^C\r\n").await;
                    return Line::Interrupt;
                }
                CTRL_D if line.is_empty() => {
                    out.out("\r\n").await;
                    return Line::Eof;
                }
                BACKSPACE | DELETE if pop_char(&mut line) => out.out("\x08 \x08").await,
                BACKSPACE | DELETE => {}
                ESC => self.skip_escape().await,
                b if b < 0x20 && b != b'\t' => {}
                b if line.len() < MAX_LINE_BYTES => {
                    line.push(b);
                    out.out_bytes(&[b]).await;
                }
                _ => {}
            }
        }
    }

    /// Drops an escape sequence (arrow keys and the like: `ESC [ … final`), which the line
    /// editor does not support.
    async fn skip_escape(&mut self) {
        match self.next_byte().await {
            Some(b'[') | Some(b'O') => {
                while let Some(b) = self.next_byte().await {
                    if (0x40..=0x7e).contains(&b) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }

    /// Resolves when Ctrl-C arrives on stdin; never without stdin. Other bytes read meanwhile
    /// are kept for the next line (type-ahead). Cancel-safe.
    pub(super) async fn interrupted(&mut self) {
        loop {
            if let Some(at) = self.pending.iter().position(|&b| b == CTRL_C) {
                self.pending.drain(..=at);
                return;
            }
            let chunk = match self.rx.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            };
            match chunk {
                Some(chunk) => self.pending.extend(chunk.iter()),
                None => self.rx = None,
            }
        }
    }
}

/// Removes the last UTF-8 character of `line`; false when it was empty.
fn pop_char(line: &mut Vec<u8>) -> bool {
    if line.is_empty() {
        return false;
    }
    while let Some(b) = line.pop() {
        if b & 0xc0 != 0x80 {
            break;
        }
    }
    true
}
