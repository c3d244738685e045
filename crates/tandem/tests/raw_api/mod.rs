//! A minimal blocking HTTP/1.1-over-TLS client for the fault tests: many requests per second
//! from several threads (kubectl starts a process per call) and byte-level access to a watch's
//! chunked stream, which is what these tests check. It authenticates with the admin token from
//! the server's `pki/tokens.csv` and trusts the server's CA.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Where and how to reach one server.
#[derive(Clone)]
pub struct Api {
    pub addr: String,
    token: String,
    tls: Arc<rustls::ClientConfig>,
}

/// A response: status code and body.
#[derive(Debug)]
pub struct Reply {
    pub code: u16,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

impl Api {
    /// The server whose data dir is `data_dir`, listening at `url` (`https://127.0.0.1:PORT`).
    pub fn new(data_dir: &Path, url: &str) -> io::Result<Api> {
        let pki = data_dir.join("pki");
        let ca = std::fs::read(pki.join("ca.crt"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            let cert = cert.map_err(io::Error::other)?;
            roots.add(cert).map_err(io::Error::other)?;
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tokens = std::fs::read_to_string(pki.join("tokens.csv"))?;
        let token = tokens
            .split(',')
            .next()
            .map(|t| t.trim().to_string())
            .ok_or_else(|| io::Error::other("no token in tokens.csv"))?;
        Ok(Api {
            addr: url.trim_start_matches("https://").to_string(),
            token,
            tls: Arc::new(tls),
        })
    }

    /// Opens a keep-alive connection; every read on it gives up after `timeout`.
    pub fn connect(&self, timeout: Duration) -> io::Result<Conn> {
        let tcp = TcpStream::connect(&self.addr)?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        let name = ServerName::try_from("127.0.0.1").map_err(io::Error::other)?;
        let conn =
            rustls::ClientConnection::new(self.tls.clone(), name).map_err(io::Error::other)?;
        Ok(Conn {
            io: BufReader::new(rustls::StreamOwned::new(conn, tcp)),
            api: self.clone(),
            content_type: "application/json".to_string(),
        })
    }

    /// One request on a fresh connection.
    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> io::Result<Reply> {
        self.connect(Duration::from_secs(30))?
            .request(method, path, body)
    }

    /// One request with a body of `content_type` (a patch type, YAML) on a new connection.
    pub fn request_as(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> io::Result<Reply> {
        let mut conn = self.connect(Duration::from_secs(30))?;
        conn.content_type = content_type.to_string();
        conn.request(method, path, Some(body))
    }
}

/// One keep-alive HTTP/1.1 connection.
pub struct Conn {
    io: BufReader<Tls>,
    api: Api,
    /// The `Content-Type` of request bodies.
    content_type: String,
}

impl Conn {
    fn send_head(&mut self, method: &str, path: &str, body: Option<&str>) -> io::Result<()> {
        let body = body.unwrap_or("");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: {}\r\nAccept: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.api.addr,
            self.api.token,
            self.content_type,
            body.len()
        );
        let stream = self.io.get_mut();
        stream.write_all(head.as_bytes())?;
        stream.flush()
    }

    /// Reads the status line and headers; returns the code and whether the body is chunked
    /// and its length otherwise.
    fn read_head(&mut self) -> io::Result<(u16, bool, usize)> {
        let mut line = String::new();
        if self.io.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no response"));
        }
        let code = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| io::Error::other(format!("bad status line {line:?}")))?;
        let (mut chunked, mut length) = (false, 0);
        loop {
            line.clear();
            if self.io.read_line(&mut line)? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "headers cut"));
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let lower = l.to_ascii_lowercase();
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        Ok((code, chunked, length))
    }

    /// One request and its whole response.
    pub fn request(&mut self, method: &str, path: &str, body: Option<&str>) -> io::Result<Reply> {
        self.send_head(method, path, body)?;
        let (code, chunked, length) = self.read_head()?;
        let mut body = Vec::new();
        if chunked {
            let mut chunks = Chunks { io: &mut self.io };
            while let Some(chunk) = chunks.next_chunk()? {
                body.extend_from_slice(&chunk);
            }
        } else {
            body.resize(length, 0);
            self.io.read_exact(&mut body)?;
        }
        Ok(Reply {
            code,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }

    /// Starts a streaming GET (a watch) and returns its status code; read the body with
    /// [`Conn::next_chunk`].
    pub fn start_stream(&mut self, path: &str) -> io::Result<u16> {
        self.send_head("GET", path, None)?;
        let (code, chunked, _) = self.read_head()?;
        if !chunked {
            return Err(io::Error::other(format!("{code}: body is not chunked")));
        }
        Ok(code)
    }

    /// The next chunk of a chunked body; `None` once the terminating zero-length chunk (and its
    /// final CRLF) has arrived. A stream cut before that is an `UnexpectedEof` error.
    pub fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        Chunks { io: &mut self.io }.next_chunk()
    }

    /// Changes the read timeout of the connection.
    pub fn set_read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.io.get_ref().sock.set_read_timeout(Some(timeout))
    }
}

struct Chunks<'a> {
    io: &'a mut BufReader<Tls>,
}

impl Chunks<'_> {
    fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut line = String::new();
        if self.io.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "stream ended without the final chunk",
            ));
        }
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| io::Error::other(format!("bad chunk size line {line:?}")))?;
        let mut data = vec![0; size + 2];
        self.io.read_exact(&mut data)?;
        if &data[size..] != b"\r\n" {
            return Err(io::Error::other("chunk not followed by CRLF"));
        }
        data.truncate(size);
        Ok((size > 0).then_some(data))
    }
}
